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

// Dense is y = Act(x·wᵀ + b) for x [..., in], w [out, in] as PyTorch's
// nn.Linear stores it and b [out]: a fully-connected layer in one op, which
// a GPU computes in one cuBLASLt call (bias and ReLU in the GEMM's
// epilogue) instead of a GEMM and a pass over its result. Act is "" (none)
// or "relu". It keeps no pre-activation: ReLU's gradient is read off y
// (y > 0 exactly where x·wᵀ + b > 0, with kernels/cpu's ReLU), so the
// gradient is ReLUGrad(y, dy) followed by what MatMul's and BiasAdd's rules
// would add (see Grad). y is what MatMul, BiasAdd and ReLU compute, bit for
// bit in f32 on the CPU.
type Dense struct{ Act string }

func (Dense) Type() string { return "dense" }

func (op Dense) Infer(in []Spec) ([]Spec, error) {
	const name = "dense"
	if err := checkArity(name, in, 3); err != nil {
		return nil, err
	}
	if err := checkFloat(name, in, 0, 1, 2); err != nil {
		return nil, err
	}
	if op.Act != "" && op.Act != "relu" {
		return nil, shapeErr(name, in, "unknown activation %q (want \"\" or relu)", op.Act)
	}
	x, w, b := in[0].Shape, in[1].Shape, in[2].Shape
	if len(x) < 2 || len(w) != 2 {
		return nil, shapeErr(name, in, "x must have rank ≥ 2 and w rank 2 ([out, in])")
	}
	if in[1].DType != in[0].DType || in[2].DType != in[0].DType {
		return nil, shapeErr(name, in, "dtypes differ")
	}
	if x[len(x)-1] != w[1] {
		return nil, shapeErr(name, in, "x has %d features, w takes %d", x[len(x)-1], w[1])
	}
	if len(b) != 1 || b[0] != w[0] {
		return nil, shapeErr(name, in, "bias must be [%d] (w's rows)", w[0])
	}
	out := append(x[:len(x)-1:len(x)-1], w[0])
	return []Spec{{out, in[0].DType}}, nil
}

// Cost is the GEMM's plus the bias and activation per output element; x,
// w and b are read and y written once.
func (op Dense) Cost(in, out []Spec) Cost {
	rows, k := matrixView(in[0].Shape)
	n := in[1].Shape[0]
	perElem := 1.0
	if op.Act == "relu" {
		perElem += reluFLOPs
	}
	return Cost{FLOPs: units.FLOPs((2*float64(k) + perElem) * float64(rows) * float64(n)), Bytes: bytesOf(in, out)}
}

// Signatures split x's row axes (w and b broadcast) or the output features
// (w by rows, b with them), or broadcast everything; no partial sums, which
// the bias and the activation do not pass through.
func (op Dense) Signatures(in, out []Spec) []Signature {
	r := len(in[0].Shape)
	var sigs []Signature
	for a := range r - 1 {
		sigs = append(sigs, sig(1, S(a), S(a), B, B))
	}
	return append(sigs, sig(1, S(r-1), B, S(0), S(0)), sig(1, B, B, B, B))
}

// Grad is MatMul's and BiasAdd's behind ReLU's: dz = ReLUGrad(y, dy) (dy
// without an activation), dx = dz·w, and dw = dzᵀ·x and db = BiasGrad(dz)
// in one DenseGrad when both are needed.
func (op Dense) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	x, w := n.Inputs[0], n.Inputs[1]
	dz := dy[0]
	if op.Act == "relu" && (need[0] || need[1] || need[2]) {
		dz = g.apply1(ReLUGrad{}, n.Outputs[0], dz)
	}
	grads := make([]*Tensor, 3)
	if need[0] {
		grads[0] = g.MatMul(dz, w, false, false)
		if grads[0] != nil && !grads[0].Spec.Shape.Equal(x.Spec.Shape) {
			grads[0] = g.Reshape(grads[0], x.Spec.Shape)
		}
	}
	switch {
	case need[1] && need[2]:
		if out := g.Apply(DenseGrad{}, dz, x); out != nil {
			grads[1], grads[2] = out[0], out[1]
		}
	case need[1]:
		grads[1] = g.MatMul(dz, x, true, false)
	case need[2]:
		grads[2] = g.apply1(BiasGrad{Axis: len(dz.Spec.Shape) - 1}, dz)
	}
	return grads
}

// DenseGrad is (dz, x) → (dw, db) = (dzᵀ·x, dz summed over its rows): the
// weight and bias gradients of Dense in one op, which a GPU computes in
// one cuBLASLt call (the bias gradient in the GEMM's epilogue, from the
// dz it reads anyway) instead of a GEMM and a reduction reading dz again.
// x is [..., in] and dz [..., out] with the same leading axes; dw is
// [out, in] and db [out]. It computes what MatMul{TransA: true} and
// BiasGrad compute, bit for bit in f32 on the CPU.
type DenseGrad struct{}

func (DenseGrad) Type() string { return "dense_grad" }

func (DenseGrad) Infer(in []Spec) ([]Spec, error) {
	const name = "dense_grad"
	if err := checkArity(name, in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat(name, in, 0, 1); err != nil {
		return nil, err
	}
	dz, x := in[0].Shape, in[1].Shape
	if len(dz) < 2 || len(dz) != len(x) || !dz[:len(dz)-1].Equal(x[:len(x)-1]) {
		return nil, shapeErr(name, in, "dz and x must have the same leading axes, rank ≥ 2")
	}
	if in[0].DType != in[1].DType {
		return nil, shapeErr(name, in, "dtypes differ")
	}
	out, k := dz[len(dz)-1], x[len(x)-1]
	return []Spec{{Shape{out, k}, in[0].DType}, {Shape{out}, in[0].DType}}, nil
}

// Cost is the GEMM's and the sum's; dz and x are read and dw and db
// written once.
func (DenseGrad) Cost(in, out []Spec) Cost {
	rows, n := matrixView(in[0].Shape)
	_, k := matrixView(in[1].Shape)
	return Cost{FLOPs: units.FLOPs((2*float64(k) + 1) * float64(rows) * float64(n)), Bytes: bytesOf(in, out)}
}

// Signatures: split rows give partial sums of both gradients; split output
// features split dw's rows and db; split input features split dw's
// columns, db whole on every device; a partial dz gives partial sums; or
// everything broadcast.
func (DenseGrad) Signatures(in, out []Spec) []Signature {
	r := len(in[0].Shape)
	var sigs []Signature
	for a := range r - 1 {
		sigs = append(sigs, sig(2, P, P, S(a), S(a)))
	}
	return append(sigs,
		sig(2, S(0), S(0), S(r-1), B),
		sig(2, S(1), B, B, S(r-1)),
		sig(2, P, P, P, B),
		sig(2, B, B, B, B))
}

// Dense adds act(x·wᵀ + b), act "" or "relu" (see Dense).
func (g *Graph) Dense(x, w, b *Tensor, act string) *Tensor {
	return g.apply1(Dense{Act: act}, x, w, b)
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
	if err := checkBias("bias_add", in, op.Axis); err != nil {
		return nil, err
	}
	return []Spec{in[0]}, nil
}

// checkBias returns an error unless in[1], a bias, is [x.Shape[axis]] for
// x = in[0].
func checkBias(op string, in []Spec, axis int) error {
	x, b := in[0].Shape, in[1].Shape
	if axis < 0 || axis >= len(x) {
		return shapeErr(op, in, "axis %d out of range for rank %d", axis, len(x))
	}
	if len(b) != 1 || b[0] != x[axis] {
		return shapeErr(op, in, "bias must be [%d] (axis %d of x)", x[axis], axis)
	}
	return nil
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

// BiasAct is y = Act(x + b), b broadcast as BiasAdd broadcasts it: a
// layer's bias and activation in one pass, which neither writes nor keeps
// the pre-activation x + b (the gradient recomputes it). Act is "relu" or
// "gelu"; y is what BiasAdd followed by ReLU or GELU computes, bit for bit
// in f32.
type BiasAct struct {
	Axis int
	Act  string
}

func (BiasAct) Type() string { return "bias_act" }

// activationFLOPs returns the FLOPs per element of BiasAct's activation act
// and of its gradient; ok is false for an unknown act.
func activationFLOPs(act string) (fwd, grad float64, ok bool) {
	switch act {
	case "relu":
		return reluFLOPs, reluGradFLOPs, true
	case "gelu":
		return geluFLOPs, geluGradFLOPs, true
	}
	return 0, 0, false
}

// inferBiasAct checks the inputs of BiasAct (x, b) or BiasActGrad (x, b,
// dy) and returns the output spec, x's.
func inferBiasAct(op, act string, axis int, in []Spec, arity int) ([]Spec, error) {
	if err := checkArity(op, in, arity); err != nil {
		return nil, err
	}
	if _, _, ok := activationFLOPs(act); !ok {
		return nil, shapeErr(op, in, "unknown activation %q (want relu or gelu)", act)
	}
	for i := range in {
		if err := checkFloat(op, in, i); err != nil {
			return nil, err
		}
		if in[i].DType != in[0].DType {
			return nil, shapeErr(op, in, "dtypes differ: x is %s, input %d is %s", in[0].DType, i, in[i].DType)
		}
	}
	if err := checkBias(op, in, axis); err != nil {
		return nil, err
	}
	if arity == 3 && !in[2].Shape.Equal(in[0].Shape) {
		return nil, shapeErr(op, in, "dy must be %v, x's shape", in[0].Shape)
	}
	return []Spec{in[0]}, nil
}

// biasActSignatures are the layouts of BiasAct (y ← x, b) and, with dy, of
// BiasActGrad (dz ← x, b, dy): BiasAdd's splits and broadcast, but no
// partial sums, which the activation, not being linear, does not pass
// through.
func biasActSignatures(rank, axis int, dy bool) []Signature {
	var sigs []Signature
	add := func(t, b SBP) {
		l := []SBP{t, t, b}
		if dy {
			l = append(l, t)
		}
		sigs = append(sigs, sig(1, l...))
	}
	for a := range rank {
		if a == axis {
			add(S(a), S(0))
		} else {
			add(S(a), B)
		}
	}
	add(B, B)
	return sigs
}

func (op BiasAct) Infer(in []Spec) ([]Spec, error) {
	return inferBiasAct("bias_act", op.Act, op.Axis, in, 2)
}

// Cost counts the add and the activation per element, and reads x and b
// and writes y once.
func (op BiasAct) Cost(in, out []Spec) Cost {
	fwd, _, _ := activationFLOPs(op.Act)
	return elementwiseCost(in, out, 1+fwd)
}

func (op BiasAct) Signatures(in, out []Spec) []Signature {
	return biasActSignatures(len(in[0].Shape), op.Axis, false)
}

// Grad adds dz = dy ⊙ Act′(x + b) (BiasActGrad), x's gradient, and, if b
// takes one, BiasGrad(dz): the values ReLUGrad or GELUGrad and BiasGrad
// compute behind BiasAdd, with x + b recomputed instead of read.
func (op BiasAct) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	dx := make([]*Tensor, 2)
	if !need[0] && !need[1] {
		return dx
	}
	dz := g.apply1(BiasActGrad(op), n.Inputs[0], n.Inputs[1], dy[0])
	if need[0] {
		dx[0] = dz
	}
	if need[1] {
		dx[1] = g.apply1(BiasGrad{Axis: op.Axis}, dz)
	}
	return dx
}

// BiasAct adds act(x + b) along axis, act "relu" or "gelu".
func (g *Graph) BiasAct(x, b *Tensor, axis int, act string) *Tensor {
	return g.apply1(BiasAct{Axis: axis, Act: act}, x, b)
}

// BiasActGrad is dz = dy ⊙ Act′(x + b): (x, b, dy) → dz, BiasAct's
// gradient with respect to x. Act′ is what ReLUGrad or GELUGrad computes,
// at x + b rounded as BiasAct rounds it.
type BiasActGrad struct {
	Axis int
	Act  string
}

func (BiasActGrad) Type() string { return "bias_act_grad" }

func (op BiasActGrad) Infer(in []Spec) ([]Spec, error) {
	return inferBiasAct("bias_act_grad", op.Act, op.Axis, in, 3)
}

// Cost counts the add and the gradient's FLOPs per element, and reads x,
// b and dy and writes dz once.
func (op BiasActGrad) Cost(in, out []Spec) Cost {
	_, grad, _ := activationFLOPs(op.Act)
	return elementwiseCost(in, out, 1+grad)
}

func (op BiasActGrad) Signatures(in, out []Spec) []Signature {
	return biasActSignatures(len(in[0].Shape), op.Axis, true)
}
