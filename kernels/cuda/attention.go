package cuda

import (
	"math"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// Attention is graph.Attention: qkv [batch·seq, 3·hid] holds Q, K and V
// in its three column blocks, head h in columns h·d … (h+1)·d − 1 of each,
// d = hid/heads. Per sequence b, the products of all heads are one
// strided-batched GEMM whose operands are strided views into qkv (rows
// 3·hid apart, heads d apart): no copies.

// attnDims checks the sizes of an attention and returns d.
func attnDims(op string, batch, seq, heads, hid int) (int, error) {
	if err := fits32(op, "batch seq 3·hid", batch, seq, 3*hid); err != nil {
		return 0, err
	}
	if err := fits32(op, "batch heads seq seq", batch, heads, seq, seq); err != nil {
		return 0, err
	}
	if heads < 1 || hid%heads != 0 {
		return 0, argErr(op, "hid = %d does not divide into heads = %d", hid, heads)
	}
	return hid / heads, nil
}

// AttentionForward sets out [batch·seq, hid] and probs [batch, heads, seq,
// seq] (the softmax kept for the backward pass) as graph.Attention defines
// them: per sequence and head, S = Q Kᵀ/√d (cuBLAS, into probs), P =
// softmax(S) row by row in place (with causal, position i sees positions
// j ≤ i only), O = P V (cuBLAS, into out's head columns).
func (k *Kernels) AttentionForward(s *cu.Stream, dt graph.DType, qkv, out, probs cu.DevicePtr, batch, seq, heads, hid int, causal bool) error {
	const op = "AttentionForward"
	t, err := gemmType(op, dt)
	if err != nil {
		return err
	}
	d, err := attnDims(op, batch, seq, heads, hid)
	if err != nil || batch == 0 || seq == 0 || hid == 0 {
		return err
	}
	if err := notNil(op, "qkv out probs", qkv, out, probs); err != nil {
		return err
	}
	es := int(dt.Size())
	ld := 3 * hid
	ss := int64(seq) * int64(seq)
	for b := range batch {
		q := qkv + cu.DevicePtr(es*b*seq*ld)
		p := probs + cu.DevicePtr(int64(es*b*heads)*ss)
		if err := k.be.gemm(s, gemm{t: t, transB: true, m: seq, n: seq, k: d, alpha: float32(1 / math.Sqrt(float64(d))),
			a: q, lda: ld, sa: int64(d), b: q + cu.DevicePtr(es*hid), ldb: ld, sb: int64(d),
			c: p, ldc: seq, sc: ss, batch: heads}); err != nil {
			return err
		}
	}
	if err := k.softmax(op, s, dt, probs, probs, batch*heads*seq, seq, causal); err != nil {
		return err
	}
	for b := range batch {
		q := qkv + cu.DevicePtr(es*b*seq*ld)
		p := probs + cu.DevicePtr(int64(es*b*heads)*ss)
		if err := k.be.gemm(s, gemm{t: t, m: seq, n: d, k: seq, alpha: 1,
			a: p, lda: seq, sa: ss, b: q + cu.DevicePtr(es*2*hid), ldb: ld, sb: int64(d),
			c: out + cu.DevicePtr(es*b*seq*hid), ldc: hid, sc: int64(d), batch: heads}); err != nil {
			return err
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

// AttentionBackward sets dqkv [batch·seq, 3·hid] to the gradient of
// AttentionForward given qkv, probs and dout [batch·seq, hid], as
// graph.AttentionGrad defines it. Per sequence, for all heads at once: dP =
// dO Vᵀ into work (AttentionWorkspace bytes), dS = P ⊙ (dP − rowsum(dP ⊙
// P))/√d in place, then dV = Pᵀ dO, dQ = dS K and dK = dSᵀ Q into their
// column blocks of dqkv, every element written (β = 0). causal must be the
// forward pass's: dS is 0 where the mask was.
func (k *Kernels) AttentionBackward(s *cu.Stream, dt graph.DType, qkv, probs, dout, dqkv, work cu.DevicePtr, batch, seq, heads, hid int, causal bool) error {
	const op = "AttentionBackward"
	t, err := gemmType(op, dt)
	if err != nil {
		return err
	}
	d, err := attnDims(op, batch, seq, heads, hid)
	if err != nil || batch == 0 || seq == 0 || hid == 0 {
		return err
	}
	if err := notNil(op, "qkv probs dout dqkv work", qkv, probs, dout, dqkv, work); err != nil {
		return err
	}
	es := int(dt.Size())
	ld := 3 * hid
	ss := int64(seq) * int64(seq)
	sd := int64(d)
	for b := range batch {
		row := cu.DevicePtr(es * b * seq * ld)
		q, kk, v := qkv+row, qkv+row+cu.DevicePtr(es*hid), qkv+row+cu.DevicePtr(es*2*hid)
		dq, dk, dv := dqkv+row, dqkv+row+cu.DevicePtr(es*hid), dqkv+row+cu.DevicePtr(es*2*hid)
		p := probs + cu.DevicePtr(int64(es*b*heads)*ss)
		do := dout + cu.DevicePtr(es*b*seq*hid)
		steps := []gemm{
			// dP = dO Vᵀ
			{t: t, transB: true, m: seq, n: seq, k: d, alpha: 1, a: do, lda: hid, sa: sd, b: v, ldb: ld, sb: sd, c: work, ldc: seq, sc: ss, batch: heads},
			// dV = Pᵀ dO
			{t: t, transA: true, m: seq, n: d, k: seq, alpha: 1, a: p, lda: seq, sa: ss, b: do, ldb: hid, sb: sd, c: dv, ldc: ld, sc: sd, batch: heads},
		}
		for _, g := range steps {
			if err := k.be.gemm(s, g); err != nil {
				return err
			}
		}
		if err := k.softmaxBackward(op, s, dt, p, work, work, heads*seq, seq, float32(1/math.Sqrt(float64(d))), causal); err != nil {
			return err
		}
		steps = []gemm{
			// dQ = dS K
			{t: t, m: seq, n: d, k: seq, alpha: 1, a: work, lda: seq, sa: ss, b: kk, ldb: ld, sb: sd, c: dq, ldc: ld, sc: sd, batch: heads},
			// dK = dSᵀ Q
			{t: t, transA: true, m: seq, n: d, k: seq, alpha: 1, a: work, lda: seq, sa: ss, b: q, ldb: ld, sb: sd, c: dk, ldc: ld, sc: sd, batch: heads},
		}
		for _, g := range steps {
			if err := k.be.gemm(s, g); err != nil {
				return err
			}
		}
	}
	return nil
}
