package cpu

import "math"

// The attention kernels take Q, K and V packed side by side in the rows of
// qkv [batch·seq, hid + 2·kvHeads·d] — row b·seq + i is position i of
// sequence b; Q is columns [0, hid), K the next kvHeads·d and V the last
// kvHeads·d, with d = hid/heads — and query head h uses columns h·d …
// (h+1)·d − 1 of Q and, of K and V, those of head h/(heads/kvHeads)
// (grouped-query attention; kvHeads = heads is multi-head attention, qkv
// [batch·seq, 3·hid]). Every product runs on strided views of qkv, out and
// dout, with no copies. The independent items (a sequence's query heads
// forward, a sequence's key/value heads backward) run in parallel when
// there are enough of them to keep the workers evenly busy, else one after
// another with the GEMMs parallel (see eachItem). Each element is computed
// the same way either way, so the results do not depend on the number of
// workers.

// AttentionForward sets, for every sequence b and query head h, probs[b, h]
// [seq, seq] to the row softmax of Q Kᵀ/√d — with causal, position i
// attends to positions j ≤ i only, and probs is zero above the diagonal —
// and the head's columns of out [batch·seq, hid] to probs[b, h]·V.
func AttentionForward(p *Pool, qkv, out, probs []float32, batch, seq, heads, kvHeads, hid int, causal bool) {
	const kernel = "AttentionForward"
	d := checkAttention(kernel, batch, seq, heads, kvHeads, hid)
	kw := kvHeads * d
	checkLen(kernel, "qkv", len(qkv), batch*seq*(hid+2*kw))
	checkLen(kernel, "out", len(out), batch*seq*hid)
	checkLen(kernel, "probs", len(probs), batch*heads*seq*seq)
	if batch == 0 || seq == 0 {
		return
	}
	ld, ss, group := hid+2*kw, seq*seq, heads/kvHeads
	scale := float32(1 / math.Sqrt(float64(d)))
	eachItem(p, batch*heads, 0, func(q *Pool, bh int, _ []float32) {
		b, h := bh/heads, bh%heads
		at := b*seq*ld + h*d
		kv := b*seq*ld + hid + h/group*d // the head's key; its value is kw further
		pr := probs[bh*ss : (bh+1)*ss]
		Sgemm(q, false, true, seq, seq, d, scale, qkv[at:], ld, qkv[kv:], ld, 0, pr, seq)
		softmaxScores(q, pr, seq, causal)
		Sgemm(q, false, false, seq, d, seq, 1, pr, seq, qkv[kv+kw:], ld, 0, out[b*seq*hid+h*d:], hid)
	})
}

// AttentionBackward sets dqkv (qkv's shape) to the gradient of
// AttentionForward given the probs it saved and the gradient dout of out.
// Per sequence and query head: dV = Pᵀ dO; dP = dO Vᵀ; dS = P ⊙ (dP −
// rowsum(dP ⊙ P))/√d; dQ = dS K; dK = dSᵀ Q — a key or value head's
// gradients summed over the query heads of its group, in head order. Every
// element of dqkv is written.
func AttentionBackward(p *Pool, qkv, probs, dout, dqkv []float32, batch, seq, heads, kvHeads, hid int, causal bool) {
	const kernel = "AttentionBackward"
	d := checkAttention(kernel, batch, seq, heads, kvHeads, hid)
	kw := kvHeads * d
	checkLen(kernel, "qkv", len(qkv), batch*seq*(hid+2*kw))
	checkLen(kernel, "probs", len(probs), batch*heads*seq*seq)
	checkLen(kernel, "dout", len(dout), batch*seq*hid)
	checkLen(kernel, "dqkv", len(dqkv), len(qkv))
	if batch == 0 || seq == 0 {
		return
	}
	ld, ss, group := hid+2*kw, seq*seq, heads/kvHeads
	scale := 1 / math.Sqrt(float64(d))
	// An item is a key/value head of a sequence with its group of query
	// heads, so that no two items write the same columns.
	eachItem(p, batch*kvHeads, ss, func(q *Pool, bk int, ds []float32) {
		b, kh := bk/kvHeads, bk%kvHeads
		kv := b*seq*ld + hid + kh*d
		for j := range group {
			h := kh*group + j
			at := b*seq*ld + h*d
			pr := probs[(b*heads+h)*ss : (b*heads+h+1)*ss]
			do := dout[b*seq*hid+h*d:]
			var beta float32 // the group's first head writes dK and dV, the others add
			if j > 0 {
				beta = 1
			}
			Sgemm(q, true, false, seq, d, seq, 1, pr, seq, do, hid, beta, dqkv[kv+kw:], ld)
			Sgemm(q, false, true, seq, seq, d, 1, do, hid, qkv[kv+kw:], ld, 0, ds, seq)
			softmaxScoresBackward(q, pr, ds, seq, causal, scale)
			Sgemm(q, false, false, seq, d, seq, 1, ds, seq, qkv[kv:], ld, 0, dqkv[at:], ld)
			Sgemm(q, true, false, seq, d, seq, 1, ds, seq, qkv[at:], ld, beta, dqkv[kv:], ld)
		}
	})
}

// checkAttention panics unless the attention dimensions are valid, and
// returns the head width d.
func checkAttention(kernel string, batch, seq, heads, kvHeads, hid int) int {
	if batch < 0 || seq < 0 || heads < 1 || hid < heads || hid%heads != 0 {
		panic(shapeErr(kernel, "batch %d, seq %d, heads %d, hid %d: want batch, seq ≥ 0 and hid a positive multiple of heads", batch, seq, heads, hid))
	}
	if kvHeads < 1 || heads%kvHeads != 0 {
		panic(shapeErr(kernel, "%d kv heads do not divide %d heads", kvHeads, heads))
	}
	return hid / heads
}

// softmaxScores replaces each row i of the seq×seq scores s by its softmax
// over columns j ≤ i when causal (zeroing the others), else over all.
func softmaxScores(p *Pool, s []float32, seq int, causal bool) {
	p.For(seq, rowGrain(seq), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := s[i*seq : (i+1)*seq]
			n := seq
			if causal {
				n = i + 1
				clear(row[n:])
			}
			row = row[:n]
			inv := float32(1 / expInto(row, row, maxOf(row)))
			for j := range row {
				row[j] *= inv
			}
		}
	})
}

// softmaxScoresBackward turns dP (ds, seq×seq) into scale·dS in place:
// dS = P ⊙ (dP − rowsum(dP ⊙ P)), the gradient of the scores before the
// softmax. Under causal, P is zero above the diagonal and so is dS.
func softmaxScoresBackward(p *Pool, pr, ds []float32, seq int, causal bool, scale float64) {
	p.For(seq, rowGrain(seq), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			pi, di := pr[i*seq:(i+1)*seq], ds[i*seq:(i+1)*seq]
			n := seq
			if causal {
				n = i + 1
				clear(di[n:])
			}
			pi, di = pi[:n], di[:n]
			var dot float64
			for j, v := range pi {
				dot += float64(v) * float64(di[j])
			}
			for j, v := range pi {
				di[j] = float32(scale * float64(v) * (float64(di[j]) - dot))
			}
		}
	})
}
