package graph

// sameShapes checks that an elementwise op's n float inputs all have one
// spec and returns it.
func sameShapes(op string, in []Spec, n int) ([]Spec, error) {
	if err := checkArity(op, in, n); err != nil {
		return nil, err
	}
	for i := range in {
		if err := checkFloat(op, in, i); err != nil {
			return nil, err
		}
		if !in[i].Shape.Equal(in[0].Shape) || in[i].DType != in[0].DType {
			return nil, shapeErr(op, in, "inputs must have the same shape and dtype")
		}
	}
	return []Spec{in[0]}, nil
}

// FLOPs per element of the activations and of their gradients (the
// gradient's multiplication by dy included), as the ops below and BiasAct
// count them.
const (
	reluFLOPs     = 1
	reluGradFLOPs = 1
	geluFLOPs     = 8
	geluGradFLOPs = 12
	// SwiGLU's silu(a)·b: the sigmoid (an exponential, a sum and a
	// division, counted as four), two products; its gradient recomputes
	// the sigmoid and forms both inputs' gradients.
	swigluFLOPs     = 6
	swigluGradFLOPs = 11
)

// ReLU is y = max(x, 0).
type ReLU struct{}

func (ReLU) Type() string                    { return "relu" }
func (ReLU) Infer(in []Spec) ([]Spec, error) { return sameShapes("relu", in, 1) }
func (ReLU) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, reluFLOPs) }
func (ReLU) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 1, 1, false)
}
func (ReLU) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(ReLUGrad{}, n.Inputs[0], dy[0])}
}

// ReLU adds max(x, 0).
func (g *Graph) ReLU(x *Tensor) *Tensor { return g.apply1(ReLU{}, x) }

// ReLUGrad is dx = dy·[x > 0]: (x, dy) → dx.
type ReLUGrad struct{}

func (ReLUGrad) Type() string                    { return "relu_grad" }
func (ReLUGrad) Infer(in []Spec) ([]Spec, error) { return sameShapes("relu_grad", in, 2) }
func (ReLUGrad) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, reluGradFLOPs) }
func (ReLUGrad) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 2, 1, false)
}

// GELU is the exact Gaussian error linear unit x·Φ(x).
type GELU struct{}

func (GELU) Type() string                    { return "gelu" }
func (GELU) Infer(in []Spec) ([]Spec, error) { return sameShapes("gelu", in, 1) }
func (GELU) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, geluFLOPs) }
func (GELU) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 1, 1, false)
}
func (GELU) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(GELUGrad{}, n.Inputs[0], dy[0])}
}

// GELU adds x·Φ(x).
func (g *Graph) GELU(x *Tensor) *Tensor { return g.apply1(GELU{}, x) }

// GELUGrad is dx = dy·GELU′(x): (x, dy) → dx.
type GELUGrad struct{}

func (GELUGrad) Type() string                    { return "gelu_grad" }
func (GELUGrad) Infer(in []Spec) ([]Spec, error) { return sameShapes("gelu_grad", in, 2) }
func (GELUGrad) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, geluGradFLOPs) }
func (GELUGrad) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 2, 1, false)
}

// SwiGLU is the gated linear unit of LLaMA's MLP (Shazeer, 2020):
// y = silu(gate)·up = gate·σ(gate)·up, for gate and up of one shape. One
// op instead of SiLU and Mul, as BiasAct fuses: the activation silu(gate)
// is never written, and the backward pass reads gate and up only.
type SwiGLU struct{}

func (SwiGLU) Type() string                    { return "swiglu" }
func (SwiGLU) Infer(in []Spec) ([]Spec, error) { return sameShapes("swiglu", in, 2) }
func (SwiGLU) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, swigluFLOPs) }
func (SwiGLU) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 2, 1, false)
}
func (SwiGLU) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	out := g.Apply(SwiGLUGrad{}, n.Inputs[0], n.Inputs[1], dy[0])
	if out == nil {
		return []*Tensor{nil, nil}
	}
	return out
}

// SwiGLU adds silu(gate)·up.
func (g *Graph) SwiGLU(gate, up *Tensor) *Tensor { return g.apply1(SwiGLU{}, gate, up) }

// SwiGLUGrad is SwiGLU's gradient: (gate, up, dy) → (dgate, dup), with
// dgate = dy·up·σ(gate)·(1 + gate·(1 − σ(gate))) and dup = dy·silu(gate).
type SwiGLUGrad struct{}

func (SwiGLUGrad) Type() string { return "swiglu_grad" }
func (SwiGLUGrad) Infer(in []Spec) ([]Spec, error) {
	out, err := sameShapes("swiglu_grad", in, 3)
	if err != nil {
		return nil, err
	}
	return []Spec{out[0], out[0]}, nil
}
func (SwiGLUGrad) Cost(in, out []Spec) Cost {
	return elementwiseCost(in, out, swigluGradFLOPs) // per position, both outputs
}
func (SwiGLUGrad) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 3, 2, false)
}

// Add is y = a + b for tensors of one shape.
type Add struct{}

func (Add) Type() string                    { return "add" }
func (Add) Infer(in []Spec) ([]Spec, error) { return sameShapes("add", in, 2) }
func (Add) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, 1) }
func (Add) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 2, 1, true)
}
func (Add) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{dy[0], dy[0]}
}

// Add adds a + b.
func (g *Graph) Add(a, b *Tensor) *Tensor { return g.apply1(Add{}, a, b) }

// Mul is y = a ⊙ b for tensors of one shape.
type Mul struct{}

func (Mul) Type() string                    { return "mul" }
func (Mul) Infer(in []Spec) ([]Spec, error) { return sameShapes("mul", in, 2) }
func (Mul) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, 1) }
func (Mul) Signatures(in, out []Spec) []Signature {
	r := len(in[0].Shape)
	return append(elementwiseSignatures(r, 2, 1, false), sig(1, P, P, B), sig(1, P, B, P))
}
func (Mul) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	dx := make([]*Tensor, 2)
	for i := range dx {
		if need[i] {
			dx[i] = g.Mul(dy[0], n.Inputs[1-i])
		}
	}
	return dx
}

// Mul adds a ⊙ b.
func (g *Graph) Mul(a, b *Tensor) *Tensor { return g.apply1(Mul{}, a, b) }

// Scale is y = Alpha·x.
type Scale struct{ Alpha float32 }

func (Scale) Type() string                    { return "scale" }
func (Scale) Infer(in []Spec) ([]Spec, error) { return sameShapes("scale", in, 1) }
func (Scale) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, 1) }
func (Scale) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 1, 1, true)
}
func (op Scale) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.Scale(dy[0], op.Alpha)}
}

// Scale adds alpha·x.
func (g *Graph) Scale(x *Tensor, alpha float32) *Tensor { return g.apply1(Scale{Alpha: alpha}, x) }

// Fill produces a tensor of Shape with every element Value; it has no
// inputs (the seed of the backward pass is a Fill of ones).
type Fill struct {
	Value float32
	Shape Shape
}

func (Fill) Type() string { return "fill" }
func (op Fill) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("fill", in, 0); err != nil {
		return nil, err
	}
	if !op.Shape.valid() {
		return nil, shapeErr("fill", in, "shape %v has a non-positive dimension", op.Shape)
	}
	return []Spec{{op.Shape.Clone(), F32}}, nil
}
func (Fill) Cost(in, out []Spec) Cost { return Cost{Bytes: bytesOf(out)} }
func (op Fill) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, B)}
}

// Fill adds a constant tensor.
func (g *Graph) Fill(shape Shape, v float32) *Tensor { return g.apply1(Fill{Value: v, Shape: shape}) }

// Dropout zeroes each element with probability Rate and scales the rest by
// 1/(1−Rate). The mask is a pure function of (Seed, iteration, element
// index), so it does not depend on how the work is split over devices.
type Dropout struct {
	Rate float32
	Seed uint64
}

func (Dropout) Type() string  { return "dropout" }
func (Dropout) PerIteration() {}
func (op Dropout) Infer(in []Spec) ([]Spec, error) {
	if op.Rate < 0 || op.Rate >= 1 {
		return nil, shapeErr("dropout", in, "rate must be in [0, 1), got %g", op.Rate)
	}
	return sameShapes("dropout", in, 1)
}
func (Dropout) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 2) }
func (Dropout) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 1, 1, false)
}
func (op Dropout) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(DropoutGrad(op), dy[0])}
}

// Dropout adds seeded dropout with the given rate.
func (g *Graph) Dropout(x *Tensor, rate float32, seed uint64) *Tensor {
	return g.apply1(Dropout{Rate: rate, Seed: seed}, x)
}

// DropoutGrad applies the forward pass's mask and scale to dy.
type DropoutGrad Dropout

func (DropoutGrad) Type() string  { return "dropout_grad" }
func (DropoutGrad) PerIteration() {}
func (op DropoutGrad) Infer(in []Spec) ([]Spec, error) {
	return Dropout(op).Infer(in)
}
func (DropoutGrad) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 2) }
func (DropoutGrad) Signatures(in, out []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), 1, 1, false)
}
