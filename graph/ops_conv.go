package graph

import "github.com/flowkit/flowkit/units"

// Window is the geometry of a 2-D sliding window over NCHW images.
type Window struct {
	StrideH, StrideW int
	PadH, PadW       int
}

func (w Window) out(in, k, stride, pad int) int { return (in+2*pad-k)/stride + 1 }

// check validates the window against an input of h×w and a kernel of r×s
// and returns the output size.
func (w Window) check(op string, in []Spec, h, wd, r, s int) (oh, ow int, err error) {
	if w.StrideH < 1 || w.StrideW < 1 {
		return 0, 0, shapeErr(op, in, "stride must be ≥ 1, got %d×%d", w.StrideH, w.StrideW)
	}
	if w.PadH < 0 || w.PadW < 0 || w.PadH >= r || w.PadW >= s {
		return 0, 0, shapeErr(op, in, "padding %d×%d must be ≥ 0 and smaller than the %d×%d window", w.PadH, w.PadW, r, s)
	}
	oh, ow = w.out(h, r, w.StrideH, w.PadH), w.out(wd, s, w.StrideW, w.PadW)
	if h+2*w.PadH < r || wd+2*w.PadW < s || oh < 1 || ow < 1 {
		return 0, 0, shapeErr(op, in, "%d×%d window does not fit a padded %d×%d image", r, s, h+2*w.PadH, wd+2*w.PadW)
	}
	return oh, ow, nil
}

// Conv2D is a 2-D convolution (cross-correlation, as in every framework):
// x [N,C,H,W] ⋆ w [K,C,R,S] → y [N,K,OH,OW]. Bias is a separate BiasAdd.
type Conv2D struct{ Window }

func (Conv2D) Type() string { return "conv2d" }

func (op Conv2D) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("conv2d", in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat("conv2d", in, 0, 1); err != nil {
		return nil, err
	}
	x, w := in[0].Shape, in[1].Shape
	if len(x) != 4 || len(w) != 4 {
		return nil, shapeErr("conv2d", in, "want x [N,C,H,W] and w [K,C,R,S]")
	}
	if x[1] != w[1] {
		return nil, shapeErr("conv2d", in, "x has %d channels, w expects %d", x[1], w[1])
	}
	oh, ow, err := op.check("conv2d", in, x[2], x[3], w[2], w[3])
	if err != nil {
		return nil, err
	}
	return []Spec{{Shape{x[0], w[0], oh, ow}, in[0].DType}}, nil
}

// convFLOPs is 2·N·K·OH·OW·C·R·S, the same for the forward pass and each
// of the two backward passes.
func convFLOPs(x, w, y Shape) units.FLOPs {
	return units.FLOPs(2 * float64(y.NumElements()) * float64(w[1]*w[2]*w[3]))
}

func (op Conv2D) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: convFLOPs(in[0].Shape, in[1].Shape, out[0].Shape), Bytes: bytesOf(in, out)}
}

// Signatures: batch split (data parallel), output-channel split (w split on
// K), input-channel split (partial sums), broadcast.
func (op Conv2D) Signatures(in, out []Spec) []Signature {
	return []Signature{
		sig(1, S(0), S(0), B),
		sig(1, S(1), B, S(0)),
		sig(1, P, S(1), S(1)),
		sig(1, P, P, B),
		sig(1, B, B, B),
	}
}

func (op Conv2D) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	x, w := n.Inputs[0], n.Inputs[1]
	var dx, dw *Tensor
	if need[0] {
		dx = g.apply1(Conv2DGradData{Window: op.Window, X: x.Spec.Shape.Clone()}, dy[0], w)
	}
	if need[1] {
		dw = g.apply1(Conv2DGradFilter{Window: op.Window, W: w.Spec.Shape.Clone()}, x, dy[0])
	}
	return []*Tensor{dx, dw}
}

// Conv2D adds a convolution of x with w.
func (g *Graph) Conv2D(x, w *Tensor, stride, pad int) *Tensor {
	return g.apply1(Conv2D{Window{stride, stride, pad, pad}}, x, w)
}

// Conv2DGradData is dx of a convolution: (dy, w) → dx of shape X.
type Conv2DGradData struct {
	Window
	X Shape
}

func (Conv2DGradData) Type() string { return "conv2d_grad_data" }

func (op Conv2DGradData) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("conv2d_grad_data", in, 2); err != nil {
		return nil, err
	}
	fwd, err := Conv2D{op.Window}.Infer([]Spec{{op.X, in[1].DType}, in[1]})
	if err != nil {
		return nil, err
	}
	if !fwd[0].Shape.Equal(in[0].Shape) {
		return nil, shapeErr("conv2d_grad_data", in, "dy must be %v", fwd[0].Shape)
	}
	return []Spec{{op.X, in[0].DType}}, nil
}

func (op Conv2DGradData) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: convFLOPs(op.X, in[1].Shape, in[0].Shape), Bytes: bytesOf(in, out)}
}

func (op Conv2DGradData) Signatures(in, out []Spec) []Signature {
	return []Signature{
		sig(1, S(0), S(0), B),
		sig(1, P, S(1), S(0)),
		sig(1, S(1), B, S(1)),
		sig(1, B, B, B),
	}
}

// Conv2DGradFilter is dw of a convolution: (x, dy) → dw of shape W.
type Conv2DGradFilter struct {
	Window
	W Shape
}

func (Conv2DGradFilter) Type() string { return "conv2d_grad_filter" }

func (op Conv2DGradFilter) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("conv2d_grad_filter", in, 2); err != nil {
		return nil, err
	}
	fwd, err := Conv2D{op.Window}.Infer([]Spec{in[0], {op.W, in[0].DType}})
	if err != nil {
		return nil, err
	}
	if !fwd[0].Shape.Equal(in[1].Shape) {
		return nil, shapeErr("conv2d_grad_filter", in, "dy must be %v", fwd[0].Shape)
	}
	return []Spec{{op.W, in[0].DType}}, nil
}

func (op Conv2DGradFilter) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: convFLOPs(in[0].Shape, op.W, in[1].Shape), Bytes: bytesOf(in, out)}
}

func (op Conv2DGradFilter) Signatures(in, out []Spec) []Signature {
	return []Signature{
		sig(1, P, S(0), S(0)),
		sig(1, S(0), B, S(1)),
		sig(1, S(1), S(1), B),
		sig(1, B, B, B),
	}
}

// MaxPool2D takes the maximum over each window of x [N,C,H,W]; padding
// counts as −∞.
type MaxPool2D struct {
	KH, KW int
	Window
}

func (MaxPool2D) Type() string { return "max_pool2d" }

func (op MaxPool2D) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("max_pool2d", in, 1); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) != 4 {
		return nil, shapeErr("max_pool2d", in, "want x [N,C,H,W]")
	}
	if op.KH < 1 || op.KW < 1 {
		return nil, shapeErr("max_pool2d", in, "window must be ≥ 1, got %d×%d", op.KH, op.KW)
	}
	oh, ow, err := op.check("max_pool2d", in, x[2], x[3], op.KH, op.KW)
	if err != nil {
		return nil, err
	}
	return []Spec{{Shape{x[0], x[1], oh, ow}, in[0].DType}}, nil
}

func (op MaxPool2D) Cost(in, out []Spec) Cost {
	return elementwiseCost(in, out, float64(op.KH*op.KW))
}

func (op MaxPool2D) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, S(0), S(0)), sig(1, S(1), S(1)), sig(1, B, B)}
}

func (op MaxPool2D) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.apply1(MaxPool2DGrad(op), n.Inputs[0], dy[0])}
}

// MaxPool2D adds a k×k max pooling with the given stride and no padding.
func (g *Graph) MaxPool2D(x *Tensor, k, stride int) *Tensor {
	return g.apply1(MaxPool2D{KH: k, KW: k, Window: Window{StrideH: stride, StrideW: stride}}, x)
}

// MaxPool2DGrad routes dy to the argmax of each window: (x, dy) → dx.
type MaxPool2DGrad MaxPool2D

func (MaxPool2DGrad) Type() string { return "max_pool2d_grad" }

func (op MaxPool2DGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("max_pool2d_grad", in, 2); err != nil {
		return nil, err
	}
	fwd, err := MaxPool2D(op).Infer(in[:1])
	if err != nil {
		return nil, err
	}
	if !fwd[0].Shape.Equal(in[1].Shape) {
		return nil, shapeErr("max_pool2d_grad", in, "dy must be %v", fwd[0].Shape)
	}
	return []Spec{in[0]}, nil
}

func (op MaxPool2DGrad) Cost(in, out []Spec) Cost {
	return elementwiseCost(in, in[1:], float64(op.KH*op.KW))
}

func (op MaxPool2DGrad) Signatures(in, out []Spec) []Signature {
	return []Signature{sig(1, S(0), S(0), S(0)), sig(1, S(1), S(1), S(1)), sig(1, B, B, B)}
}
