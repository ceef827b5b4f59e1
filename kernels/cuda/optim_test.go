package cuda

import (
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// The updates against float64 references, with the rate given and read
// from a table by the iteration number; Adam also as AdamW. A table read
// at another index than it % len, or a decay coupled to the gradient,
// fails them.
func TestOptimizersGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(12)
	const mom, wd, b1, b2, eps = 0.9, 0.01, 0.9, 0.999, 1e-8
	const it = 4 // step 5
	// The table's entry for iteration 4 is its second: another index gives
	// another rate.
	table := e.put(t, graph.F32, []float32{0.5, 0.05, 2})
	iter := e.putI64(t, it)
	rates := []struct {
		name string
		rate Rate
		lr   float64
	}{{"lr", Rate{LR: 0.05}, 0.05}, {"table", Rate{LR: 7, Table: table, Len: 3}, 0.05}}
	for _, dt := range dtypes {
		for _, n := range elementwiseSizes {
			for _, off := range offsets {
				for _, r := range rates {
					t.Run(name(dt, "/", n, "/off", off, "/", r.name), func(t *testing.T) {
						lr := r.lr
						w, g, m, v := randIn(rng, dt, n, -1, 1), randIn(rng, dt, n, -1, 1), randIn(rng, dt, n, -0.1, 0.1), randIn(rng, dt, n, 0, 0.01)
						pw, pg, pm, pv := e.alloc(t, dt, n+1), e.alloc(t, dt, n+1), e.alloc(t, dt, n+1), e.alloc(t, dt, n+1)
						pw, pg, pm, pv = at(pw, dt, off), at(pg, dt, off), at(pm, dt, off), at(pv, dt, off)
						reset := func() {
							e.putAt(t, pw, dt, w)
							e.putAt(t, pg, dt, g)
							e.putAt(t, pm, dt, m)
							e.putAt(t, pv, dt, v)
						}
						ww, wm, wv := make([]float64, n), make([]float64, n), make([]float64, n)

						reset()
						must(t, e.k.SGDUpdate(e.s, dt, pw, pg, r.rate, wd, iter, n))
						for i := range ww {
							ww[i] = float64(w[i]) - lr*(float64(g[i])+wd*float64(w[i]))
						}
						check(t, "SGDUpdate w", dt, e.get(t, dt, pw, n), ww, compound)
						check(t, "SGDUpdate g (unchanged)", dt, e.get(t, dt, pg, n), to64(g), exact)

						reset()
						must(t, e.k.MomentumUpdate(e.s, dt, pw, pg, pv, r.rate, mom, wd, iter, n))
						for i := range ww {
							vi := mom*float64(v[i]) + float64(g[i]) + wd*float64(w[i])
							ww[i], wv[i] = float64(w[i])-lr*vi, vi
						}
						check(t, "MomentumUpdate w", dt, e.get(t, dt, pw, n), ww, compound)
						check(t, "MomentumUpdate v", dt, e.get(t, dt, pv, n), wv, compound)

						for _, decoupled := range []bool{false, true} {
							what := map[bool]string{false: "AdamUpdate", true: "AdamUpdate (AdamW)"}[decoupled]
							reset()
							must(t, e.k.AdamUpdate(e.s, dt, pw, pg, pm, pv, r.rate, Adam{Beta1: b1, Beta2: b2, Eps: eps, WeightDecay: wd, Decoupled: decoupled}, iter, n))
							for i := range ww {
								if decoupled {
									ww[i], wm[i], wv[i] = refAdamW(float64(w[i]), float64(g[i]), float64(m[i]), float64(v[i]), lr, b1, b2, eps, wd, it+1)
								} else {
									ww[i], wm[i], wv[i] = refAdam(float64(w[i]), float64(g[i]), float64(m[i]), float64(v[i]), lr, b1, b2, eps, wd, it+1)
								}
							}
							check(t, what+" w", dt, e.get(t, dt, pw, n), ww, compound)
							check(t, what+" m", dt, e.get(t, dt, pm, n), wm, compound)
							check(t, what+" v", dt, e.get(t, dt, pv, n), wv, compound)
						}
					})
				}
			}
		}
	}
}
