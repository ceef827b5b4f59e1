package cpu

import (
	"fmt"
	"testing"
)

// axisShape views a tensor as [outer, mid, inner] around one axis.
type axisShape struct{ outer, mid, inner int }

func (a axisShape) String() string { return fmt.Sprintf("%dx%dx%d", a.outer, a.mid, a.inner) }

var axisCases = []axisShape{
	{1, 1, 1}, {3, 4, 5}, {5, 7, 1}, {1, 6, 9}, {4, 1, 3},
	{2, 3, grainElems/2 + 3}, {3 * grainElems / 5, 5, 1}, // long enough to split across workers
}

func biasAddRef(x, b []float64, a axisShape) []float64 {
	y := make([]float64, len(x))
	for o := range a.outer {
		for j := range a.mid {
			for i := range a.inner {
				k := (o*a.mid+j)*a.inner + i
				y[k] = x[k] + b[j]
			}
		}
	}
	return y
}

func TestBiasAdd(t *testing.T) {
	for i, a := range axisCases {
		rng := newRNG(uint64(i))
		x, b := randSlice(rng, a.outer*a.mid*a.inner), randSlice(rng, a.mid)
		want := biasAddRef(to64(x), to64(b), a)
		for _, tp := range testPools {
			t.Run(a.String()+"/"+tp.name, func(t *testing.T) {
				y := make([]float32, len(x))
				BiasAdd(tp.p, x, b, y, a.outer, a.mid, a.inner)
				checkClose(t, "y", y, want, fwdTol)
			})
		}
	}
}

func TestBiasGrad(t *testing.T) {
	for i, a := range axisCases {
		if a.outer*a.mid*a.inner > 5000 {
			continue // finite differences are quadratic; sums are checked in TestBiasGradLarge
		}
		rng := newRNG(uint64(i) + 10)
		x, b := to64(randSlice(rng, a.outer*a.mid*a.inner)), randSlice(rng, a.mid)
		r := randSlice(rng, len(x))
		want := centralDiff(projected(r, func(b []float64) []float64 { return biasAddRef(x, b, a) }), to64(b), fdStep)
		for _, tp := range testPools {
			t.Run(a.String()+"/"+tp.name, func(t *testing.T) {
				db := randSlice(rng, a.mid)
				BiasGrad(tp.p, r, db, a.outer, a.mid, a.inner)
				checkClose(t, "db", db, want, gradTol)
			})
		}
	}
}

func TestBiasGradLarge(t *testing.T) {
	for i, a := range axisCases {
		dy := randSlice(newRNG(uint64(i)+20), a.outer*a.mid*a.inner)
		want := make([]float64, a.mid)
		for k, v := range dy {
			want[k/a.inner%a.mid] += float64(v)
		}
		for _, tp := range testPools {
			t.Run(a.String()+"/"+tp.name, func(t *testing.T) {
				db := make([]float32, a.mid)
				BiasGrad(tp.p, dy, db, a.outer, a.mid, a.inner)
				checkClose(t, "db", db, want, fwdTol)
			})
		}
	}
}

func TestBiasPanicsOnBadCall(t *testing.T) {
	x := make([]float32, 24)
	for name, f := range map[string]func(){
		"BiasAdd short b":  func() { BiasAdd(nil, x, x[:3], x, 2, 4, 3) },
		"BiasAdd bad dims": func() { BiasAdd(nil, x, x[:4], x, 2, 4, 2) },
		"BiasGrad long db": func() { BiasGrad(nil, x, x[:5], 2, 4, 3) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}
