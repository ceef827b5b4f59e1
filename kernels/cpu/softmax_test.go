package cpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func softmaxRef(x []float64, rows, cols int) []float64 {
	y := make([]float64, len(x))
	for r := range rows {
		row, out := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, v)
		}
		var s float64
		for j, v := range row {
			out[j] = math.Exp(v - m)
			s += out[j]
		}
		for j := range out {
			out[j] /= s
		}
	}
	return y
}

// crossEntropyRef is −mean_r log softmax(x)[r, labels[r]].
func crossEntropyRef(x []float64, labels []int32, rows, cols int) float64 {
	var loss float64
	scored := 0
	for r := range rows {
		if labels[r] == IgnoreLabel {
			continue
		}
		scored++
		row := x[r*cols : (r+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		loss += m + math.Log(s) - row[labels[r]]
	}
	if scored == 0 {
		return 0
	}
	return loss / float64(scored)
}

// ignoreSome labels every third row of labels IgnoreLabel, from the
// second, and returns them.
func ignoreSome(labels []int32) []int32 {
	for r := 1; r < len(labels); r += 3 {
		labels[r] = IgnoreLabel
	}
	return labels
}

type matShape struct{ rows, cols int }

func (m matShape) String() string { return fmt.Sprintf("%dx%d", m.rows, m.cols) }

var softmaxCases = []matShape{{1, 1}, {1, 10}, {3, 7}, {64, 10}, {5, 33}, {2*grainElems/10 + 1, 10}}

func randLabels(seed uint64, rows, cols int) []int32 {
	rng := newRNG(seed)
	labels := make([]int32, rows)
	for i := range labels {
		labels[i] = int32(rng.IntN(cols))
	}
	return labels
}

// scaledLogits returns logits spread over [−4, 4), so softmax is far from flat.
func scaledLogits(seed uint64, n int) []float32 {
	x := randSlice(newRNG(seed), n)
	Scale(nil, 4, x, x)
	return x
}

func TestSoftmax(t *testing.T) {
	for i, m := range softmaxCases {
		x := scaledLogits(uint64(i), m.rows*m.cols)
		want := softmaxRef(to64(x), m.rows, m.cols)
		for _, tp := range testPools {
			t.Run(m.String()+"/"+tp.name, func(t *testing.T) {
				y := make([]float32, len(x))
				Softmax(tp.p, x, y, m.rows, m.cols)
				checkClose(t, "y", y, want, fwdTol)
			})
		}
	}
}

func TestSoftmaxBackward(t *testing.T) {
	for i, m := range softmaxCases {
		if m.rows*m.cols > 1000 {
			continue
		}
		x := scaledLogits(uint64(i)+40, m.rows*m.cols)
		r := randSlice(newRNG(uint64(i)+41), len(x))
		want := centralDiff(projected(r, func(x []float64) []float64 { return softmaxRef(x, m.rows, m.cols) }), to64(x), fdStep)
		for _, tp := range testPools {
			t.Run(m.String()+"/"+tp.name, func(t *testing.T) {
				y, dx := make([]float32, len(x)), make([]float32, len(x))
				Softmax(tp.p, x, y, m.rows, m.cols)
				SoftmaxBackward(tp.p, y, r, dx, m.rows, m.cols)
				checkClose(t, "dx", dx, want, gradTol)
			})
		}
	}
}

// The loss, with every label scored and with some rows ignored (their
// labels IgnoreLabel, as a masked language model's unmasked positions).
func TestSoftmaxCrossEntropy(t *testing.T) {
	for i, m := range softmaxCases {
		for _, ignore := range []bool{false, true} {
			x := scaledLogits(uint64(i)+60, m.rows*m.cols)
			labels := randLabels(uint64(i), m.rows, m.cols)
			if ignore {
				labels = ignoreSome(labels)
			}
			want := crossEntropyRef(to64(x), labels, m.rows, m.cols)
			var serial float32
			for _, tp := range testPools {
				t.Run(fmt.Sprintf("%s/ignore=%v/%s", m, ignore, tp.name), func(t *testing.T) {
					loss, err := SoftmaxCrossEntropy(tp.p, x, labels, m.rows, m.cols)
					if err != nil {
						t.Fatalf("got error %v, want nil", err)
					}
					checkClose(t, "loss", []float32{loss}, []float64{want}, fwdTol)
					if tp.p == nil {
						serial = loss
					} else if loss != serial {
						t.Errorf("loss got %v with %d workers, want %v as serially", loss, tp.p.Workers(), serial)
					}
				})
			}
		}
	}
}

func TestSoftmaxCrossEntropyBackward(t *testing.T) {
	const dloss = 1.7
	for i, m := range softmaxCases {
		if m.rows*m.cols > 1000 {
			continue
		}
		for _, ignore := range []bool{false, true} {
			x := scaledLogits(uint64(i)+80, m.rows*m.cols)
			labels := randLabels(uint64(i)+1, m.rows, m.cols)
			if ignore {
				labels = ignoreSome(labels)
			}
			want := centralDiff(func(x []float64) float64 { return dloss * crossEntropyRef(x, labels, m.rows, m.cols) }, to64(x), fdStep)
			for _, tp := range testPools {
				t.Run(fmt.Sprintf("%s/ignore=%v/%s", m, ignore, tp.name), func(t *testing.T) {
					dx := make([]float32, len(x))
					for i := range dx {
						dx[i] = float32(math.NaN()) // every element is written, the ignored rows' too
					}
					if err := SoftmaxCrossEntropyBackward(tp.p, x, labels, dloss, dx, m.rows, m.cols); err != nil {
						t.Fatalf("got error %v, want nil", err)
					}
					checkClose(t, "dlogits", dx, want, gradTol)
				})
			}
		}
	}
}

// TestSoftmaxCrossEntropyExtremeLogits feeds logits of ±1e4, where a naive
// exp overflows to Inf or underflows to a log of 0.
func TestSoftmaxCrossEntropyExtremeLogits(t *testing.T) {
	x := []float32{
		1e4, -1e4, 0, // label 1: loss 2e4
		-1e4, -1e4, -1e4, // label 2: uniform, loss log 3
		1e4, 1e4 - 1, -1e4, // label 0: loss log(1+e⁻¹)
	}
	labels := []int32{1, 2, 0}
	want := (2e4 + math.Log(3) + math.Log1p(math.Exp(-1))) / 3
	loss, err := SoftmaxCrossEntropy(nil, x, labels, 3, 3)
	if err != nil || math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
		t.Fatalf("got %v, %v, want %v, nil", loss, err, want)
	}
	checkClose(t, "loss", []float32{loss}, []float64{want}, fwdTol)
	dx := make([]float32, len(x))
	if err := SoftmaxCrossEntropyBackward(nil, x, labels, 1, dx, 3, 3); err != nil {
		t.Fatalf("got error %v, want nil", err)
	}
	wantDx := softmaxRef(to64(x), 3, 3)
	for r, l := range labels {
		wantDx[r*3+int(l)]--
	}
	for i := range wantDx {
		wantDx[i] /= 3
	}
	checkClose(t, "dlogits", dx, wantDx, fwdTol)
	y := make([]float32, len(x))
	Softmax(nil, x, y, 3, 3)
	checkClose(t, "softmax", y, softmaxRef(to64(x), 3, 3), fwdTol)
}

func TestSoftmaxCrossEntropyBadLabel(t *testing.T) {
	x := make([]float32, 4*5)
	for _, bad := range []int32{-1, 5} {
		labels := []int32{0, 4, bad, 1}
		_, err := SoftmaxCrossEntropy(nil, x, labels, 4, 5)
		if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "row 2") {
			t.Errorf("label %d: got %v, want an ErrIndex naming row 2", bad, err)
		}
		dx := []float32{42}
		dx = append(dx, make([]float32, 19)...)
		err = SoftmaxCrossEntropyBackward(nil, x, labels, 1, dx, 4, 5)
		if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "row 2") {
			t.Errorf("backward, label %d: got %v, want an ErrIndex naming row 2", bad, err)
		}
		if dx[0] != 42 {
			t.Errorf("backward, label %d: dlogits[0] got %v, want 42 (untouched)", bad, dx[0])
		}
	}
}
