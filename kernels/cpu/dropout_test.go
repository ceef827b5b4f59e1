package cpu

import (
	"fmt"
	"math"
	"testing"
)

func TestDropoutKeepsFraction(t *testing.T) {
	const n = 100_000
	x := make([]float32, n)
	Fill(nil, 1, x)
	for _, rate := range []float32{0.1, 0.5, 0.9} {
		for _, tp := range testPools {
			t.Run(fmt.Sprintf("rate%v/%s", rate, tp.name), func(t *testing.T) {
				y := make([]float32, n)
				Dropout(tp.p, x, y, rate, 12345, 0)
				scale := 1 / (1 - rate)
				kept := 0
				for i, v := range y {
					switch v {
					case 0:
					case scale:
						kept++
					default:
						t.Fatalf("y[%d] got %v, want 0 or %v", i, v, scale)
					}
				}
				// Four standard deviations of a binomial fraction.
				tol := 4 * math.Sqrt(float64(rate*(1-rate))/n)
				if got, want := float64(kept)/n, float64(1-rate); math.Abs(got-want) > tol {
					t.Errorf("kept fraction got %.4f, want %.4f ± %.4f", got, want, tol)
				}
			})
		}
	}
}

// TestDropoutSplit checks that the mask depends only on (seed, offset+i):
// two calls on halves with the right offsets, any pool, and DropoutMask
// itself all agree.
func TestDropoutSplit(t *testing.T) {
	const n, rate, seed, offset = 3*grainElems + 17, 0.3, 99, 1000
	x := randSlice(newRNG(1), n)
	whole := make([]float32, n)
	Dropout(nil, x, whole, rate, seed, offset)
	for _, cut := range []int{0, 1, n / 3, n - 1} {
		for _, tp := range testPools {
			t.Run(fmt.Sprintf("cut%d/%s", cut, tp.name), func(t *testing.T) {
				y := make([]float32, n)
				Dropout(tp.p, x[:cut], y[:cut], rate, seed, offset)
				Dropout(tp.p, x[cut:], y[cut:], rate, seed, offset+uint64(cut))
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(whole[i]) {
						t.Fatalf("y[%d] got %v, want %v as in one call", i, y[i], whole[i])
					}
				}
			})
		}
	}
	for i := range whole {
		if got, want := whole[i] != 0, DropoutMask(seed, offset+uint64(i), rate); got != want {
			t.Fatalf("element %d kept got %v, want DropoutMask = %v", i, got, want)
		}
	}
}

func TestDropoutSeedsDiffer(t *testing.T) {
	const n, rate = 10_000, 0.5
	same := 0
	for i := range uint64(n) {
		if DropoutMask(1, i, rate) == DropoutMask(2, i, rate) {
			same++
		}
	}
	// Independent masks agree on half the elements.
	if got := float64(same) / n; math.Abs(got-0.5) > 0.02 {
		t.Errorf("agreement between seeds 1 and 2 got %.3f, want 0.5 ± 0.02", got)
	}
}

func TestDropoutBackward(t *testing.T) {
	const n, rate, seed, offset = 500, 0.4, 7, 3
	x := awayFromZero(2, n)
	dy := randSlice(newRNG(3), n)
	for _, tp := range testPools {
		t.Run(tp.name, func(t *testing.T) {
			y, dx := make([]float32, n), make([]float32, n)
			Dropout(tp.p, x, y, rate, seed, offset)
			DropoutBackward(tp.p, dy, dx, rate, seed, offset)
			// Forward is linear in x for a fixed mask: y_i = m_i·x_i, so the
			// gradient of Σ dy·y is dy·m = dy·y/x.
			want := make([]float64, n)
			for i := range want {
				want[i] = float64(dy[i]) * float64(y[i]) / float64(x[i])
			}
			checkClose(t, "dx", dx, want, fwdTol)
		})
	}
}

func TestDropoutEdgeRates(t *testing.T) {
	x := randSlice(newRNG(4), 100)
	tests := []struct {
		rate float32
		want func(v float32) float32
	}{
		{0, func(v float32) float32 { return v }},
		{1, func(float32) float32 { return 0 }},
		{1.5, func(float32) float32 { return 0 }},
		{-0.5, func(v float32) float32 { return v }},
	}
	for _, tc := range tests {
		y := make([]float32, len(x))
		Dropout(nil, x, y, tc.rate, 1, 0)
		for i, v := range x {
			if y[i] != tc.want(v) {
				t.Errorf("rate %v: y[%d] got %v, want %v", tc.rate, i, y[i], tc.want(v))
				break
			}
		}
	}
}
