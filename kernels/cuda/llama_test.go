package cuda

import "testing"

// TestRoPEGPU checks the rotary embedding and its gradient against the
// float64 reference: multi-head and grouped-query layouts, the smallest
// head, LLaMA-3's theta, positions far enough for the slow frequencies to
// turn, and rows of several sequences.
func TestRoPEGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(40)
	// [rows, seq, heads, kv heads, d]
	for _, sh := range [][5]int{{1, 1, 1, 1, 2}, {10, 5, 2, 2, 4}, {14, 7, 4, 2, 6}, {600, 300, 2, 1, 8}, {64, 32, 8, 2, 128}} {
		rows, seq, heads, kv, d := sh[0], sh[1], sh[2], sh[3], sh[4]
		for _, theta := range []float64{10000, 500000} {
			for _, dt := range dtypes {
				t.Run(name(dt, "/", sh, "/theta", theta), func(t *testing.T) {
					n := rows * (heads + 2*kv) * d
					x := randIn(rng, dt, n, -2, 2)
					px, py, pdx := e.put(t, dt, x), e.alloc(t, dt, n), e.alloc(t, dt, n)
					must(t, e.k.RoPEForward(e.s, dt, px, py, rows, seq, heads, kv, d, theta))
					check(t, "y", dt, e.get(t, dt, py, n), refRoPE(to64(x), rows, seq, heads, kv, d, theta, 1), exact)
					must(t, e.k.RoPEBackward(e.s, dt, px, pdx, rows, seq, heads, kv, d, theta))
					check(t, "dx", dt, e.get(t, dt, pdx, n), refRoPE(to64(x), rows, seq, heads, kv, d, theta, -1), exact)
				})
			}
		}
	}
}

// TestSwiGLUGPU checks SwiGLU and its two gradients against the float64
// reference, through the sigmoid's bend and out to its tails.
func TestSwiGLUGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(41)
	for _, dt := range dtypes {
		for _, n := range elementwiseSizes {
			for _, off := range offsets {
				t.Run(name(dt, "/", n, "/off", off), func(t *testing.T) {
					g, u, dy := randIn(rng, dt, n, -8, 8), randIn(rng, dt, n, -1, 1), randIn(rng, dt, n, -1, 1)
					pg, pu, pdy := at(e.alloc(t, dt, n+1), dt, off), at(e.alloc(t, dt, n+1), dt, off), at(e.alloc(t, dt, n+1), dt, off)
					py, pdg, pdu := at(e.alloc(t, dt, n+1), dt, off), at(e.alloc(t, dt, n+1), dt, off), at(e.alloc(t, dt, n+1), dt, off)
					e.putAt(t, pg, dt, g)
					e.putAt(t, pu, dt, u)
					e.putAt(t, pdy, dt, dy)
					must(t, e.k.SwiGLU(e.s, dt, pg, pu, py, n))
					must(t, e.k.SwiGLUBackward(e.s, dt, pg, pu, pdy, pdg, pdu, n))
					y, dg, du := make([]float64, n), make([]float64, n), make([]float64, n)
					for i := range y {
						y[i], dg[i], du[i] = refSwiGLU(float64(g[i]), float64(u[i]), float64(dy[i]))
					}
					check(t, "y", dt, e.get(t, dt, py, n), y, compound)
					check(t, "dgate", dt, e.get(t, dt, pdg, n), dg, compound)
					check(t, "dup", dt, e.get(t, dt, pdu, n), du, compound)
				})
			}
		}
	}
}
