package cuda

import (
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
)

func TestEmbeddingGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(11)
	for _, dt := range dtypes {
		// [n, v, d]: repeated ids (n > v), vector rows (d a multiple of 8)
		// and not, several column tiles of the gradient (d > 1024).
		for _, sh := range [][3]int{{1, 1, 1}, {50, 7, 3}, {300, 40, 64}, {9, 1000, 768}, {20, 3, 1500}, {600, 2, 8}} {
			n, v, d := sh[0], sh[1], sh[2]
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				table, dy := randIn(rng, dt, v*d, -1, 1), randIn(rng, dt, n*d, -1, 1)
				ids := make([]int32, n)
				for i := range ids {
					ids[i] = int32(rng.IntN(v))
				}
				pt, pi, py := e.put(t, dt, table), e.putI32(t, ids), e.alloc(t, dt, n*d)
				must(t, e.k.Embedding(e.s, dt, pt, pi, py, v, d, n))
				want := make([]float64, n*d)
				for i, id := range ids {
					for j := range d {
						want[i*d+j] = float64(table[int(id)*d+j])
					}
				}
				check(t, "Embedding", dt, e.get(t, dt, py, n*d), want, exact)

				pdy, pdt := e.put(t, dt, dy), e.alloc(t, dt, v*d)
				must(t, e.k.EmbeddingBackward(e.s, dt, pi, pdy, pdt, v, d, n))
				got := e.get(t, dt, pdt, v*d)
				wantDT := make([]float64, v*d)
				for i, id := range ids {
					for j := range d {
						wantDT[int(id)*d+j] += float64(dy[i*d+j])
					}
				}
				check(t, "EmbeddingBackward", dt, got, wantDT, compound)
				if dt == graph.F32 {
					// Added in order of position, as kernels/cpu adds.
					c := make([]float32, v*d)
					must(t, cpu.EmbeddingBackward(nil, ids, dy, c, v, d))
					for i := range c {
						if got[i] != c[i] {
							t.Fatalf("dtable[%d] = %v, kernels/cpu %v", i, got[i], c[i])
						}
					}
				}

				// An id out of range gives a NaN row and no gradient.
				bad := []int32{int32(v), -1}
				pbad, pyb := e.putI32(t, bad), e.alloc(t, dt, 2*d)
				must(t, e.k.Embedding(e.s, dt, pt, pbad, pyb, v, d, 2))
				for i, y := range e.get(t, dt, pyb, 2*d) {
					if !math.IsNaN(float64(y)) {
						t.Fatalf("element %d of a bad id's row: %v, want NaN", i, y)
					}
				}
				must(t, e.k.EmbeddingBackward(e.s, dt, pbad, pdy, pdt, v, d, 2))
				for i, g := range e.get(t, dt, pdt, v*d) {
					if g != 0 {
						t.Fatalf("dtable[%d] = %v from bad ids, want 0", i, g)
					}
				}
			})
		}
	}
}
