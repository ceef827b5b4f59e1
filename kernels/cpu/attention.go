package cpu

import (
	"iter"
	"math"
)

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
	tiling := attnTiling{seq, causal}
	eachItem(p, batch*heads, 0, func(q *Pool, bh int, _ []float32) {
		b, h := bh/heads, bh%heads
		at := b*seq*ld + h*d
		kv := b*seq*ld + hid + h/group*d // the head's key; its value is kw further
		o := b*seq*hid + h*d
		pr := probs[bh*ss : (bh+1)*ss]
		for i0, i1 := range tiling.blocks() {
			Sgemm(q, false, true, i1-i0, tiling.keys(i1), d, scale, qkv[at+i0*ld:], ld, qkv[kv:], ld, 0, pr[i0*seq:], seq)
		}
		softmaxScores(q, pr, seq, causal)
		for i0, i1 := range tiling.blocks() {
			Sgemm(q, false, false, i1-i0, d, tiling.keys(i1), 1, pr[i0*seq:], seq, qkv[kv+kw:], ld, 0, out[o+i0*hid:], hid)
		}
	})
}

// attnBlock is the rows of a block of causal attention: a multiple of both
// sides of the GEMM's micro-tile, so that only the last block has partial
// tiles.
const attnBlock = 48

// attnTiling cuts a seq×seq score matrix into blocks of rows for the
// products of attention. Under causal, rows i < i1 attend to columns j < i1
// only, and key j gets gradients from queries i ≥ j only, so the products
// skip the zeros above the diagonal block by block (five eighths of the
// work at seq = 128); else there is one block of every row and column.
// Dropping zero terms leaves every sum as it was (adding +0 changes
// nothing but the sign of a zero).
type attnTiling struct {
	seq    int
	causal bool
}

// blocks yields the row blocks [i0, i1).
func (t attnTiling) blocks() iter.Seq2[int, int] {
	return func(yield func(i0, i1 int) bool) {
		step := t.seq
		if t.causal {
			step = attnBlock
		}
		for i0 := 0; i0 < t.seq; i0 += step {
			if !yield(i0, min(t.seq, i0+step)) {
				return
			}
		}
	}
}

// keys is the columns [0, keys) the rows of a block ending at i1 attend to.
func (t attnTiling) keys(i1 int) int {
	if t.causal {
		return i1
	}
	return t.seq
}

// firstQuery is the first row [firstQuery, seq) that attends to the keys
// of a block starting at j0.
func (t attnTiling) firstQuery(j0 int) int {
	if t.causal {
		return j0
	}
	return 0
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
	tiling := attnTiling{seq, causal}
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
			for j0, j1 := range tiling.blocks() {
				i0 := tiling.firstQuery(j0)
				Sgemm(q, true, false, j1-j0, d, seq-i0, 1, pr[i0*seq+j0:], seq, do[i0*hid:], hid, beta, dqkv[kv+kw+j0*ld:], ld)
			}
			for i0, i1 := range tiling.blocks() {
				Sgemm(q, false, true, i1-i0, tiling.keys(i1), d, 1, do[i0*hid:], hid, qkv[kv+kw:], ld, 0, ds[i0*seq:], seq)
			}
			softmaxScoresBackward(q, pr, ds, seq, causal, scale)
			for i0, i1 := range tiling.blocks() {
				Sgemm(q, false, false, i1-i0, d, tiling.keys(i1), 1, ds[i0*seq:], seq, qkv[kv:], ld, 0, dqkv[at+i0*ld:], ld)
			}
			for j0, j1 := range tiling.blocks() {
				i0 := tiling.firstQuery(j0)
				Sgemm(q, true, false, j1-j0, d, seq-i0, 1, ds[i0*seq+j0:], seq, qkv[at+i0*ld:], ld, beta, dqkv[kv+j0*ld:], ld)
			}
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

// FlashAttentionForward computes what AttentionForward does without
// keeping the probabilities (graph.Attention with Flash): out as there, and
// lse [batch, heads, seq] the log of each softmax row's normalizer (its
// max plus the log of its sum of exponentials), from which
// FlashAttentionBackward recomputes the rows. The scores of one block of
// attnBlock query rows are held at a time, so a sequence needs seq·
// attnBlock floats of scratch, not seq². The products and the softmax are
// AttentionForward's, element by element, so out matches it bit for bit.
func FlashAttentionForward(p *Pool, qkv, out, lse []float32, batch, seq, heads, kvHeads, hid int, causal bool) {
	const kernel = "FlashAttentionForward"
	d := checkAttention(kernel, batch, seq, heads, kvHeads, hid)
	kw := kvHeads * d
	checkLen(kernel, "qkv", len(qkv), batch*seq*(hid+2*kw))
	checkLen(kernel, "out", len(out), batch*seq*hid)
	checkLen(kernel, "lse", len(lse), batch*heads*seq)
	if batch == 0 || seq == 0 {
		return
	}
	ld, group := hid+2*kw, heads/kvHeads
	scale := float32(1 / math.Sqrt(float64(d)))
	tiling := attnTiling{seq, causal}
	eachItem(p, batch*heads, min(seq, attnBlock)*seq, func(q *Pool, bh int, s []float32) {
		b, h := bh/heads, bh%heads
		at := b*seq*ld + h*d
		kv := b*seq*ld + hid + h/group*d
		o := b*seq*hid + h*d
		l := lse[bh*seq : (bh+1)*seq]
		for i0 := 0; i0 < seq; i0 += attnBlock {
			i1 := min(seq, i0+attnBlock)
			keys := tiling.keys(i1)
			Sgemm(q, false, true, i1-i0, keys, d, scale, qkv[at+i0*ld:], ld, qkv[kv:], ld, 0, s, keys)
			q.For(i1-i0, rowGrain(keys), func(lo, hi int) {
				for r := lo; r < hi; r++ {
					row := s[r*keys : (r+1)*keys]
					n := keys
					if causal {
						n = i0 + r + 1
						clear(row[n:])
					}
					row = row[:n]
					m := maxOf(row)
					sum := expInto(row, row, m)
					l[i0+r] = m + float32(math.Log(sum))
					inv := float32(1 / sum)
					for j := range row {
						row[j] *= inv
					}
				}
			})
			Sgemm(q, false, false, i1-i0, d, keys, 1, s, keys, qkv[kv+kw:], ld, 0, out[o+i0*hid:], hid)
		}
	})
}

// FlashAttentionBackward sets dqkv to the gradient of
// FlashAttentionForward given qkv, the out and lse it computed and the
// gradient dout of out (graph.AttentionGrad with Flash). Block by block of
// attnBlock query rows it recomputes P = exp(Q Kᵀ/√d − lse), takes dP =
// dO Vᵀ and dS = P ⊙ (dP − rowsum(dO ⊙ O))/√d, sets the block's dQ = dS K
// and adds Pᵀ dO to dV and dSᵀ Q to dK — a key or value head's gradients
// summed over its group's query heads, in head order, as in
// AttentionBackward.
func FlashAttentionBackward(p *Pool, qkv, out, lse, dout, dqkv []float32, batch, seq, heads, kvHeads, hid int, causal bool) {
	const kernel = "FlashAttentionBackward"
	d := checkAttention(kernel, batch, seq, heads, kvHeads, hid)
	kw := kvHeads * d
	checkLen(kernel, "qkv", len(qkv), batch*seq*(hid+2*kw))
	checkLen(kernel, "out", len(out), batch*seq*hid)
	checkLen(kernel, "lse", len(lse), batch*heads*seq)
	checkLen(kernel, "dout", len(dout), batch*seq*hid)
	checkLen(kernel, "dqkv", len(dqkv), len(qkv))
	if batch == 0 || seq == 0 {
		return
	}
	ld, group := hid+2*kw, heads/kvHeads
	scale := 1 / math.Sqrt(float64(d))
	tiling := attnTiling{seq, causal}
	block := min(seq, attnBlock) * seq
	// An item is a key/value head of a sequence with its group of query
	// heads, so that no two items write the same columns; its scratch is a
	// block of P and one of dS.
	eachItem(p, batch*kvHeads, 2*block, func(q *Pool, bk int, scratch []float32) {
		pb, ds := scratch[:block], scratch[block:]
		b, kh := bk/kvHeads, bk%kvHeads
		kv := b*seq*ld + hid + kh*d
		for i := range seq { // dK and dV are sums over the blocks
			clear(dqkv[kv+i*ld : kv+i*ld+d])
			clear(dqkv[kv+kw+i*ld : kv+kw+i*ld+d])
		}
		for j := range group {
			h := kh*group + j
			at := b*seq*ld + h*d
			o := b*seq*hid + h*d
			l := lse[(b*heads+h)*seq:]
			for i0 := 0; i0 < seq; i0 += attnBlock {
				i1 := min(seq, i0+attnBlock)
				keys := tiling.keys(i1)
				Sgemm(q, false, true, i1-i0, keys, d, float32(scale), qkv[at+i0*ld:], ld, qkv[kv:], ld, 0, pb, keys)
				Sgemm(q, false, true, i1-i0, keys, d, 1, dout[o+i0*hid:], hid, qkv[kv+kw:], ld, 0, ds, keys)
				q.For(i1-i0, rowGrain(keys), func(lo, hi int) {
					for r := lo; r < hi; r++ {
						pr, dr := pb[r*keys:(r+1)*keys], ds[r*keys:(r+1)*keys]
						n := keys
						if causal {
							n = i0 + r + 1
							clear(pr[n:])
							clear(dr[n:])
						}
						var dot float64 // rowsum(dO ⊙ O)
						for k, v := range dout[o+(i0+r)*hid : o+(i0+r)*hid+d] {
							dot += float64(v) * float64(out[o+(i0+r)*hid+k])
						}
						expInto(pr[:n], pr[:n], l[i0+r])
						for j, v := range pr[:n] {
							dr[j] = float32(scale * float64(v) * (float64(dr[j]) - dot))
						}
					}
				})
				rows := i1 - i0
				Sgemm(q, true, false, keys, d, rows, 1, pb, keys, dout[o+i0*hid:], hid, 1, dqkv[kv+kw:], ld)
				Sgemm(q, false, false, rows, d, keys, 1, ds, keys, qkv[kv:], ld, 0, dqkv[at+i0*ld:], ld)
				Sgemm(q, true, false, keys, d, rows, 1, ds, keys, qkv[at+i0*ld:], ld, 1, dqkv[kv:], ld)
			}
		}
	})
}
