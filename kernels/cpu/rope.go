package cpu

import "math"

// RoPEForward sets y to the rotary position embedding of the queries and
// keys of packed attention projections x [rows, (heads + 2·kvHeads)·d]
// (graph.RoPE): row r is position r mod seq, and each of the heads +
// kvHeads query and key heads has its pairs (i, i + d/2), i < d/2, rotated
// by the angle position·theta^(−2i/d) (LLaMA's rotate-half form); the
// value columns are copied. The angles and products are computed in
// float64 and rounded once, as the CUDA kernel does. y may alias x.
func RoPEForward(p *Pool, x, y []float32, rows, seq, heads, kvHeads, d int, theta float64) {
	rope("RoPEForward", p, x, y, rows, seq, heads, kvHeads, d, theta, 1)
}

// RoPEBackward sets dx to the gradient of RoPEForward given dy: the
// rotation is orthogonal, so dx is dy rotated by the opposite angles, the
// values' gradient copied. dx may alias dy.
func RoPEBackward(p *Pool, dy, dx []float32, rows, seq, heads, kvHeads, d int, theta float64) {
	rope("RoPEBackward", p, dy, dx, rows, seq, heads, kvHeads, d, theta, -1)
}

// rope rotates x into y by sign times RoPE's angles.
func rope(kernel string, p *Pool, x, y []float32, rows, seq, heads, kvHeads, d int, theta float64, sign float64) {
	if rows < 0 || seq < 1 || rows%seq != 0 || heads < 1 || kvHeads < 1 || heads%kvHeads != 0 || d < 2 || d%2 != 0 || !(theta > 0) {
		panic(shapeErr(kernel, "rows %d, seq %d, heads %d, kv heads %d, d %d, theta %g: want whole sequences, kv heads dividing heads, an even d and a positive theta",
			rows, seq, heads, kvHeads, d, theta))
	}
	cols := (heads + 2*kvHeads) * d
	checkLen(kernel, "x", len(x), rows*cols)
	checkLen(kernel, "y", len(y), rows*cols)
	half, rotated := d/2, (heads+kvHeads)*d
	inv := make([]float64, half) // theta^(−2i/d)
	for i := range inv {
		inv[i] = math.Pow(theta, -2*float64(i)/float64(d))
	}
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		cos, sin := make([]float64, half), make([]float64, half)
		for r := lo; r < hi; r++ {
			pos := float64(r % seq)
			for i, f := range inv {
				sin[i], cos[i] = math.Sincos(pos * f)
				sin[i] *= sign
			}
			xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
			for h := 0; h < rotated; h += d {
				a, b := xr[h:h+half], xr[h+half:h+d]
				ya, yb := yr[h:h+half], yr[h+half:h+d]
				for i := range half {
					u, v := float64(a[i]), float64(b[i])
					ya[i], yb[i] = float32(u*cos[i]-v*sin[i]), float32(v*cos[i]+u*sin[i])
				}
			}
			copy(yr[rotated:], xr[rotated:])
		}
	})
}
