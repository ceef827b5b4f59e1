package cuda

import (
	"math"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// Attention is graph.Attention: qkv [batch·seq, hid + 2·kvHeads·d] holds Q
// (hid = heads·d columns), K and V (kvHeads·d each) side by side, query
// head h reading columns h·d … (h+1)·d − 1 of Q and key/value head
// h/(heads/kvHeads) of K and V (grouped-query attention; kvHeads = heads
// is multi-head attention). Per sequence b and position j within a group
// of query heads, the products of the group's j-th heads are one
// strided-batched GEMM over the key/value heads whose operands are strided
// views into qkv (rows ld apart, query heads group·d apart, key/value
// heads d apart): no copies. With kvHeads = heads that is one GEMM over
// all heads per sequence.

// attnDims checks the sizes of an attention that keeps its probabilities
// and returns d and the row stride ld of qkv.
func attnDims(op string, batch, seq, heads, kvHeads, hid int) (d, ld int, err error) {
	if d, ld, err = attnShape(op, batch, seq, heads, kvHeads, hid); err != nil {
		return 0, 0, err
	}
	if err := fits32(op, "batch heads seq seq", batch, heads, seq, seq); err != nil {
		return 0, 0, err
	}
	return d, ld, nil
}

// attnShape checks the sizes every attention kernel takes and returns d
// and the row stride ld of qkv.
func attnShape(op string, batch, seq, heads, kvHeads, hid int) (d, ld int, err error) {
	if heads < 1 || hid%heads != 0 {
		return 0, 0, argErr(op, "hid = %d does not divide into heads = %d", hid, heads)
	}
	if kvHeads < 1 || heads%kvHeads != 0 {
		return 0, 0, argErr(op, "kvHeads = %d does not divide heads = %d", kvHeads, heads)
	}
	d = hid / heads
	ld = hid + 2*kvHeads*d
	if err := fits32(op, "batch seq ld", batch, seq, ld); err != nil {
		return 0, 0, err
	}
	return d, ld, nil
}

// AttentionForward sets out [batch·seq, hid] and probs [batch, heads, seq,
// seq] (the softmax kept for the backward pass) as graph.Attention defines
// them: per sequence and query head, S = Q Kᵀ/√d (cuBLAS, into probs), P =
// softmax(S) row by row in place (with causal, position i sees positions
// j ≤ i only), O = P V (cuBLAS, into out's head columns).
func (k *Kernels) AttentionForward(s *cu.Stream, dt graph.DType, qkv, out, probs cu.DevicePtr, batch, seq, heads, kvHeads, hid int, causal bool) error {
	const op = "AttentionForward"
	t, err := gemmType(op, dt)
	if err != nil {
		return err
	}
	d, ld, err := attnDims(op, batch, seq, heads, kvHeads, hid)
	if err != nil || batch == 0 || seq == 0 || hid == 0 {
		return err
	}
	if err := notNil(op, "qkv out probs", qkv, out, probs); err != nil {
		return err
	}
	es := int64(dt.Size())
	ss := int64(seq) * int64(seq)
	group := heads / kvHeads
	g := int64(group)
	at := func(p cu.DevicePtr, elems int64) cu.DevicePtr { return p + cu.DevicePtr(es*elems) }
	for b := range int64(batch) {
		q := at(qkv, b*int64(seq*ld))
		kk := at(q, int64(hid))
		p := at(probs, b*int64(heads)*ss)
		for j := range g {
			if err := k.be.gemm(s, gemm{t: t, transB: true, m: seq, n: seq, k: d, alpha: float32(1 / math.Sqrt(float64(d))),
				a: at(q, j*int64(d)), lda: ld, sa: g * int64(d), b: kk, ldb: ld, sb: int64(d),
				c: at(p, j*ss), ldc: seq, sc: g * ss, batch: kvHeads}); err != nil {
				return err
			}
		}
	}
	if err := k.softmax(op, s, dt, probs, probs, batch*heads*seq, seq, causal); err != nil {
		return err
	}
	for b := range int64(batch) {
		v := at(qkv, b*int64(seq*ld)+int64(hid+kvHeads*d))
		p := at(probs, b*int64(heads)*ss)
		o := at(out, b*int64(seq*hid))
		for j := range g {
			if err := k.be.gemm(s, gemm{t: t, m: seq, n: d, k: seq, alpha: 1,
				a: at(p, j*ss), lda: seq, sa: g * ss, b: v, ldb: ld, sb: int64(d),
				c: at(o, j*int64(d)), ldc: hid, sc: g * int64(d), batch: kvHeads}); err != nil {
				return err
			}
		}
	}
	return nil
}

// AttentionWorkspace is the scratch AttentionBackward needs: dP for the
// heads of one sequence, [heads, seq, seq] of dt. (AttentionForward needs
// none.)
func AttentionWorkspace(dt graph.DType, seq, heads int) units.Bytes {
	if seq <= 0 || heads <= 0 {
		return 0
	}
	return dt.Size() * units.Bytes(heads) * units.Bytes(seq) * units.Bytes(seq)
}

// AttentionBackward sets dqkv (qkv's shape) to the gradient of
// AttentionForward given qkv, probs and dout [batch·seq, hid], as
// graph.AttentionGrad defines it. Per sequence, for all heads at once: dP =
// dO Vᵀ into work (AttentionWorkspace bytes), dS = P ⊙ (dP − rowsum(dP ⊙
// P))/√d in place, then dV = Pᵀ dO, dQ = dS K and dK = dSᵀ Q into their
// column blocks of dqkv; the first query head of each group writes its
// key/value head's dK and dV (β = 0), the others add theirs (β = 1), so
// every element is written. causal must be the forward pass's: dS is 0
// where the mask was.
func (k *Kernels) AttentionBackward(s *cu.Stream, dt graph.DType, qkv, probs, dout, dqkv, work cu.DevicePtr, batch, seq, heads, kvHeads, hid int, causal bool) error {
	const op = "AttentionBackward"
	t, err := gemmType(op, dt)
	if err != nil {
		return err
	}
	d, ld, err := attnDims(op, batch, seq, heads, kvHeads, hid)
	if err != nil || batch == 0 || seq == 0 || hid == 0 {
		return err
	}
	if err := notNil(op, "qkv probs dout dqkv work", qkv, probs, dout, dqkv, work); err != nil {
		return err
	}
	es := int64(dt.Size())
	ss := int64(seq) * int64(seq)
	sd := int64(d)
	g := int64(heads / kvHeads)
	at := func(p cu.DevicePtr, elems int64) cu.DevicePtr { return p + cu.DevicePtr(es*elems) }
	for b := range int64(batch) {
		row := b * int64(seq*ld)
		q, kk, v := at(qkv, row), at(qkv, row+int64(hid)), at(qkv, row+int64(hid+kvHeads*d))
		dq, dk, dv := at(dqkv, row), at(dqkv, row+int64(hid)), at(dqkv, row+int64(hid+kvHeads*d))
		p := at(probs, b*int64(heads)*ss)
		do := at(dout, b*int64(seq*hid))
		for j := range g {
			beta := float32(min(j, 1)) // the group's first head writes, the others add
			steps := []gemm{
				// dP = dO Vᵀ
				{t: t, transB: true, m: seq, n: seq, k: d, alpha: 1, a: at(do, j*sd), lda: hid, sa: g * sd, b: v, ldb: ld, sb: sd,
					c: at(work, j*ss), ldc: seq, sc: g * ss, batch: kvHeads},
				// dV (+)= Pᵀ dO
				{t: t, transA: true, m: seq, n: d, k: seq, alpha: 1, beta: beta, a: at(p, j*ss), lda: seq, sa: g * ss,
					b: at(do, j*sd), ldb: hid, sb: g * sd, c: dv, ldc: ld, sc: sd, batch: kvHeads},
			}
			for _, gm := range steps {
				if err := k.be.gemm(s, gm); err != nil {
					return err
				}
			}
		}
		if err := k.softmaxBackward(op, s, dt, p, work, work, heads*seq, seq, float32(1/math.Sqrt(float64(d))), causal); err != nil {
			return err
		}
		for j := range g {
			beta := float32(min(j, 1))
			steps := []gemm{
				// dQ = dS K
				{t: t, m: seq, n: d, k: seq, alpha: 1, a: at(work, j*ss), lda: seq, sa: g * ss, b: kk, ldb: ld, sb: sd,
					c: at(dq, j*sd), ldc: ld, sc: g * sd, batch: kvHeads},
				// dK (+)= dSᵀ Q
				{t: t, transA: true, m: seq, n: d, k: seq, alpha: 1, beta: beta, a: at(work, j*ss), lda: seq, sa: g * ss,
					b: at(q, j*sd), ldb: ld, sb: g * sd, c: dk, ldc: ld, sc: sd, batch: kvHeads},
			}
			for _, gm := range steps {
				if err := k.be.gemm(s, gm); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
