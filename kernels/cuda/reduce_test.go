package cuda

import (
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// axisShapes are [outer, c, inner]: a single element, odd sizes, a
// fully connected layer's bias, long rows, many rows, and several chunks of
// colsum.
var axisShapes = [][3]int{{1, 1, 1}, {3, 5, 7}, {2, 64, 1}, {4, 3, 5000}, {100, 3, 1}, {333, 40, 1}, {130, 17, 9}, {5, 8, 16}}

func TestBiasGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(5)
	for _, dt := range dtypes {
		for _, sh := range axisShapes {
			outer, c, inner := sh[0], sh[1], sh[2]
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				n := outer * c * inner
				x, b := randIn(rng, dt, n, -1, 1), randIn(rng, dt, c, -1, 1)
				px, pb, py := e.put(t, dt, x), e.put(t, dt, b), e.alloc(t, dt, n)
				must(t, e.k.BiasAdd(e.s, dt, px, pb, py, outer, c, inner))
				want := make([]float64, n)
				for i := range want {
					want[i] = float64(x[i]) + float64(b[(i/inner)%c])
				}
				check(t, "BiasAdd", dt, e.get(t, dt, py, n), want, exact)

				pdb, work := e.alloc(t, dt, c), e.alloc(t, graph.F32, int(BiasGradWorkspace(outer, c, inner)/4))
				must(t, e.k.BiasGrad(e.s, dt, px, pdb, work, outer, c, inner))
				_, wantDB := refAxisSums(to64(x), outer, c, inner)
				check(t, "BiasGrad", dt, e.get(t, dt, pdb, c), wantDB, compound)
			})
		}
	}
}

func TestReduceGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(6)
	for _, dt := range dtypes {
		for _, sh := range append(axisShapes, [3]int{3, 6000, 1}, [3]int{2000, 3, 1}) {
			outer, r, inner := sh[0], sh[1], sh[2]
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				n := outer * r * inner
				x := randIn(rng, dt, n, -1, 1)
				px, py := e.put(t, dt, x), e.alloc(t, dt, outer*inner)
				must(t, e.k.ReduceSum(e.s, dt, px, py, outer, r, inner))
				want, _ := refAxisSums(to64(x), outer, r, inner)
				check(t, "ReduceSum", dt, e.get(t, dt, py, outer*inner), want, compound)

				small := randIn(rng, dt, outer*inner, -1, 1)
				ps, pb := e.put(t, dt, small), e.alloc(t, dt, n)
				must(t, e.k.BroadcastAxis(e.s, dt, ps, pb, outer, r, inner))
				wantB := make([]float64, n)
				for i := range wantB {
					wantB[i] = float64(small[(i/(r*inner))*inner+i%inner])
				}
				check(t, "BroadcastAxis", dt, e.get(t, dt, pb, n), wantB, exact)
			})
		}
	}
}
