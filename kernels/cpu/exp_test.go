package cpu

import (
	"math"
	"slices"
	"testing"
)

// expInto and sumExp are math.Exp's sum to 10⁻⁹ relative, each value within
// a float32 rounding of math.Exp's, over (−708, 0] — at the ends of the
// steps (r = ±ln2/64), at random points — and math.Exp's outside.
func TestExpInto(t *testing.T) {
	xs := []float32{0, float32(math.Copysign(0, -1)), -1e-30, -1e-9, -math.Ln2 / 64, -math.Ln2 / 32, -0.5, -1, -math.Ln2,
		-10, -87.3, -103.9, -500, -707.9}
	for j := range 2000 {
		xs = append(xs, -float32(j)*math.Ln2/64) // the rounding boundaries of every step down to −21
	}
	rng := newRNG(3)
	for range 100000 {
		xs = append(xs, -float32(700*rng.Float64()*rng.Float64()))
	}
	for _, m := range []float32{0, 3.5, -1000} {
		x := make([]float32, len(xs))
		for i, v := range xs {
			x[i] = v + m
		}
		y := make([]float32, len(x))
		got, gotSum := expInto(x, y, m), sumExp(x, m)
		var want float64
		for i, v := range x {
			e := math.Exp(float64(v) - float64(m))
			want += e
			if w := float32(e); y[i] != w && y[i] != math.Nextafter32(w, 0) && y[i] != math.Nextafter32(w, 2*w) {
				t.Fatalf("m=%g: exp(%g − m): got %g, want %g", m, v, y[i], w)
			}
		}
		if e := math.Abs(got-want) / want; !(e < 1e-9) {
			t.Errorf("m=%g: expInto's sum: got %g, want %g (relative error %g)", m, got, want, e)
		}
		if gotSum != got {
			t.Errorf("m=%g: sumExp: got %g, want expInto's %g", m, gotSum, got)
		}
	}
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1)), -708, -745, -800, 1e-30, 0.5, 1, 88, float32(math.Inf(1))} {
		y := make([]float32, 1)
		s := expInto([]float32{v}, y, 0)
		want := math.Exp(float64(v))
		if s != want && !(math.IsNaN(s) && math.IsNaN(want)) || math.Float32bits(y[0]) != math.Float32bits(float32(want)) {
			t.Errorf("expInto(%g): got %g (%g stored), want math.Exp's %g", v, s, y[0], want)
		}
	}
}

func BenchmarkExp(b *testing.B) {
	x := randSlice(newRNG(1), 4096)
	for i := range x {
		x[i] = 8 * (x[i] - 1)
	}
	y := make([]float32, len(x))
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				y[i] = float32(math.Exp(float64(v)))
			}
		}
	})
	b.Run("expInto", func(b *testing.B) {
		for b.Loop() {
			expInto(x, y, 0)
		}
	})
}

// expInto on this CPU (four at a time with AVX2) gives expIntoGo's bits,
// value for value and in its sum, and sumExp sumExpGo's, for rows of every length up to 19 with
// values out of the fast range (NaN, ±∞, > 0, ≤ −708) at every position
// among ones in it, and for long random rows.
func TestExpIntoSameBits(t *testing.T) {
	rng := newRNG(5)
	odd := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0.25, -708, -750, float32(math.Copysign(0, -1))}
	check := func(x []float32, m float32) {
		t.Helper()
		want, got := make([]float32, len(x)), make([]float32, len(x))
		ws, gs := expIntoGo(x, want, m, 0), expInto(x, got, m)
		if math.Float64bits(ws) != math.Float64bits(gs) && !(math.IsNaN(ws) && math.IsNaN(gs)) {
			t.Fatalf("%v − %g: sum %v, want %v", x, m, gs, ws)
		}
		if ws, gs := sumExpGo(x, m), sumExp(x, m); math.Float64bits(ws) != math.Float64bits(gs) && !(math.IsNaN(ws) && math.IsNaN(gs)) {
			t.Fatalf("%v − %g: sumExp %v, want %v", x, m, gs, ws)
		}
		for i := range x {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("%v − %g: value %d: %v, want %v", x, m, i, got[i], want[i])
			}
		}
	}
	for n := range 20 {
		x := make([]float32, n)
		for i := range x {
			x[i] = -float32(30 * rng.Float64())
		}
		check(x, 0)
		check(x, 1.5)
		for i := range x {
			for _, v := range odd {
				y := slices.Clone(x)
				y[i] = v
				check(y, 0)
			}
		}
	}
	for _, n := range []int{1000, 4096, 50257} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(20 * (rng.Float64() - 0.9))
		}
		check(x, maxOf(x))
		check(x, 0) // values above m go to math.Exp
	}
}
