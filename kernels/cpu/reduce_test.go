package cpu

import (
	"math"
	"testing"
)

func reduceRef(x []float64, a axisShape, init float64, op func(acc, v float64) float64) []float64 {
	y := make([]float64, a.outer*a.inner)
	for o := range a.outer {
		for i := range a.inner {
			acc := init
			for j := range a.mid {
				acc = op(acc, x[(o*a.mid+j)*a.inner+i])
			}
			y[o*a.inner+i] = acc
		}
	}
	return y
}

func sumRef(x []float64, a axisShape) []float64 {
	return reduceRef(x, a, 0, func(acc, v float64) float64 { return acc + v })
}

func broadcastRef(x []float64, a axisShape) []float64 {
	y := make([]float64, a.outer*a.mid*a.inner)
	for k := range y {
		o, i := k/(a.mid*a.inner), k%a.inner
		y[k] = x[o*a.inner+i]
	}
	return y
}

func TestReduceForward(t *testing.T) {
	tests := []struct {
		name string
		run  func(p *Pool, x, y []float32, outer, r, inner int)
		ref  func(x []float64, a axisShape) []float64
	}{
		{"ReduceSum", ReduceSum, sumRef},
		{"ReduceMax", ReduceMax, func(x []float64, a axisShape) []float64 {
			return reduceRef(x, a, math.Inf(-1), math.Max)
		}},
	}
	for _, tc := range tests {
		for i, a := range axisCases {
			x := randSlice(newRNG(uint64(i)), a.outer*a.mid*a.inner)
			want := tc.ref(to64(x), a)
			for _, tp := range testPools {
				t.Run(tc.name+"/"+a.String()+"/"+tp.name, func(t *testing.T) {
					y := randSlice(newRNG(1), a.outer*a.inner)
					tc.run(tp.p, x, y, a.outer, a.mid, a.inner)
					checkClose(t, "y", y, want, fwdTol)
				})
			}
		}
	}
}

func TestBroadcastAxis(t *testing.T) {
	for i, a := range axisCases {
		x := randSlice(newRNG(uint64(i)), a.outer*a.inner)
		want := broadcastRef(to64(x), a)
		for _, tp := range testPools {
			t.Run(a.String()+"/"+tp.name, func(t *testing.T) {
				y := make([]float32, a.outer*a.mid*a.inner)
				BroadcastAxis(tp.p, x, y, a.outer, a.mid, a.inner)
				checkClose(t, "y", y, want, 0)
			})
		}
	}
}

// TestReduceSumGradient checks that BroadcastAxis is the gradient of
// ReduceSum, and ReduceSum that of BroadcastAxis.
func TestReduceSumGradient(t *testing.T) {
	for i, a := range axisCases {
		n := a.outer * a.mid * a.inner
		if n > 2000 {
			continue
		}
		rng := newRNG(uint64(i) + 30)
		x, rOut := randSlice(rng, n), randSlice(rng, a.outer*a.inner)
		xs, rIn := randSlice(rng, a.outer*a.inner), randSlice(rng, n)
		wantBroadcast := centralDiff(projected(rOut, func(x []float64) []float64 { return sumRef(x, a) }), to64(x), fdStep)
		wantSum := centralDiff(projected(rIn, func(x []float64) []float64 { return broadcastRef(x, a) }), to64(xs), fdStep)
		for _, tp := range testPools {
			t.Run(a.String()+"/"+tp.name, func(t *testing.T) {
				dx := make([]float32, n)
				BroadcastAxis(tp.p, rOut, dx, a.outer, a.mid, a.inner)
				checkClose(t, "BroadcastAxis as gradient of ReduceSum", dx, wantBroadcast, gradTol)
				dxs := make([]float32, len(xs))
				ReduceSum(tp.p, rIn, dxs, a.outer, a.mid, a.inner)
				checkClose(t, "ReduceSum as gradient of BroadcastAxis", dxs, wantSum, gradTol)
			})
		}
	}
}

func TestReduceMaxNaN(t *testing.T) {
	nan := float32(math.NaN())
	for _, inner := range []int{1, 2} {
		x := []float32{1, nan, 3, 4}
		y := make([]float32, 4/(2*inner)*inner)
		ReduceMax(nil, x, y, 4/(2*inner), 2, inner)
		if !math.IsNaN(float64(y[inner-1])) {
			t.Errorf("inner %d: got %v, want a NaN where the NaN was reduced", inner, y)
		}
	}
}

func TestReducePanicsOnBadCall(t *testing.T) {
	x := make([]float32, 12)
	for name, f := range map[string]func(){
		"ReduceSum short y":     func() { ReduceSum(nil, x, x[:3], 2, 3, 2) },
		"ReduceMax empty axis":  func() { ReduceMax(nil, x[:0], x[:4], 2, 0, 2) },
		"BroadcastAxis short y": func() { BroadcastAxis(nil, x[:4], x[:11], 2, 3, 2) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}
