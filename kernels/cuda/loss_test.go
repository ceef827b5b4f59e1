package cuda

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
)

// The loss and its gradient against the float64 reference and kernels/cpu,
// with every row scored and with every third row (from the second)
// labelled cpu.IgnoreLabel, as a masked language model's unmasked
// positions: not scored, a zero gradient.
func TestSoftmaxCrossEntropyGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(9)
	for _, dt := range dtypes {
		// Classifier heads (a warp a row, in registers or streamed) and
		// vocabularies (a block a row).
		for _, sh := range [][2]int{{1, 1}, {64, 10}, {128, 10}, {33, 1000}, {5, 2000}, {300, 7}, {70, 1024}, {6, 50257}} {
			for _, ignore := range []bool{false, true} {
				rows, cols := sh[0], sh[1]
				t.Run(name(dt, "/", sh, "/ignore=", ignore), func(t *testing.T) {
					n := rows * cols
					x := randIn(rng, dt, n, -10, 10)
					labels := make([]int32, rows)
					for i := range labels {
						labels[i] = int32(rng.IntN(cols))
						if ignore && i%3 == 1 {
							labels[i] = cpu.IgnoreLabel
						}
					}
					px, pl, ploss := e.put(t, dt, x), e.putI32(t, labels), e.alloc(t, graph.F32, 1)
					work := e.alloc(t, graph.F32, int(SoftmaxCrossEntropyWorkspace(rows)/4))
					must(t, e.k.SoftmaxCrossEntropy(e.s, dt, px, pl, ploss, work, rows, cols))
					const dloss = 0.75
					wl, wdx := refSCE(to64(x), labels, rows, cols, dloss)
					loss := e.get(t, graph.F32, ploss, 1)
					// bf16 inputs are exact: the loss, in double, is as
					// accurate as f32's.
					check(t, "loss", graph.F32, loss, []float64{wl}, exact)
					cl, err := cpu.SoftmaxCrossEntropy(nil, x, labels, rows, cols)
					must(t, err)
					if math.Abs(float64(loss[0]-cl)) > 1e-6*math.Abs(float64(cl)) {
						t.Errorf("loss %v, kernels/cpu %v", loss[0], cl)
					}

					pd, pdx := e.put(t, graph.F32, []float32{dloss}), e.alloc(t, dt, n)
					must(t, e.k.SoftmaxCrossEntropyBackward(e.s, dt, px, pl, pd, pdx, rows, cols))
					check(t, "dlogits", dt, e.get(t, dt, pdx, n), wdx, compound)

					// A label out of range shows as NaN, never as a stray read.
					bad := make([]byte, 4)
					binary.LittleEndian.PutUint32(bad, uint32(cols))
					e.putBytes(t, pl, bad)
					must(t, e.k.SoftmaxCrossEntropy(e.s, dt, px, pl, ploss, work, rows, cols))
					must(t, e.k.SoftmaxCrossEntropyBackward(e.s, dt, px, pl, pd, pdx, rows, cols))
					if l := e.get(t, graph.F32, ploss, 1)[0]; !math.IsNaN(float64(l)) {
						t.Errorf("loss with a bad label: %v, want NaN", l)
					}
					if d := e.get(t, dt, pdx, 1)[0]; !math.IsNaN(float64(d)) {
						t.Errorf("dlogits with a bad label: %v, want NaN", d)
					}
				})
			}
		}
	}
	t.Run("no rows", func(t *testing.T) {
		ploss := e.put(t, graph.F32, []float32{7})
		must(t, e.k.SoftmaxCrossEntropy(e.s, graph.F32, e.alloc(t, graph.F32, 1), e.alloc(t, graph.I32, 1), ploss, e.alloc(t, graph.F32, 2), 0, 10))
		if l := e.get(t, graph.F32, ploss, 1)[0]; l != 0 {
			t.Errorf("loss of no rows: %v, want 0", l)
		}
	})
}

func TestMeanSquareGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(10)
	for _, dt := range dtypes {
		for _, n := range []int{1, 7, 2049, 1<<20 + 5, 3 << 21} {
			t.Run(name(dt, "/", n), func(t *testing.T) {
				x := randIn(rng, dt, n, -2, 2)
				px, ploss := e.put(t, dt, x), e.alloc(t, graph.F32, 1)
				work := e.alloc(t, graph.F32, int(MeanSquareWorkspace(n)/4))
				must(t, e.k.MeanSquare(e.s, dt, px, ploss, work, n))
				if dt == graph.F32 {
					want := cpu.MeanSquare(nil, x)
					if got := e.get(t, graph.F32, ploss, 1)[0]; math.Abs(float64(got-want)) > 1e-6*float64(want) {
						t.Errorf("MeanSquare %v, kernels/cpu %v", got, want)
					}
				}
				var s float64
				for _, v := range x {
					s += float64(v) * float64(v)
				}
				// Exact inputs squared and summed in double: float32
				// accuracy for both dtypes.
				check(t, "MeanSquare", graph.F32, e.get(t, graph.F32, ploss, 1), []float64{s / float64(n)}, exact)

				const dloss = 1.5
				pd, pdx := e.put(t, graph.F32, []float32{dloss}), e.alloc(t, dt, n)
				must(t, e.k.MeanSquareBackward(e.s, dt, px, pd, pdx, n))
				want := make([]float64, n)
				for i, v := range x {
					want[i] = 2 * float64(v) * dloss / float64(n)
				}
				check(t, "MeanSquareBackward", dt, e.get(t, dt, pdx, n), want, exact)
			})
		}
	}
}
