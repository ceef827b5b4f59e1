package graph

import "github.com/flowkit/flowkit/units"

// RoPE is the rotary position embedding (Su et al., 2021) of the queries
// and keys of packed attention projections, in LLaMA's rotate-half form.
// qkv is laid out as the Attention op with Heads and KVHeads reads it: the
// Heads query heads, then the KVHeads key heads, then as many value heads,
// each d = cols/(Heads + 2·KVHeads) wide (KVHeads 0 means Heads). Row r is
// position p = r mod Seq. Each query and key head x is rotated pairwise:
// for i < d/2, with angle a = p·Theta^(−2i/d),
//
//	y[i]       = x[i]·cos a − x[i+d/2]·sin a
//	y[i+d/2]   = x[i+d/2]·cos a + x[i]·sin a
//
// and the values pass unchanged. The output has qkv's spec. Keeping the
// packed layout lets RoPE sit between the fused q/k/v projection and
// Attention without splitting the tensor.
type RoPE struct {
	Heads   int
	KVHeads int `json:",omitempty"`
	Seq     int
	Theta   float64
}

func (RoPE) Type() string { return "rope" }

// KV is the number of key and value heads.
func (r RoPE) KV() int {
	if r.KVHeads == 0 {
		return r.Heads
	}
	return r.KVHeads
}

// headDim checks qkv (in[0]) against the attributes and returns the width
// d of each head. Errors name op.
func (r RoPE) headDim(op string, in []Spec) (int, error) {
	if err := checkFloat(op, in, 0); err != nil {
		return 0, err
	}
	s := in[0].Shape
	if len(s) < 2 {
		return 0, shapeErr(op, in, "qkv must have rank ≥ 2")
	}
	if r.Heads < 1 || r.KV() < 1 || r.Seq < 1 || r.Heads%r.KV() != 0 {
		return 0, shapeErr(op, in, "want heads, kv heads, seq ≥ 1 and kv heads dividing heads, got %d, %d, %d", r.Heads, r.KV(), r.Seq)
	}
	if !(r.Theta > 0) {
		return 0, shapeErr(op, in, "theta must be positive, got %g", r.Theta)
	}
	rows, cols := matrixView(s)
	w := r.Heads + 2*r.KV()
	if cols%w != 0 || (cols/w)%2 != 0 {
		return 0, shapeErr(op, in, "qkv has %d columns, not (heads + 2·kv heads)·d = %d·d for an even d", cols, w)
	}
	if rows%r.Seq != 0 {
		return 0, shapeErr(op, in, "%d rows are not a whole number of sequences of %d", rows, r.Seq)
	}
	return cols / w, nil
}

func (r RoPE) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("rope", in, 1); err != nil {
		return nil, err
	}
	if _, err := r.headDim("rope", in); err != nil {
		return nil, err
	}
	return []Spec{{in[0].Shape.Clone(), in[0].DType}}, nil
}

// ropeCost: three FLOPs per rotated element (two products and a sum; the
// angles are a table of Seq·d/2 entries), a copy of the values; one read
// and one write of the tensor.
func ropeCost(r RoPE, in, out []Spec) Cost {
	rows, cols := matrixView(in[0].Shape)
	d := cols / (r.Heads + 2*r.KV())
	rotated := float64(rows) * float64((r.Heads+r.KV())*d)
	return Cost{FLOPs: units.FLOPs(3 * rotated), Bytes: bytesOf(in, out)}
}

func (r RoPE) Cost(in, out []Spec) Cost { return ropeCost(r, in, out) }

// Signatures: the rows of different sequences are independent, so the
// batch splits along the leading axis (at sequence boundaries, as
// Attention's does); the heads are packed along one axis with the values,
// as Attention's, and do not split.
func (RoPE) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, S(0), S(0)), sig(1, B, B)}
}

// Grad: the rotation is orthogonal, so the gradient is the inverse
// rotation of dy (the angle negated), the values' passing through.
func (r RoPE) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(RoPEGrad(r), dy[0])}
}

// RoPE adds the rotary position embedding of qkv's queries and keys.
func (g *Graph) RoPE(qkv *Tensor, heads, kvHeads, seq int, theta float64) *Tensor {
	if kvHeads == heads {
		kvHeads = 0 // the default, which keeps the op's encoding short
	}
	return g.apply1(RoPE{Heads: heads, KVHeads: kvHeads, Seq: seq, Theta: theta}, qkv)
}

// RoPEGrad is the gradient of RoPE: dy → dqkv, each query and key head
// rotated by −a, the values' gradient copied.
type RoPEGrad RoPE

func (RoPEGrad) Type() string { return "rope_grad" }

func (r RoPEGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("rope_grad", in, 1); err != nil {
		return nil, err
	}
	if _, err := RoPE(r).headDim("rope_grad", in); err != nil {
		return nil, err
	}
	return []Spec{{in[0].Shape.Clone(), in[0].DType}}, nil
}

func (r RoPEGrad) Cost(in, out []Spec) Cost { return ropeCost(RoPE(r), in, out) }

func (RoPEGrad) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, S(0), S(0)), sig(1, B, B)}
}
