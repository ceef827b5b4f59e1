package cuda

import "testing"

func TestOptimizersGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(12)
	const lr, mom, wd, b1, b2, eps = 0.05, 0.9, 0.01, 0.9, 0.999, 1e-8
	for _, dt := range dtypes {
		for _, n := range elementwiseSizes {
			for _, off := range offsets {
				t.Run(name(dt, "/", n, "/off", off), func(t *testing.T) {
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
					must(t, e.k.SGDUpdate(e.s, dt, pw, pg, lr, wd, n))
					for i := range ww {
						ww[i] = float64(w[i]) - lr*(float64(g[i])+wd*float64(w[i]))
					}
					check(t, "SGDUpdate w", dt, e.get(t, dt, pw, n), ww, compound)
					check(t, "SGDUpdate g (unchanged)", dt, e.get(t, dt, pg, n), to64(g), exact)

					reset()
					must(t, e.k.MomentumUpdate(e.s, dt, pw, pg, pv, lr, mom, wd, n))
					for i := range ww {
						vi := mom*float64(v[i]) + float64(g[i]) + wd*float64(w[i])
						ww[i], wv[i] = float64(w[i])-lr*vi, vi
					}
					check(t, "MomentumUpdate w", dt, e.get(t, dt, pw, n), ww, compound)
					check(t, "MomentumUpdate v", dt, e.get(t, dt, pv, n), wv, compound)

					reset()
					const it = 4 // step 5
					must(t, e.k.AdamUpdate(e.s, dt, pw, pg, pm, pv, lr, b1, b2, eps, wd, e.putI64(t, it), n))
					for i := range ww {
						ww[i], wm[i], wv[i] = refAdam(float64(w[i]), float64(g[i]), float64(m[i]), float64(v[i]), lr, b1, b2, eps, wd, it+1)
					}
					check(t, "AdamUpdate w", dt, e.get(t, dt, pw, n), ww, compound)
					check(t, "AdamUpdate m", dt, e.get(t, dt, pm, n), wm, compound)
					check(t, "AdamUpdate v", dt, e.get(t, dt, pv, n), wv, compound)
				})
			}
		}
	}
}
