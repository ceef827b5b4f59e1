package graph

import "github.com/flowkit/flowkit/units"

// MatMul is Y = op(A)·op(B), op(X) being X or Xᵀ. Each operand is viewed
// as a matrix whose rows are all its leading axes: [d0·…·d(r−2), d(r−1)].
// When A has rank > 2 and is not transposed, Y keeps A's leading axes
// (x[B,S,H]·W[H,O] → [B,S,O]); otherwise Y is [M, N].
type MatMul struct {
	TransA, TransB bool
}

func (MatMul) Type() string { return "matmul" }

// matrixView returns the rows and columns of s viewed as a matrix.
func matrixView(s Shape) (rows, cols int) {
	return s.NumElements() / s[len(s)-1], s[len(s)-1]
}

// dims returns M, N, K of the product.
func (op MatMul) dims(in []Spec) (m, n, k, kb int) {
	ar, ac := matrixView(in[0].Shape)
	br, bc := matrixView(in[1].Shape)
	m, k = ar, ac
	if op.TransA {
		m, k = ac, ar
	}
	kb, n = br, bc
	if op.TransB {
		kb, n = bc, br
	}
	return m, n, k, kb
}

func (op MatMul) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("matmul", in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat("matmul", in, 0, 1); err != nil {
		return nil, err
	}
	if len(in[0].Shape) < 2 || len(in[1].Shape) < 2 {
		return nil, shapeErr("matmul", in, "operands must have rank ≥ 2")
	}
	if in[0].DType != in[1].DType {
		return nil, shapeErr("matmul", in, "dtypes differ")
	}
	m, n, k, kb := op.dims(in)
	if k != kb {
		return nil, shapeErr("matmul", in, "inner dimensions differ: %d vs %d (transA=%v, transB=%v)", k, kb, op.TransA, op.TransB)
	}
	out := Shape{m, n}
	if a := in[0].Shape; len(a) > 2 && !op.TransA {
		out = append(a[:len(a)-1:len(a)-1], n)
	}
	return []Spec{{out, in[0].DType}}, nil
}

func (op MatMul) Cost(in, out []Spec) Cost {
	m, n, k, _ := op.dims(in)
	return Cost{FLOPs: units.FLOPs(2 * float64(m) * float64(n) * float64(k)), Bytes: bytesOf(in, out)}
}

// Signatures are OneFlow's matmul rules on the matrix views:
// Y:S(m)←A:S(m),B:B; Y:S(n)←A:B,B:S(n); Y:P←A:S(k),B:S(k); partial sums
// pass through either operand; and all-broadcast.
func (op MatMul) Signatures(in, out []Spec) []Signature {
	ra, rb, ry := len(in[0].Shape), len(in[1].Shape), len(out[0].Shape)
	am, ak := 0, ra-1
	if op.TransA {
		am, ak = ra-1, 0
	}
	bk, bn := 0, rb-1
	if op.TransB {
		bk, bn = rb-1, 0
	}
	sigs := []Signature{
		sig(1, S(0), S(am), B),
		sig(1, S(ry-1), B, S(bn)),
		sig(1, P, S(ak), S(bk)),
		sig(1, P, P, B),
		sig(1, P, B, P),
		sig(1, B, B, B),
	}
	if ra > 2 && !op.TransA { // every leading axis of A is a row axis
		for a := 1; a < ra-1; a++ {
			sigs = append(sigs, sig(1, S(a), S(a), B))
		}
	}
	return sigs
}

func (op MatMul) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	a, b, d := n.Inputs[0], n.Inputs[1], dy[0]
	var da, db *Tensor
	switch {
	case !need[0]:
	case op.TransA: // A is [K,M]: dA = op(B)·dYᵀ
		da = g.MatMul(b, d, op.TransB, true)
	default: // dA = dY·op(B)ᵀ
		da = g.MatMul(d, b, false, !op.TransB)
		if da != nil && !da.Spec.Shape.Equal(a.Spec.Shape) {
			da = g.Reshape(da, a.Spec.Shape)
		}
	}
	switch {
	case !need[1]:
	case op.TransB: // B is [N,K]: dB = dYᵀ·op(A)
		db = g.MatMul(d, a, true, op.TransA)
	default: // dB = op(A)ᵀ·dY
		db = g.MatMul(a, d, !op.TransA, false)
	}
	if db != nil && !db.Spec.Shape.Equal(b.Spec.Shape) {
		db = g.Reshape(db, b.Spec.Shape)
	}
	return []*Tensor{da, db}
}

// MatMul adds Y = op(a)·op(b).
func (g *Graph) MatMul(a, b *Tensor, transA, transB bool) *Tensor {
	return g.apply1(MatMul{TransA: transA, TransB: transB}, a, b)
}

// Linear adds x·wᵀ + bias, with w stored [out, in] as PyTorch does; bias
// may be nil.
func (g *Graph) Linear(x, w, bias *Tensor) *Tensor {
	y := g.MatMul(x, w, false, true)
	if bias == nil || y == nil {
		return y
	}
	return g.BiasAdd(y, bias, len(y.Spec.Shape)-1)
}

// BiasAdd is y = x + b broadcast along every axis but Axis; b has shape
// [x.Shape[Axis]].
type BiasAdd struct{ Axis int }

func (BiasAdd) Type() string { return "bias_add" }

func (op BiasAdd) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("bias_add", in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat("bias_add", in, 0, 1); err != nil {
		return nil, err
	}
	x, b := in[0].Shape, in[1].Shape
	if op.Axis < 0 || op.Axis >= len(x) {
		return nil, shapeErr("bias_add", in, "axis %d out of range for rank %d", op.Axis, len(x))
	}
	if len(b) != 1 || b[0] != x[op.Axis] {
		return nil, shapeErr("bias_add", in, "bias must be [%d] (axis %d of x)", x[op.Axis], op.Axis)
	}
	return []Spec{in[0]}, nil
}

func (op BiasAdd) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 1) }

func (op BiasAdd) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) {
		if a == op.Axis {
			sigs = append(sigs, sig(1, S(a), S(a), S(0)))
		} else {
			sigs = append(sigs, sig(1, S(a), S(a), B))
		}
	}
	return append(sigs, sig(1, B, B, B), sig(1, P, P, P))
}

func (op BiasAdd) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	var db *Tensor
	if need[1] {
		db = g.apply1(BiasGrad(op), dy[0])
	}
	return []*Tensor{dy[0], db}
}

// BiasAdd adds x + b along axis.
func (g *Graph) BiasAdd(x, b *Tensor, axis int) *Tensor {
	return g.apply1(BiasAdd{Axis: axis}, x, b)
}

// BiasGrad sums dy over every axis but Axis: the gradient of a bias.
type BiasGrad struct{ Axis int }

func (BiasGrad) Type() string { return "bias_grad" }

func (op BiasGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("bias_grad", in, 1); err != nil {
		return nil, err
	}
	if op.Axis < 0 || op.Axis >= len(in[0].Shape) {
		return nil, shapeErr("bias_grad", in, "axis %d out of range", op.Axis)
	}
	return []Spec{{Shape{in[0].Shape[op.Axis]}, in[0].DType}}, nil
}

func (op BiasGrad) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: units.FLOPs(in[0].Shape.NumElements()), Bytes: bytesOf(in, out)}
}

func (op BiasGrad) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) {
		if a == op.Axis {
			sigs = append(sigs, sig(1, S(0), S(a)))
		} else {
			sigs = append(sigs, sig(1, P, S(a)))
		}
	}
	return append(sigs, sig(1, B, B), sig(1, P, P))
}
