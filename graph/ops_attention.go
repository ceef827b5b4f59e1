package graph

import (
	"fmt"
	"slices"

	"github.com/flowkit/flowkit/units"
)

// Attention is multi-head scaled dot-product attention over packed
// projections, what nn.MultiheadAttention computes between its input and
// output projections. qkv is viewed as a matrix (every leading axis a row
// axis, as MatMul does) of T = batch·Seq rows — row b·Seq + i is position i
// of sequence b — and 3·hid columns: Q in [0, hid), K in [hid, 2·hid), V in
// [2·hid, 3·hid). Head h reads columns h·d … (h+1)·d − 1 of each, with
// d = hid/Heads. For every sequence and head, P = softmax(Q Kᵀ/√d) row by
// row — with Causal, position i attends to positions j ≤ i only — and
// O = P V. The outputs are out, of qkv's shape with hid columns (head h in
// columns h·d …), and probs [batch, Heads, Seq, Seq], the P kept for the
// backward pass; both have qkv's dtype.
//
// With KVHeads > 0 (grouped-query attention, Ainslie et al., 2023) there
// are fewer key and value heads than query heads: qkv has (Heads +
// 2·KVHeads)·d columns, Q in [0, hid) with hid = Heads·d, K in [hid,
// hid + KVHeads·d), V after it, and query head h reads key and value head
// h/(Heads/KVHeads). KVHeads 0 (or Heads) is multi-head attention as
// above; it is left out of the op's encoding.
//
// With Flash (Dao et al., 2022) the probabilities are not kept: the second
// output is lse [batch, Heads, Seq], float32 whatever qkv's dtype, the log
// of each softmax row's normalizer (its max plus the log of its sum of
// exponentials), from which the backward pass recomputes P block by
// block. out is the same; a step keeps one float per row of scores instead
// of the row, and the kernels never hold more than a block of scores
// (memory linear in Seq, not quadratic). Flash false is left out of the
// op's encoding.
type Attention struct {
	Heads, Seq int
	Causal     bool
	KVHeads    int  `json:",omitempty"`
	Flash      bool `json:",omitempty"`
}

// KV is the number of key and value heads.
func (a Attention) KV() int {
	if a.KVHeads == 0 {
		return a.Heads
	}
	return a.KVHeads
}

// QKVWidth is the number of columns of packed projections for heads of
// width d.
func (a Attention) QKVWidth(d int) int { return (a.Heads + 2*a.KV()) * d }

func (Attention) Type() string { return "attention" }

// dims checks qkv (in[0]) against the attributes and returns the number of
// sequences and the width of each of Q, K and V. Errors name op.
func (a Attention) dims(op string, in []Spec) (batch, hid int, err error) {
	if err := checkFloat(op, in, 0); err != nil {
		return 0, 0, err
	}
	s := in[0].Shape
	if len(s) < 2 {
		return 0, 0, shapeErr(op, in, "qkv must have rank ≥ 2")
	}
	if a.Heads < 1 || a.Seq < 1 {
		return 0, 0, shapeErr(op, in, "heads and seq must be ≥ 1, got %d and %d", a.Heads, a.Seq)
	}
	rows, cols := matrixView(s)
	if kv := a.KV(); kv != a.Heads {
		if kv < 1 || a.Heads%kv != 0 {
			return 0, 0, shapeErr(op, in, "%d kv heads do not divide %d heads", kv, a.Heads)
		}
		if w := a.Heads + 2*kv; cols%w != 0 {
			return 0, 0, shapeErr(op, in, "qkv has %d columns, not (heads + 2·kv heads)·d = %d·d", cols, w)
		}
		hid = cols / (a.Heads + 2*kv) * a.Heads
	} else {
		if cols%3 != 0 {
			return 0, 0, shapeErr(op, in, "qkv has %d columns, not 3·hidden", cols)
		}
		hid = cols / 3
		if hid%a.Heads != 0 {
			return 0, 0, shapeErr(op, in, "hidden size %d does not divide into %d heads", hid, a.Heads)
		}
	}
	if rows%a.Seq != 0 {
		return 0, 0, shapeErr(op, in, "%d rows are not a whole number of sequences of %d", rows, a.Seq)
	}
	return rows / a.Seq, hid, nil
}

func (a Attention) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("attention", in, 1); err != nil {
		return nil, err
	}
	batch, hid, err := a.dims("attention", in)
	if err != nil {
		return nil, err
	}
	s := in[0].Shape
	out := append(s[:len(s)-1:len(s)-1], hid)
	if a.Flash {
		return []Spec{{out, in[0].DType}, {Shape{batch, a.Heads, a.Seq}, F32}}, nil
	}
	probs := Shape{batch, a.Heads, a.Seq, a.Seq}
	return []Spec{{out, in[0].DType}, {probs, in[0].DType}}, nil
}

// attentionWork returns the number of scores an attention computes (from
// its saved probs or lse, spec s): batch·Heads·Seq², but under Flash with
// Causal only those on and below the diagonal, batch·Heads·Seq(Seq+1)/2,
// as the flash kernels skip the blocks above it (the others compute whole
// products, as cuBLAS does); the head width d given its output out; and
// the bytes of its probs (0 under Flash).
func attentionWork(a Attention, s, out Spec) (scores, d float64, probs units.Bytes) {
	batch, heads, seq := float64(s.Shape[0]), s.Shape[1], float64(s.Shape[2])
	scores = batch * float64(heads) * seq * seq
	if a.Flash && a.Causal {
		scores = batch * float64(heads) * seq * (seq + 1) / 2
	}
	d = float64(out.Shape[len(out.Shape)-1] / heads)
	if !a.Flash {
		probs = s.Bytes()
	}
	return scores, d, probs
}

// Cost: Q Kᵀ and P V are 2·Seq²·d FLOPs each per sequence and head, so
// 4·d per score (4·batch·Seq²·hid in all), and the softmax about 5 per
// score. Besides reading qkv and writing out and probs, the softmax reads
// and rewrites the scores in place; under Flash the scores stay on chip
// and only qkv, out and lse move.
func (a Attention) Cost(in, out []Spec) Cost {
	scores, d, pb := attentionWork(a, out[1], out[0])
	return Cost{FLOPs: units.FLOPs(scores * (4*d + 5)), Bytes: bytesOf(in, out) + 2*pb}
}

// Signatures: sequences are independent, so the batch splits (along the
// leading axis, at sequence boundaries). Heads are independent too, but Q,
// K and V are packed along one axis, and no split of it gives each device
// whole heads of all three.
func (Attention) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(2, S(0), S(0), S(0)), sig(2, B, B, B)}
}

func (a Attention) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	if dy[1] != nil {
		saved := "probabilities"
		if a.Flash {
			saved = "log-normalizers (lse)"
		}
		g.fail(fmt.Errorf("graph: %s: no gradient flows through the attention %s, which only the backward pass reads", n.Name, saved))
		return []*Tensor{nil}
	}
	if a.Flash {
		return []*Tensor{g.apply1(AttentionGrad(a), n.Inputs[0], n.Outputs[0], n.Outputs[1], dy[0])}
	}
	return []*Tensor{g.apply1(AttentionGrad(a), n.Inputs[0], n.Outputs[1], dy[0])}
}

// Attention adds multi-head attention over packed projections qkv (see
// the Attention op) and returns its output.
func (g *Graph) Attention(qkv *Tensor, heads, seq int, causal bool) *Tensor {
	return g.apply1(Attention{Heads: heads, Seq: seq, Causal: causal}, qkv)
}

// AttentionOf adds the attention op a over packed projections qkv (see the
// Attention op) and returns its output: for the options Attention and
// GQAttention do not take.
func (g *Graph) AttentionOf(a Attention, qkv *Tensor) *Tensor {
	if a.KVHeads == a.Heads {
		a.KVHeads = 0
	}
	return g.apply1(a, qkv)
}

// GQAttention adds grouped-query attention, kvHeads key and value heads
// shared by heads query heads; kvHeads == heads is Attention.
func (g *Graph) GQAttention(qkv *Tensor, heads, kvHeads, seq int, causal bool) *Tensor {
	return g.AttentionOf(Attention{Heads: heads, Seq: seq, Causal: causal, KVHeads: kvHeads}, qkv)
}

// AttentionGrad is the gradient of Attention: (qkv, probs, dout) → dqkv.
// Per sequence and head, with P the saved probabilities: dV = Pᵀ dO,
// dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P))/√d, dQ = dS K and dK = dSᵀ Q,
// each written to its head's columns of dqkv; under grouped-query
// attention a key or value head's gradient is the sum over its group's
// query heads.
//
// With Flash it is (qkv, out, lse, dout) → dqkv: P = exp(Q Kᵀ/√d − lse)
// is recomputed, and rowsum(dP ⊙ P) is taken as rowsum(dO ⊙ O), which it
// equals (O = P V), so that no kernel needs a whole row of P at once.
type AttentionGrad Attention

func (AttentionGrad) Type() string { return "attention_grad" }

func (a AttentionGrad) Infer(in []Spec) ([]Spec, error) {
	const op = "attention_grad"
	saved := []string{"probs"}
	if a.Flash {
		saved = []string{"out", "lse"}
	}
	if err := checkArity(op, in, 2+len(saved)); err != nil {
		return nil, err
	}
	batch, hid, err := Attention(a).dims(op, in)
	if err != nil {
		return nil, err
	}
	s := in[0].Shape
	outShape := append(s[:len(s)-1:len(s)-1], hid)
	dout := len(in) - 1
	if a.Flash {
		if !in[1].Shape.Equal(outShape) {
			return nil, shapeErr(op, in, "out must be %v", outShape)
		}
		if want := (Shape{batch, a.Heads, a.Seq}); !in[2].Shape.Equal(want) || in[2].DType != F32 {
			return nil, shapeErr(op, in, "lse must be %v of f32", want)
		}
	} else if want := (Shape{batch, a.Heads, a.Seq, a.Seq}); !in[1].Shape.Equal(want) {
		return nil, shapeErr(op, in, "probs must be %v", want)
	}
	if !in[dout].Shape.Equal(outShape) {
		return nil, shapeErr(op, in, "dout must be %v", outShape)
	}
	if err := checkFloat(op, in, 1, dout); err != nil {
		return nil, err
	}
	// The kernels read every tensor but lse in qkv's dtype.
	for _, c := range []struct {
		i    int
		name string
	}{{1, saved[0]}, {dout, "dout"}} {
		if in[c.i].DType != in[0].DType {
			return nil, shapeErr(op, in, "%s is %v, qkv %v: they must have one dtype", c.name, in[c.i].DType, in[0].DType)
		}
	}
	return []Spec{in[0]}, nil
}

// Cost: four products of 2·Seq²·d FLOPs per sequence and head (8·d per
// score) and about 4 per score for dS. Besides its inputs and output, the
// kernel writes dP (score-sized scratch), rewrites it as dS and reads it
// twice. Under Flash a fifth product recomputes the scores (10·d per
// score) and the exponentials cost about 4 more per score, and no scores
// leave the chip.
func (a AttentionGrad) Cost(in, out []Spec) Cost {
	if a.Flash {
		scores, d, _ := attentionWork(Attention(a), in[2], in[1])
		return Cost{FLOPs: units.FLOPs(scores * (10*d + 8)), Bytes: bytesOf(in, out)}
	}
	scores, d, pb := attentionWork(Attention(a), in[1], in[2])
	return Cost{FLOPs: units.FLOPs(scores * (8*d + 4)), Bytes: bytesOf(in, out) + 4*pb}
}

func (a AttentionGrad) Signatures(in, out []Spec) []Signature {
	if a.Flash {
		return []Signature{sig(1, S(0), S(0), S(0), S(0), S(0)), sig(1, B, B, B, B, B)}
	}
	return []Signature{sig(1, S(0), S(0), S(0), S(0)), sig(1, B, B, B, B)}
}

// KeepsAttentionProbs reports whether g has attention ops that keep their
// probabilities for the backward pass (not flash attention's, which keep
// a float a row): what selective recomputation recomputes to drop them.
func (g *Graph) KeepsAttentionProbs() bool {
	return slices.ContainsFunc(g.Nodes, func(n *Node) bool {
		a, ok := n.Op.(Attention)
		return ok && !a.Flash
	})
}
