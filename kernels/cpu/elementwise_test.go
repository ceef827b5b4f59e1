package cpu

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

// testPools are the pools every kernel test runs with: serial, and more
// workers than this machine has cores so that ranges split unevenly.
var testPools = []struct {
	name string
	p    *Pool
}{{"serial", nil}, {"pool3", NewPool(3)}}

const (
	fwdTol  = 1e-5 // float32 kernel against a float64 reference
	gradTol = 1e-4 // float32 backward kernel against float64 finite differences
	fdStep  = 1e-3
)

// projected returns L(x) = Σ r_i·f(x)_i, a scalar whose gradient is the
// backward kernel's output for dy = r: checking it covers every output.
func projected(r []float32, f func(x []float64) []float64) func(x []float64) float64 {
	return func(x []float64) float64 {
		var s float64
		for i, v := range f(x) {
			s += float64(r[i]) * v
		}
		return s
	}
}

// awayFromZero returns n values with |v| in [0.1, 1.1): no finite
// difference of step fdStep crosses a kink at 0.
func awayFromZero(seed uint64, n int) []float32 {
	s := randSlice(newRNG(seed), n)
	for i, v := range s {
		s[i] = float32(math.Copysign(0.1, float64(v))) + v
	}
	return s
}

// checkClose fails the test unless got is within tol of want.
func checkClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if e := relErr(got, want); !(e <= tol) {
		t.Errorf("%s: relative error got %.3g, want ≤ %.0g", what, e, tol)
	}
}

// mustPanicShape fails the test unless f panics with an error wrapping ErrShape.
func mustPanicShape(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		e, _ := recover().(error)
		if !errors.Is(e, ErrShape) {
			t.Errorf("panic got %v, want an error wrapping ErrShape", e)
		}
	}()
	f()
}

func mapRef(x []float64, f func(float64) float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = f(v)
	}
	return y
}

func geluRef(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }

var elementwiseSizes = []int{0, 1, 7, 1000, 3*grainElems + 5}

func TestUnaryForward(t *testing.T) {
	tests := []struct {
		name string
		run  func(p *Pool, x, y []float32)
		ref  func(float64) float64
	}{
		{"ReLU", ReLU, func(v float64) float64 { return max(v, 0) }},
		{"GELU", GELU, geluRef},
		{"Scale", func(p *Pool, x, y []float32) { Scale(p, -1.5, x, y) }, func(v float64) float64 { return -1.5 * v }},
		{"Copy", Copy, func(v float64) float64 { return v }},
	}
	for _, tc := range tests {
		for _, n := range elementwiseSizes {
			for _, tp := range testPools {
				t.Run(fmt.Sprintf("%s/%d/%s", tc.name, n, tp.name), func(t *testing.T) {
					x := randSlice(newRNG(uint64(n)), n)
					y := make([]float32, n)
					tc.run(tp.p, x, y)
					checkClose(t, "y", y, mapRef(to64(x), tc.ref), fwdTol)
					tc.run(tp.p, x, x) // in place
					checkClose(t, "in place", x, to64(y), 0)
				})
			}
		}
	}
}

func TestBinaryForward(t *testing.T) {
	tests := []struct {
		name string
		run  func(p *Pool, a, b, y []float32)
		ref  func(a, b float64) float64
	}{
		{"Add", Add, func(a, b float64) float64 { return a + b }},
		{"Mul", Mul, func(a, b float64) float64 { return a * b }},
		{"Axpy", func(p *Pool, a, b, y []float32) { copy(y, b); Axpy(p, 0.75, a, y) }, func(a, b float64) float64 { return b + 0.75*a }},
	}
	for _, tc := range tests {
		for _, n := range elementwiseSizes {
			for _, tp := range testPools {
				t.Run(fmt.Sprintf("%s/%d/%s", tc.name, n, tp.name), func(t *testing.T) {
					rng := newRNG(uint64(n) + 1)
					a, b := randSlice(rng, n), randSlice(rng, n)
					y := make([]float32, n)
					tc.run(tp.p, a, b, y)
					want := make([]float64, n)
					for i := range want {
						want[i] = tc.ref(float64(a[i]), float64(b[i]))
					}
					checkClose(t, "y", y, want, fwdTol)
				})
			}
		}
	}
}

func TestFill(t *testing.T) {
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), 2.5} {
		for _, tp := range testPools {
			y := randSlice(newRNG(3), 3*grainElems+1)
			Fill(tp.p, v, y)
			for i, got := range y {
				if math.Float32bits(got) != math.Float32bits(v) {
					t.Fatalf("Fill(%v) %s: y[%d] got %v, want %v", v, tp.name, i, got, v)
				}
			}
		}
	}
}

func TestUnaryBackward(t *testing.T) {
	tests := []struct {
		name string
		run  func(p *Pool, x, dy, dx []float32)
		ref  func(float64) float64
	}{
		{"ReLU", ReLUBackward, func(v float64) float64 { return max(v, 0) }},
		{"GELU", GELUBackward, geluRef},
	}
	for _, tc := range tests {
		for _, n := range []int{1, 9, 150} {
			for _, tp := range testPools {
				t.Run(fmt.Sprintf("%s/%d/%s", tc.name, n, tp.name), func(t *testing.T) {
					x := awayFromZero(uint64(n), n)
					r := randSlice(newRNG(uint64(n)+7), n)
					dx := make([]float32, n)
					tc.run(tp.p, x, r, dx)
					f := func(x []float64) []float64 { return mapRef(x, tc.ref) }
					checkClose(t, "dx", dx, centralDiff(projected(r, f), to64(x), fdStep), gradTol)
				})
			}
		}
	}
}

func TestElementwiseLengthMismatch(t *testing.T) {
	x, y := make([]float32, 4), make([]float32, 3)
	for name, f := range map[string]func(){
		"ReLU":         func() { ReLU(nil, x, y) },
		"Add":          func() { Add(nil, x, x, y) },
		"Axpy":         func() { Axpy(nil, 1, x, y) },
		"GELUBackward": func() { GELUBackward(nil, x, x, y) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}
