package graph

import (
	"fmt"

	"github.com/flowkit/flowkit/units"
)

// Spec is the static type of a tensor: shape and dtype.
type Spec struct {
	Shape Shape
	DType DType
}

func (s Spec) String() string { return s.DType.String() + s.Shape.String() }

// Bytes is the size of a tensor of this spec.
func (s Spec) Bytes() units.Bytes { return units.Bytes(s.Shape.NumElements()) * s.DType.Size() }

// Cost is the work an op does: arithmetic and memory traffic (bytes read
// plus bytes written).
type Cost struct {
	FLOPs units.FLOPs
	Bytes units.Bytes
}

// Op is an operation kind with its attributes.
type Op interface {
	// Type is the op's kind, e.g. "conv2d".
	Type() string
	// Infer checks the inputs and returns the outputs' specs.
	Infer(in []Spec) ([]Spec, error)
	// Cost is the work done for the given input and output specs.
	Cost(in, out []Spec) Cost
	// Signatures are the op's valid SBP layouts (OneFlow's GetSbp).
	Signatures(in, out []Spec) []Signature
}

// Differentiable is an op with a gradient rule. Grad receives the gradient
// of each output (nil where none flows) and returns one per input (nil for
// inputs that take no gradient, such as labels). need says which inputs'
// gradients are wanted; a rule may return nil for the others and should not
// add nodes computing them.
type Differentiable interface {
	Op
	Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor
}

// Mutator is an op that updates some of its inputs in place (the optimizer
// updates). Inputs lists their indices.
type Mutator interface {
	Op
	Mutates() []int
}

// Stochastic is an op whose result depends on the iteration number (dropout
// masks, Adam's bias correction); the runtime passes it the iteration.
type Stochastic interface {
	Op
	PerIteration()
}

// ShapeError reports inputs an op cannot take.
type ShapeError struct {
	Op     string
	Inputs []Spec
	Reason string
}

func (e *ShapeError) Error() string {
	s := "graph: " + e.Op + ": " + e.Reason + " (inputs"
	for _, in := range e.Inputs {
		s += " " + in.String()
	}
	return s + ")"
}

func shapeErr(op string, in []Spec, format string, args ...any) error {
	return &ShapeError{Op: op, Inputs: in, Reason: fmt.Sprintf(format, args...)}
}

// checkArity returns an error unless exactly n inputs are given.
func checkArity(op string, in []Spec, n int) error {
	if len(in) != n {
		return shapeErr(op, in, "takes %d inputs, got %d", n, len(in))
	}
	return nil
}

// checkFloat returns an error unless every input is floating point.
func checkFloat(op string, in []Spec, idx ...int) error {
	for _, i := range idx {
		if !in[i].DType.IsFloat() {
			return shapeErr(op, in, "input %d must be floating point, got %s", i, in[i].DType)
		}
	}
	return nil
}

// bytesOf sums the sizes of specs.
func bytesOf(specs ...[]Spec) units.Bytes {
	var b units.Bytes
	for _, l := range specs {
		for _, s := range l {
			b += s.Bytes()
		}
	}
	return b
}

// elementwiseCost is the cost of an op doing flopsPerElem per output element.
func elementwiseCost(in, out []Spec, flopsPerElem float64) Cost {
	return Cost{FLOPs: units.FLOPs(flopsPerElem * float64(out[0].Shape.NumElements())), Bytes: bytesOf(in, out)}
}
