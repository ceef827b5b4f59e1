package cuda

import "testing"

func TestAttentionGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(16)
	// [batch, seq, heads, hid, kv heads]: one head of width 1, odd sizes, a
	// row longer than a warp's (the block softmax), a GPT-2-like head
	// width; grouped-query attention with groups of 2 and 3 query heads,
	// and one key/value head for all.
	shapes := [][5]int{{1, 1, 1, 1, 1}, {2, 5, 2, 6, 2}, {1, 33, 3, 12, 3}, {2, 64, 4, 256, 4}, {1, 1030, 2, 16, 2},
		{2, 5, 4, 8, 2}, {1, 33, 6, 12, 2}, {2, 17, 4, 32, 1}}
	for _, dt := range dtypes {
		for _, sh := range shapes {
			for _, causal := range []bool{false, true} {
				batch, seq, heads, hid, kv := sh[0], sh[1], sh[2], sh[3], sh[4]
				width := hid + 2*kv*(hid/heads)
				t.Run(name(dt, "/", sh, "/causal=", causal), func(t *testing.T) {
					tt := batch * seq
					qkv, dout := randIn(rng, dt, tt*width, -1, 1), randIn(rng, dt, tt*hid, -1, 1)
					pq, po, pp := e.put(t, dt, qkv), e.alloc(t, dt, tt*hid), e.alloc(t, dt, batch*heads*seq*seq)
					must(t, e.k.AttentionForward(e.s, dt, pq, po, pp, batch, seq, heads, kv, hid, causal))
					wo, wp := refAttention(to64(qkv), batch, seq, heads, kv, hid, causal)
					check(t, "out", dt, e.get(t, dt, po, tt*hid), wo, compound)
					check(t, "probs", dt, e.get(t, dt, pp, len(wp)), wp, compound)

					// The backward pass from the reference's probabilities
					// (rounded to dt).
					probs := make([]float32, len(wp))
					for i, v := range wp {
						probs[i] = round(dt, float32(v))
					}
					e.putAt(t, pp, dt, probs)
					pdo, pdq := e.put(t, dt, dout), e.alloc(t, dt, tt*width)
					work := e.alloc(t, dt, int(AttentionWorkspace(dt, seq, heads)/dt.Size()))
					must(t, e.k.AttentionBackward(e.s, dt, pq, pp, pdo, pdq, work, batch, seq, heads, kv, hid, causal))
					want := refAttentionBwd(to64(qkv), to64(probs), to64(dout), batch, seq, heads, kv, hid, causal)
					check(t, "dqkv", dt, e.get(t, dt, pdq, len(want)), want, compound)
				})
			}
		}
	}
}
