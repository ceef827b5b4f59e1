package graph

import "github.com/flowkit/flowkit/units"

// Reshape gives x a new shape with the same number of elements.
type Reshape struct{ Shape Shape }

func (Reshape) Type() string { return "reshape" }

func (op Reshape) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("reshape", in, 1); err != nil {
		return nil, err
	}
	if !op.Shape.valid() || op.Shape.NumElements() != in[0].Shape.NumElements() {
		return nil, shapeErr("reshape", in, "cannot reshape to %v", op.Shape)
	}
	return []Spec{{op.Shape.Clone(), in[0].DType}}, nil
}

func (Reshape) Cost(in, out []Spec) Cost { return Cost{Bytes: bytesOf(in, out)} }

// Signatures: a split along the leading axis survives a reshape that keeps
// that axis; broadcast and partial sums always do.
func (op Reshape) Signatures(in, out []Spec) []Signature {
	sigs := []Signature{sig(1, B, B), sig(1, P, P)}
	if in[0].Shape[0] == out[0].Shape[0] {
		sigs = append(sigs, sig(1, S(0), S(0)))
	}
	return sigs
}

func (op Reshape) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.Reshape(dy[0], n.Inputs[0].Spec.Shape)}
}

// Reshape adds a view of x with the given shape.
func (g *Graph) Reshape(x *Tensor, shape Shape) *Tensor {
	return g.apply1(Reshape{Shape: shape.Clone()}, x)
}

// Flatten reshapes x to [x.Shape[0], rest].
func (g *Graph) Flatten(x *Tensor) *Tensor {
	if x == nil {
		return g.apply1(Reshape{}, x)
	}
	s := x.Spec.Shape
	return g.Reshape(x, Shape{s[0], s.NumElements() / s[0]})
}

// ReduceSum sums x over one axis, removing it.
type ReduceSum struct{ Axis int }

func (ReduceSum) Type() string { return "reduce_sum" }

func (op ReduceSum) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("reduce_sum", in, 1); err != nil {
		return nil, err
	}
	if err := checkFloat("reduce_sum", in, 0); err != nil {
		return nil, err
	}
	s := in[0].Shape
	if op.Axis < 0 || op.Axis >= len(s) {
		return nil, shapeErr("reduce_sum", in, "axis %d out of range for rank %d", op.Axis, len(s))
	}
	out := append(s[:op.Axis:op.Axis], s[op.Axis+1:]...)
	return []Spec{{out, in[0].DType}}, nil
}

func (ReduceSum) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: units.FLOPs(in[0].Shape.NumElements()), Bytes: bytesOf(in, out)}
}

func (op ReduceSum) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) {
		switch {
		case a < op.Axis:
			sigs = append(sigs, sig(1, S(a), S(a)))
		case a > op.Axis:
			sigs = append(sigs, sig(1, S(a-1), S(a)))
		default:
			sigs = append(sigs, sig(1, P, S(a)))
		}
	}
	return append(sigs, sig(1, B, B), sig(1, P, P))
}

func (op ReduceSum) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	size := n.Inputs[0].Spec.Shape[op.Axis]
	return []*Tensor{g.apply1(BroadcastAxis{Axis: op.Axis, Size: size}, dy[0])}
}

// ReduceSum adds the sum of x over axis.
func (g *Graph) ReduceSum(x *Tensor, axis int) *Tensor { return g.apply1(ReduceSum{Axis: axis}, x) }

// ReduceMean adds the mean of x over axis.
func (g *Graph) ReduceMean(x *Tensor, axis int) *Tensor {
	s := g.ReduceSum(x, axis)
	if s == nil {
		return nil
	}
	return g.Scale(s, 1/float32(x.Spec.Shape[axis]))
}

// BroadcastAxis inserts a new axis of the given size at Axis, copying x
// along it: the gradient of ReduceSum.
type BroadcastAxis struct{ Axis, Size int }

func (BroadcastAxis) Type() string { return "broadcast_axis" }

func (op BroadcastAxis) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("broadcast_axis", in, 1); err != nil {
		return nil, err
	}
	s := in[0].Shape
	if op.Axis < 0 || op.Axis > len(s) || op.Size < 1 {
		return nil, shapeErr("broadcast_axis", in, "cannot insert axis %d of size %d", op.Axis, op.Size)
	}
	out := append(append(s[:op.Axis:op.Axis], op.Size), s[op.Axis:]...)
	return []Spec{{out, in[0].DType}}, nil
}

func (BroadcastAxis) Cost(in, out []Spec) Cost { return Cost{Bytes: bytesOf(in, out)} }

func (op BroadcastAxis) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) {
		o := a
		if a >= op.Axis {
			o = a + 1
		}
		sigs = append(sigs, sig(1, S(o), S(a)))
	}
	return append(sigs, sig(1, B, B), sig(1, P, P))
}

func (op BroadcastAxis) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.ReduceSum(dy[0], op.Axis)}
}

// BroadcastAxis adds x copied size times along a new axis.
func (g *Graph) BroadcastAxis(x *Tensor, axis, size int) *Tensor {
	return g.apply1(BroadcastAxis{Axis: axis, Size: size}, x)
}
