package graph

import "github.com/flowkit/flowkit/units"

// IsLoss reports whether op computes a training loss: an f32 scalar, the
// mean over the batch that a runtime reports for each iteration.
func IsLoss(op Op) bool {
	switch op.(type) {
	case SoftmaxCrossEntropy, MeanSquare, VocabLoss:
		return true
	}
	return false
}

// SoftmaxCrossEntropy is the fused, numerically stable mean cross-entropy
// of softmax(logits [N,C]) against integer labels [N] (i32): an f32 scalar.
// A row labelled IgnoreLabel is not scored: the mean is over the others
// (a masked language model's masked positions), on the CPU and the GPU.
type SoftmaxCrossEntropy struct{}

// IgnoreLabel is the label of a row the cross-entropy does not score,
// PyTorch's ignore_index.
const IgnoreLabel = -100

func (SoftmaxCrossEntropy) Type() string { return "softmax_cross_entropy" }

func checkLogitsLabels(op string, in []Spec) error {
	l, y := in[0], in[1]
	if len(l.Shape) != 2 || !l.DType.IsFloat() {
		return shapeErr(op, in, "logits must be float [N,C]")
	}
	if len(y.Shape) != 1 || y.Shape[0] != l.Shape[0] || y.DType != I32 {
		return shapeErr(op, in, "labels must be i32 [%d]", l.Shape[0])
	}
	return nil
}

func (SoftmaxCrossEntropy) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("softmax_cross_entropy", in, 2); err != nil {
		return nil, err
	}
	if err := checkLogitsLabels("softmax_cross_entropy", in); err != nil {
		return nil, err
	}
	return []Spec{{Shape{}, F32}}, nil
}

func (SoftmaxCrossEntropy) Cost(in, out []Spec) Cost { return elementwiseCost(in, in[:1], 5) }

// Signatures: splitting the batch gives partial sums of the mean (each
// device divides by the global N).
func (SoftmaxCrossEntropy) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, P, S(0), S(0)), sig(1, B, B, B)}
}

func (SoftmaxCrossEntropy) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(SoftmaxCrossEntropyGrad{}, n.Inputs[0], n.Inputs[1], dy[0]), nil}
}

// SoftmaxCrossEntropy adds the mean softmax cross-entropy loss.
func (g *Graph) SoftmaxCrossEntropy(logits, labels *Tensor) *Tensor {
	return g.apply1(SoftmaxCrossEntropy{}, logits, labels)
}

// SoftmaxCrossEntropyGrad is dlogits = dloss·(softmax(logits) − onehot)/N:
// (logits, labels, dloss) → dlogits.
type SoftmaxCrossEntropyGrad struct{}

func (SoftmaxCrossEntropyGrad) Type() string { return "softmax_cross_entropy_grad" }

func (SoftmaxCrossEntropyGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("softmax_cross_entropy_grad", in, 3); err != nil {
		return nil, err
	}
	if err := checkLogitsLabels("softmax_cross_entropy_grad", in); err != nil {
		return nil, err
	}
	if len(in[2].Shape) != 0 {
		return nil, shapeErr("softmax_cross_entropy_grad", in, "dloss must be a scalar")
	}
	return []Spec{in[0]}, nil
}

func (SoftmaxCrossEntropyGrad) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 6) }

func (SoftmaxCrossEntropyGrad) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, S(0), S(0), S(0), B), sig(1, B, B, B, B)}
}

// MeanSquare is the mean of the squares of x's elements (x of any shape
// and float dtype) as an f32 scalar: PyTorch's x.float().pow(2).mean(), the
// loss of a model without labels.
type MeanSquare struct{}

func (MeanSquare) Type() string { return "mean_square" }

func (MeanSquare) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("mean_square", in, 1); err != nil {
		return nil, err
	}
	if err := checkFloat("mean_square", in, 0); err != nil {
		return nil, err
	}
	return []Spec{{Shape{}, F32}}, nil
}

// Cost: a multiply and an add per element.
func (MeanSquare) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: units.FLOPs(2 * in[0].Shape.NumElements()), Bytes: bytesOf(in, out)}
}

// Signatures: as for SoftmaxCrossEntropy, a split input gives partial sums
// of the mean (each device dividing by the global count).
func (MeanSquare) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) {
		sigs = append(sigs, sig(1, P, S(a)))
	}
	return append(sigs, sig(1, B, B))
}

func (MeanSquare) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(MeanSquareGrad{}, n.Inputs[0], dy[0])}
}

// MeanSquare adds the mean of the squares of x's elements, an f32 scalar.
func (g *Graph) MeanSquare(x *Tensor) *Tensor { return g.apply1(MeanSquare{}, x) }

// MeanSquareGrad is dx = 2·x·dloss/N for x of N elements: (x, dloss) → dx,
// of x's spec.
type MeanSquareGrad struct{}

func (MeanSquareGrad) Type() string { return "mean_square_grad" }

func (MeanSquareGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("mean_square_grad", in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat("mean_square_grad", in, 0, 1); err != nil {
		return nil, err
	}
	if len(in[1].Shape) != 0 {
		return nil, shapeErr("mean_square_grad", in, "dloss must be a scalar")
	}
	return []Spec{in[0]}, nil
}

// Cost: one multiply per element (2·dloss/N is computed once).
func (MeanSquareGrad) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: units.FLOPs(out[0].Shape.NumElements()), Bytes: bytesOf(in, out)}
}

func (MeanSquareGrad) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) {
		sigs = append(sigs, sig(1, S(a), S(a), B))
	}
	return append(sigs, sig(1, B, B, B))
}

// Softmax is the softmax over the last axis.
type Softmax struct{}

func (Softmax) Type() string { return "softmax" }

func (Softmax) Infer(in []Spec) ([]Spec, error) {
	out, err := sameShapes("softmax", in, 1)
	if err == nil && len(in[0].Shape) == 0 {
		err = shapeErr("softmax", in, "input must have rank ≥ 1")
	}
	return out, err
}

func (Softmax) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 5) }

func (Softmax) Signatures(in, out []Spec) []Signature {
	r := len(in[0].Shape)
	var sigs []Signature
	for a := range r - 1 {
		sigs = append(sigs, sig(1, S(a), S(a)))
	}
	return append(sigs, sig(1, B, B))
}

func (Softmax) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(SoftmaxGrad{}, n.Outputs[0], dy[0])}
}

// Softmax adds a softmax over the last axis.
func (g *Graph) Softmax(x *Tensor) *Tensor { return g.apply1(Softmax{}, x) }

// SoftmaxGrad is dx = y⊙(dy − Σ dy⊙y) from the softmax output: (y, dy) → dx.
type SoftmaxGrad struct{}

func (SoftmaxGrad) Type() string                    { return "softmax_grad" }
func (SoftmaxGrad) Infer(in []Spec) ([]Spec, error) { return sameShapes("softmax_grad", in, 2) }
func (SoftmaxGrad) Cost(in, out []Spec) Cost        { return elementwiseCost(in, out, 4) }
func (SoftmaxGrad) Signatures(in, out []Spec) []Signature {
	r := len(in[0].Shape)
	var sigs []Signature
	for a := range r - 1 {
		sigs = append(sigs, sig(1, S(a), S(a), S(a)))
	}
	return append(sigs, sig(1, B, B, B))
}
