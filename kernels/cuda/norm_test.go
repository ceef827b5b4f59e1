package cuda

import (
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
)

func TestLayerNormGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(8)
	const eps = 1e-5
	for _, dt := range dtypes {
		for _, sh := range append(rowShapes, [2]int{200, 768}) {
			rows, cols := sh[0], sh[1]
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				n := rows * cols
				x, g, b, dy := randIn(rng, dt, n, -2, 3), randIn(rng, dt, cols, 0.5, 1.5), randIn(rng, dt, cols, -1, 1), randIn(rng, dt, n, -1, 1)
				px, pg, pb, py := e.put(t, dt, x), e.put(t, dt, g), e.put(t, dt, b), e.alloc(t, dt, n)
				pm, pr := e.alloc(t, graph.F32, rows), e.alloc(t, graph.F32, rows)
				must(t, e.k.LayerNorm(e.s, dt, px, pg, pb, py, pm, pr, rows, cols, eps))
				wy, wm, wr := refLayerNorm(to64(x), to64(g), to64(b), rows, cols, eps)
				check(t, "LayerNorm y", dt, e.get(t, dt, py, n), wy, compound)
				// The statistics are float32 whatever dt is.
				check(t, "LayerNorm mean", graph.F32, e.get(t, graph.F32, pm, rows), wm, compound)
				check(t, "LayerNorm rstd", graph.F32, e.get(t, graph.F32, pr, rows), wr, compound)

				// The backward pass from the reference's statistics.
				m32, r32 := make([]float32, rows), make([]float32, rows)
				for i := range rows {
					m32[i], r32[i] = float32(wm[i]), float32(wr[i])
				}
				e.putAt(t, pm, graph.F32, m32)
				e.putAt(t, pr, graph.F32, r32)
				pdy, pdx, pdg, pdb := e.put(t, dt, dy), e.alloc(t, dt, n), e.alloc(t, dt, cols), e.alloc(t, dt, cols)
				work := e.alloc(t, graph.F32, int(LayerNormWorkspace(rows, cols)/4))
				must(t, e.k.LayerNormBackward(e.s, dt, px, pg, pdy, pm, pr, pdx, pdg, pdb, work, rows, cols))
				wdx, wdg, wdb := refLayerNormBwd(to64(x), to64(g), to64(dy), to64(m32), to64(r32), rows, cols)
				check(t, "LayerNormBackward dx", dt, e.get(t, dt, pdx, n), wdx, compound)
				check(t, "LayerNormBackward dgamma", dt, e.get(t, dt, pdg, cols), wdg, compound)
				check(t, "LayerNormBackward dbeta", dt, e.get(t, dt, pdb, cols), wdb, compound)
			})
		}
	}
}

func TestRMSNormGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(9)
	const eps = 1e-5
	for _, dt := range dtypes {
		for _, sh := range append(rowShapes, [2]int{200, 768}) {
			rows, cols := sh[0], sh[1]
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				n := rows * cols
				x, g, dy := randIn(rng, dt, n, -2, 3), randIn(rng, dt, cols, 0.5, 1.5), randIn(rng, dt, n, -1, 1)
				px, pg, py := e.put(t, dt, x), e.put(t, dt, g), e.alloc(t, dt, n)
				pr := e.alloc(t, graph.F32, rows)
				must(t, e.k.RMSNorm(e.s, dt, px, pg, py, pr, rows, cols, eps))
				wy, wr := refRMSNorm(to64(x), to64(g), rows, cols, eps)
				check(t, "RMSNorm y", dt, e.get(t, dt, py, n), wy, compound)
				// The statistics are float32 whatever dt is.
				check(t, "RMSNorm rstd", graph.F32, e.get(t, graph.F32, pr, rows), wr, compound)

				// The backward pass from the reference's statistics.
				r32 := make([]float32, rows)
				for i := range rows {
					r32[i] = float32(wr[i])
				}
				e.putAt(t, pr, graph.F32, r32)
				pdy, pdx, pdg := e.put(t, dt, dy), e.alloc(t, dt, n), e.alloc(t, dt, cols)
				work := e.alloc(t, graph.F32, int(RMSNormWorkspace(rows, cols)/4))
				must(t, e.k.RMSNormBackward(e.s, dt, px, pg, pdy, pr, pdx, pdg, work, rows, cols))
				wdx, wdg := refRMSNormBwd(to64(x), to64(g), to64(dy), to64(r32), rows, cols)
				if cols > 1 {
					check(t, "RMSNormBackward dx", dt, e.get(t, dt, pdx, n), wdx, compound)
				} else {
					flatRowDx(t, e.get(t, dt, pdx, n), wdx, x, g, dy, r32)
				}
				check(t, "RMSNormBackward dgamma", dt, e.get(t, dt, pdg, cols), wdg, compound)
			})
		}
	}
}

// flatRowDx checks RMSNorm's dx for rows of one column, where y = gamma·x/
// √(x²+eps) is flat (≈ gamma·sign(x)) and dx = rstd·(g − x̂²·g), g =
// dy·gamma, is all cancellation, of order eps: its error is held to a few
// float32 ulps of the terms that cancel, rstd·|g|, not to its own size.
func flatRowDx(t *testing.T, got []float32, want []float64, x, g, dy, rstd []float32) {
	t.Helper()
	for r, w := range want {
		bound := 1e-6 * math.Abs(float64(rstd[r])*float64(dy[r])*float64(g[0]))
		if d := math.Abs(float64(got[r]) - w); !(d <= bound) {
			t.Errorf("RMSNormBackward dx of a one-column row %d (x = %v): got %v, want %v within %.3g", r, x[r], got[r], w, bound)
		}
	}
}
