package cuda

import "testing"

// rowShapes are [rows, cols]: the warp kernels' vector and streamed paths
// (multiples of 8 or not), the longest warp row, and the block kernels.
var rowShapes = [][2]int{{1, 1}, {5, 10}, {7, 33}, {33, 768}, {9, 1024}, {4, 1025}, {3, 3000}, {300, 64}}

func TestSoftmaxGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(7)
	for _, dt := range dtypes {
		for _, sh := range rowShapes {
			rows, cols := sh[0], sh[1]
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				n := rows * cols
				x, dy := randIn(rng, dt, n, -8, 8), randIn(rng, dt, n, -1, 1)
				px, py := e.put(t, dt, x), e.alloc(t, dt, n)
				must(t, e.k.Softmax(e.s, dt, px, py, rows, cols))
				y := e.get(t, dt, py, n)
				check(t, "Softmax", dt, y, refSoftmax(to64(x), rows, cols, false), compound)

				pdy, pdx := e.put(t, dt, dy), e.alloc(t, dt, n)
				must(t, e.k.SoftmaxBackward(e.s, dt, py, pdy, pdx, rows, cols))
				check(t, "SoftmaxBackward", dt, e.get(t, dt, pdx, n), refSoftmaxBwd(to64(y), to64(dy), rows, cols, 1, false), compound)

				// In place, as attention runs them, with the causal mask
				// (rows are positions r mod cols of square matrices).
				must(t, e.k.softmax("softmax", e.s, dt, px, px, rows, cols, true))
				yc := e.get(t, dt, px, n)
				check(t, "causal softmax", dt, yc, refSoftmax(to64(x), rows, cols, true), compound)
				e.putAt(t, pdx, dt, dy)
				must(t, e.k.softmaxBackward("softmax", e.s, dt, px, pdx, pdx, rows, cols, 0.5, true))
				check(t, "causal softmax backward", dt, e.get(t, dt, pdx, n), refSoftmaxBwd(to64(yc), to64(dy), rows, cols, 0.5, true), compound)
			})
		}
	}
}
