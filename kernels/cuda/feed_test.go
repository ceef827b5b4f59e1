package cuda

import (
	"encoding/binary"
	"testing"

	"github.com/flowkit/flowkit/graph"
)

func TestFeedGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(13)
	counter := e.putI64(t, 41)
	must(t, e.k.IterAdvance(e.s, counter))
	if got := int64(binary.LittleEndian.Uint64(e.getBytes(t, counter, 8))); got != 42 {
		t.Errorf("IterAdvance: counter %d, want 42", got)
	}

	hist := e.alloc(t, graph.F32, 3*4)
	must(t, e.k.LossLog(e.s, e.put(t, graph.F32, []float32{2.5}), hist, counter, 1, 3, 4))
	if got := e.get(t, graph.F32, hist, 12)[(42%4)*3+1]; got != 2.5 {
		t.Errorf("LossLog: hist[%d] = %v, want 2.5", (42%4)*3+1, got)
	}

	const rows, rowLen, batch, from, n = 37, 19, 16, 4, 9
	images := randIn(rng, graph.F32, rows*rowLen, -3, 3)
	labels := make([]int32, rows)
	for i := range labels {
		labels[i] = int32(i * 7)
	}
	pimg, plab := e.put(t, graph.F32, images), e.putI32(t, labels)
	pl := e.alloc(t, graph.I32, n)
	must(t, e.k.GatherInts(e.s, pl, plab, counter, batch, from, n, 1, rows))
	b := e.getBytes(t, pl, 4*n)
	for k := range n {
		g := (42*batch + from + k) % rows
		if got := int32(binary.LittleEndian.Uint32(b[4*k:])); got != labels[g] {
			t.Errorf("GatherInts: label %d = %d, want %d", k, got, labels[g])
		}
	}
	// Rows of token ids, every bit pattern kept.
	tokens := make([]int32, rows*rowLen)
	for i := range tokens {
		tokens[i] = int32(rng.Uint32())
	}
	ptok, pt := e.putI32(t, tokens), e.alloc(t, graph.I32, n*rowLen)
	must(t, e.k.GatherInts(e.s, pt, ptok, counter, batch, from, n, rowLen, rows))
	b = e.getBytes(t, pt, 4*n*rowLen)
	for k := range n {
		g := (42*batch + from + k) % rows
		for c := range rowLen {
			if got := int32(binary.LittleEndian.Uint32(b[4*(k*rowLen+c):])); got != tokens[g*rowLen+c] {
				t.Fatalf("GatherInts: token %d of row %d = %d, want %d", c, k, got, tokens[g*rowLen+c])
			}
		}
	}
	for _, dt := range dtypes {
		pd := e.alloc(t, dt, n*rowLen)
		must(t, e.k.GatherRows(e.s, dt, pd, pimg, counter, batch, from, n, rowLen, rows))
		want := make([]float64, n*rowLen)
		for k := range n {
			g := (42*batch + from + k) % rows
			for c := range rowLen {
				want[k*rowLen+c] = float64(round(dt, images[g*rowLen+c]))
			}
		}
		check(t, "GatherRows", dt, e.get(t, dt, pd, n*rowLen), want, exact)
	}
}
