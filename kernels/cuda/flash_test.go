package cuda

import (
	"errors"
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// refLSE returns the log of each softmax row's normalizer of an attention,
// [batch, heads, seq].
func refLSE(qkv []float64, batch, seq, heads, kv, hid int, causal bool) []float64 {
	d := hid / heads
	ld, group := hid+2*kv*d, heads/kv
	lse := make([]float64, 0, batch*heads*seq)
	for b := range batch {
		for h := range heads {
			for i := range seq {
				n := seq
				if causal {
					n = i + 1
				}
				var sum float64
				for j := range n {
					var dot float64
					for c := range d {
						dot += qkv[(b*seq+i)*ld+h*d+c] * qkv[(b*seq+j)*ld+hid+h/group*d+c]
					}
					sum += math.Exp(dot / math.Sqrt(float64(d)))
				}
				lse = append(lse, math.Log(sum))
			}
		}
	}
	return lse
}

func TestFlashAttentionGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(17)
	// [batch, seq, heads, hid, kv heads]: every head width an instance
	// takes (16, 32, 64), sequences of one row, of less than a tile, and
	// across two and three tiles of every instance's sizes (16 to 64
	// rows), grouped-query attention with groups of 2 and 4.
	shapes := [][5]int{{1, 1, 1, 16, 1}, {2, 17, 2, 32, 2}, {1, 70, 2, 128, 1}, {1, 130, 1, 64, 1}, {2, 33, 4, 64, 1}}
	for _, dt := range dtypes {
		for _, sh := range shapes {
			batch, seq, heads, hid, kv := sh[0], sh[1], sh[2], sh[3], sh[4]
			if FlashAttentionSupported(dt, hid/heads) != nil {
				continue
			}
			for _, causal := range []bool{false, true} {
				width := hid + 2*kv*(hid/heads)
				t.Run(name(dt, "/", sh, "/causal=", causal), func(t *testing.T) {
					tt := batch * seq
					qkv, dout := randIn(rng, dt, tt*width, -1, 1), randIn(rng, dt, tt*hid, -1, 1)
					pq, po, pl := e.put(t, dt, qkv), e.alloc(t, dt, tt*hid), e.alloc(t, graph.F32, batch*heads*seq)
					must(t, e.k.FlashAttentionForward(e.s, dt, pq, po, pl, batch, seq, heads, kv, hid, causal))
					wo, wp := refAttention(to64(qkv), batch, seq, heads, kv, hid, causal)
					check(t, "out", dt, e.get(t, dt, po, tt*hid), wo, compound)
					check(t, "lse", dt, e.get(t, graph.F32, pl, batch*heads*seq), refLSE(to64(qkv), batch, seq, heads, kv, hid, causal), compound)

					// The backward pass from the forward pass's own out and
					// lse, as a step runs it.
					pdo, pdq := e.put(t, dt, dout), e.alloc(t, dt, tt*width)
					work := e.alloc(t, graph.F32, int(FlashAttentionWorkspace(batch, seq, heads)/4))
					must(t, e.k.FlashAttentionBackward(e.s, dt, pq, po, pl, pdo, pdq, work, batch, seq, heads, kv, hid, causal))
					want := refAttentionBwd(to64(qkv), wp, to64(dout), batch, seq, heads, kv, hid, causal)
					check(t, "dqkv", dt, e.get(t, dt, pdq, len(want)), want, compound)
				})
			}
		}
	}
}

// Head widths without an instance are refused with ErrArg, before any
// launch.
func TestFlashAttentionWidths(t *testing.T) {
	for _, c := range []struct {
		dt graph.DType
		d  int
		ok bool
	}{{graph.F32, 16, true}, {graph.F32, 64, true}, {graph.F32, 128, false}, {graph.BF16, 64, true}, {graph.BF16, 128, false}, {graph.BF16, 96, false}, {graph.BF16, 8, false}} {
		err := FlashAttentionSupported(c.dt, c.d)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrArg)) {
			t.Errorf("%v, d = %d: %v", c.dt, c.d, err)
		}
	}
	r := newRecorder(t)
	k := r.kernels()
	p := r.alloc("x", 1<<20)
	err := k.FlashAttentionForward(nil, graph.F32, p, p, p, 1, 4, 1, 128, 1, false)
	if !errors.Is(err, ErrArg) || len(r.calls) > 0 {
		t.Errorf("f32 d = 128: %v after %v", err, r.calls)
	}
}
