package cpu

import (
	"math"
	"testing"
)

// The tabulated Φ and φ agree with math.Erfc and math.Exp to within
// 3·10⁻¹⁰ absolute everywhere; Φ within a float32 ulp relative down to −5
// (v·Φ(v) ≈ −1.4·10⁻⁶) and 10⁻⁵ relative to the end of the table: at and
// between the nodes, in the tails and beyond the table.
func TestNormalTable(t *testing.T) {
	var worstAbs, worstBody, worstTail float64
	for i := -1_600_000; i <= 1_600_000; i++ {
		v := float64(i) * 1e-5 * math.Pi / 3 // not on the nodes' grid
		cdf, pdf := normal(v)
		wantCDF := 0.5 * math.Erfc(-v/math.Sqrt2)
		wantPDF := math.Exp(-0.5*v*v) / math.Sqrt(2*math.Pi)
		worstAbs = max(worstAbs, math.Abs(cdf-wantCDF), math.Abs(pdf-wantPDF))
		switch rel := math.Abs(cdf-wantCDF) / wantCDF; {
		case v >= -5:
			worstBody = max(worstBody, rel)
		case v > -normalRange:
			worstTail = max(worstTail, rel)
		}
	}
	if worstAbs > 3e-10 || worstBody > 1.2e-7 || worstTail > 1e-5 {
		t.Errorf("Φ, φ: worst absolute error %.3g (want ≤ 3e-10); worst relative error of Φ %.3g above −5 (want ≤ 1.2e-7), %.3g below (want ≤ 1e-5)",
			worstAbs, worstBody, worstTail)
	}
	if v := float32(-normalRange); v*float32(0.5*math.Erfc(normalRange/math.Sqrt2)) != 0 {
		t.Errorf("v·Φ(v) at the table's end is not 0 in float32: the table must go further")
	}
	for _, c := range []struct{ v, cdf, pdf float64 }{
		{-normalRange, 0, 0}, {-math.MaxFloat64, 0, 0}, {math.Inf(-1), 0, 0},
		{normalRange, 1, 0}, {1e300, 1, 0}, {math.Inf(1), 1, 0},
	} {
		if cdf, pdf := normal(c.v); cdf != c.cdf || pdf != c.pdf {
			t.Errorf("normal(%g) = %g, %g; want %g, %g", c.v, cdf, pdf, c.cdf, c.pdf)
		}
	}
	if g := gelu(float32(math.NaN())); !math.IsNaN(float64(g)) {
		t.Errorf("gelu(NaN) = %v, want NaN", g)
	}
}

func BenchmarkGELU(b *testing.B) {
	x := randSlice(newRNG(1), 1<<16)
	y := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		GELU(nil, x, y)
	}
}

func BenchmarkGELUBackward(b *testing.B) {
	x := randSlice(newRNG(1), 1<<16)
	dy := randSlice(newRNG(2), len(x))
	dx := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		GELUBackward(nil, x, dy, dx)
	}
}
