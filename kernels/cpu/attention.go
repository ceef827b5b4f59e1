package cpu

import "math"

// The attention kernels take Q, K and V packed side by side in the rows of
// qkv [batch·seq, 3·hid] — row b·seq + i is position i of sequence b; Q, K
// and V are columns [0, hid), [hid, 2·hid) and [2·hid, 3·hid) — and head h
// uses columns h·d … (h+1)·d − 1 of each, d = hid/heads. Every product runs
// on strided views of qkv (row stride 3·hid), out and dout (row stride hid),
// with no copies. The (sequence, head) pairs are independent: they run in
// parallel when there are enough of them to keep the workers evenly busy,
// else one after another with the GEMMs parallel (see eachItem). Each
// element is computed the same way either way, so the results do not
// depend on the number of workers.

// AttentionForward sets, for every sequence b and head h, probs[b, h]
// [seq, seq] to the row softmax of Q Kᵀ/√d — with causal, position i
// attends to positions j ≤ i only, and probs is zero above the diagonal —
// and the head's columns of out [batch·seq, hid] to probs[b, h]·V.
func AttentionForward(p *Pool, qkv, out, probs []float32, batch, seq, heads, hid int, causal bool) {
	const kernel = "AttentionForward"
	d := checkAttention(kernel, batch, seq, heads, hid)
	checkLen(kernel, "qkv", len(qkv), batch*seq*3*hid)
	checkLen(kernel, "out", len(out), batch*seq*hid)
	checkLen(kernel, "probs", len(probs), batch*heads*seq*seq)
	if batch == 0 || seq == 0 {
		return
	}
	ld, ss := 3*hid, seq*seq
	scale := float32(1 / math.Sqrt(float64(d)))
	eachItem(p, batch*heads, 0, func(q *Pool, bh int, _ []float32) {
		b, h := bh/heads, bh%heads
		at := b*seq*ld + h*d
		pr := probs[bh*ss : (bh+1)*ss]
		Sgemm(q, false, true, seq, seq, d, scale, qkv[at:], ld, qkv[at+hid:], ld, 0, pr, seq)
		softmaxScores(q, pr, seq, causal)
		Sgemm(q, false, false, seq, d, seq, 1, pr, seq, qkv[at+2*hid:], ld, 0, out[b*seq*hid+h*d:], hid)
	})
}

// AttentionBackward sets dqkv [batch·seq, 3·hid] to the gradient of
// AttentionForward given the probs it saved and the gradient dout of out.
// Per sequence and head: dV = Pᵀ dO; dP = dO Vᵀ; dS = P ⊙ (dP −
// rowsum(dP ⊙ P))/√d; dQ = dS K; dK = dSᵀ Q. Every element of dqkv is
// written once.
func AttentionBackward(p *Pool, qkv, probs, dout, dqkv []float32, batch, seq, heads, hid int, causal bool) {
	const kernel = "AttentionBackward"
	d := checkAttention(kernel, batch, seq, heads, hid)
	checkLen(kernel, "qkv", len(qkv), batch*seq*3*hid)
	checkLen(kernel, "probs", len(probs), batch*heads*seq*seq)
	checkLen(kernel, "dout", len(dout), batch*seq*hid)
	checkLen(kernel, "dqkv", len(dqkv), batch*seq*3*hid)
	if batch == 0 || seq == 0 {
		return
	}
	ld, ss := 3*hid, seq*seq
	scale := 1 / math.Sqrt(float64(d))
	eachItem(p, batch*heads, ss, func(q *Pool, bh int, ds []float32) {
		b, h := bh/heads, bh%heads
		at := b*seq*ld + h*d
		pr := probs[bh*ss : (bh+1)*ss]
		do := dout[b*seq*hid+h*d:]
		Sgemm(q, true, false, seq, d, seq, 1, pr, seq, do, hid, 0, dqkv[at+2*hid:], ld)
		Sgemm(q, false, true, seq, seq, d, 1, do, hid, qkv[at+2*hid:], ld, 0, ds, seq)
		softmaxScoresBackward(q, pr, ds, seq, causal, scale)
		Sgemm(q, false, false, seq, d, seq, 1, ds, seq, qkv[at+hid:], ld, 0, dqkv[at:], ld)
		Sgemm(q, true, false, seq, d, seq, 1, ds, seq, qkv[at:], ld, 0, dqkv[at+hid:], ld)
	})
}

// checkAttention panics unless the attention dimensions are valid, and
// returns the head width d.
func checkAttention(kernel string, batch, seq, heads, hid int) int {
	if batch < 0 || seq < 0 || heads < 1 || hid < heads || hid%heads != 0 {
		panic(shapeErr(kernel, "batch %d, seq %d, heads %d, hid %d: want batch, seq ≥ 0 and hid a positive multiple of heads", batch, seq, heads, hid))
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
