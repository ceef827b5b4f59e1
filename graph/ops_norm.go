package graph

// LayerNorm normalizes over the last axis and applies gamma and beta
// ([C]): (x, gamma, beta) → (y, mean, rstd), the mean and reciprocal
// standard deviation (shape x[:-1]) kept for the backward pass.
type LayerNorm struct{ Eps float32 }

func (LayerNorm) Type() string { return "layer_norm" }

func (op LayerNorm) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("layer_norm", in, 3); err != nil {
		return nil, err
	}
	if err := checkFloat("layer_norm", in, 0, 1, 2); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) < 1 {
		return nil, shapeErr("layer_norm", in, "x must have rank ≥ 1")
	}
	c := Shape{x[len(x)-1]}
	if !in[1].Shape.Equal(c) || !in[2].Shape.Equal(c) {
		return nil, shapeErr("layer_norm", in, "gamma and beta must be %v", c)
	}
	if op.Eps <= 0 {
		return nil, shapeErr("layer_norm", in, "eps must be positive, got %g", op.Eps)
	}
	stat := Spec{x[:len(x)-1].Clone(), F32}
	return []Spec{in[0], stat, stat}, nil
}

func (LayerNorm) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 8) }

func (LayerNorm) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) - 1 {
		sigs = append(sigs, sig(3, S(a), S(a), S(a), S(a), B, B))
	}
	return append(sigs, sig(3, B, B, B, B, B, B))
}

func (op LayerNorm) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	out := g.Apply(LayerNormGrad{}, n.Inputs[0], n.Inputs[1], dy[0], n.Outputs[1], n.Outputs[2])
	if out == nil {
		return []*Tensor{nil, nil, nil}
	}
	return out
}

// LayerNorm adds a layer normalization over the last axis and returns y.
func (g *Graph) LayerNorm(x, gamma, beta *Tensor, eps float32) *Tensor {
	return g.apply1(LayerNorm{Eps: eps}, x, gamma, beta)
}

// LayerNormGrad: (x, gamma, dy, mean, rstd) → (dx, dgamma, dbeta).
type LayerNormGrad struct{}

func (LayerNormGrad) Type() string { return "layer_norm_grad" }

func (LayerNormGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("layer_norm_grad", in, 5); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) < 1 || !in[2].Shape.Equal(x) || !in[1].Shape.Equal(Shape{x[len(x)-1]}) ||
		!in[3].Shape.Equal(x[:len(x)-1]) || !in[4].Shape.Equal(x[:len(x)-1]) {
		return nil, shapeErr("layer_norm_grad", in, "inconsistent shapes")
	}
	return []Spec{in[0], in[1], in[1]}, nil
}

func (LayerNormGrad) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 12) }

func (LayerNormGrad) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) - 1 {
		sigs = append(sigs, sig(3, S(a), P, P, S(a), B, S(a), S(a), S(a)))
	}
	return append(sigs, sig(3, B, B, B, B, B, B, B, B))
}

// RMSNorm normalizes over the last axis by the root mean square and
// applies gamma ([C]): (x, gamma) → (y, rstd), y = x·rstd·gamma with rstd =
// 1/√(mean(x²)+eps), the reciprocal root mean square (shape x[:-1]) kept
// for the backward pass.
type RMSNorm struct{ Eps float32 }

func (RMSNorm) Type() string { return "rms_norm" }

func (op RMSNorm) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("rms_norm", in, 2); err != nil {
		return nil, err
	}
	if err := checkFloat("rms_norm", in, 0, 1); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) < 1 {
		return nil, shapeErr("rms_norm", in, "x must have rank ≥ 1")
	}
	c := Shape{x[len(x)-1]}
	if !in[1].Shape.Equal(c) {
		return nil, shapeErr("rms_norm", in, "gamma must be %v", c)
	}
	if op.Eps <= 0 {
		return nil, shapeErr("rms_norm", in, "eps must be positive, got %g", op.Eps)
	}
	return []Spec{in[0], {x[:len(x)-1].Clone(), F32}}, nil
}

func (RMSNorm) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 4) }

func (RMSNorm) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) - 1 {
		sigs = append(sigs, sig(2, S(a), S(a), S(a), B))
	}
	return append(sigs, sig(2, B, B, B, B))
}

func (op RMSNorm) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	out := g.Apply(RMSNormGrad{}, n.Inputs[0], n.Inputs[1], dy[0], n.Outputs[1])
	if out == nil {
		return []*Tensor{nil, nil}
	}
	return out
}

// RMSNorm adds an RMS normalization over the last axis and returns y.
func (g *Graph) RMSNorm(x, gamma *Tensor, eps float32) *Tensor {
	return g.apply1(RMSNorm{Eps: eps}, x, gamma)
}

// RMSNormGrad: (x, gamma, dy, rstd) → (dx, dgamma).
type RMSNormGrad struct{}

func (RMSNormGrad) Type() string { return "rms_norm_grad" }

func (RMSNormGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("rms_norm_grad", in, 4); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) < 1 || !in[2].Shape.Equal(x) || !in[1].Shape.Equal(Shape{x[len(x)-1]}) ||
		!in[3].Shape.Equal(x[:len(x)-1]) {
		return nil, shapeErr("rms_norm_grad", in, "inconsistent shapes")
	}
	return []Spec{in[0], in[1]}, nil
}

func (RMSNormGrad) Cost(in, out []Spec) Cost { return elementwiseCost(in, out, 9) }

func (RMSNormGrad) Signatures(in, out []Spec) []Signature {
	var sigs []Signature
	for a := range len(in[0].Shape) - 1 {
		sigs = append(sigs, sig(2, S(a), P, S(a), B, S(a), S(a)))
	}
	return append(sigs, sig(2, B, B, B, B, B, B))
}

// BatchNorm normalizes each channel of x [N,C,H,W] over the batch and the
// image, its N·H·W values, to zero mean and unit variance (the biased
// variance, plus eps) and applies gamma and beta ([C]): (x, gamma, beta) →
// y, y = (x − mean_c)·rstd_c·gamma_c + beta_c with rstd_c = 1/√(var_c+eps).
// It is batch normalization in training mode: the statistics are the
// batch's own, and no running averages are kept (flowkit's evaluation of a
// model with it would normalize by the evaluated batch). The backward pass
// recomputes the statistics from x rather than keeping them, one more read
// of x for two [C] tensors fewer to place and box.
//
// Split over the batch (data parallelism), each device normalizes its own
// samples by their own statistics, as PyTorch's BatchNorm2d does under
// DistributedDataParallel and OneFlow's under a split batch: a replica's
// outputs then depend on how the batch is split, which the plan fixes (a
// synchronized batch norm would all-reduce 2·C statistics per layer and
// pass). Split over channels it is exact.
type BatchNorm struct{ Eps float32 }

func (BatchNorm) Type() string { return "batch_norm" }

func (op BatchNorm) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("batch_norm", in, 3); err != nil {
		return nil, err
	}
	if err := checkFloat("batch_norm", in, 0, 1, 2); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) != 4 {
		return nil, shapeErr("batch_norm", in, "want x [N,C,H,W]")
	}
	c := Shape{x[1]}
	if !in[1].Shape.Equal(c) || !in[2].Shape.Equal(c) {
		return nil, shapeErr("batch_norm", in, "gamma and beta must be %v", c)
	}
	if op.Eps <= 0 {
		return nil, shapeErr("batch_norm", in, "eps must be positive, got %g", op.Eps)
	}
	return []Spec{in[0]}, nil
}

// Cost: the statistics (a read of x), then the normalization (a read of x,
// a write of y), about 8 flops a value.
func (BatchNorm) Cost(in, out []Spec) Cost {
	c := elementwiseCost(in, out, 8)
	c.Bytes += in[0].Bytes()
	return c
}

func (BatchNorm) Signatures(in, out []Spec) []Signature {
	return []Signature{
		sig(1, S(0), S(0), B, B),       // the batch split: each device's own statistics
		sig(1, S(1), S(1), S(0), S(0)), // the channels split: exact
		sig(1, B, B, B, B),
	}
}

func (op BatchNorm) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	out := g.Apply(BatchNormGrad(op), n.Inputs[0], n.Inputs[1], dy[0])
	if out == nil {
		return []*Tensor{nil, nil, nil}
	}
	return out
}

// BatchNorm adds a batch normalization of x [N,C,H,W] and returns y.
func (g *Graph) BatchNorm(x, gamma, beta *Tensor, eps float32) *Tensor {
	return g.apply1(BatchNorm{Eps: eps}, x, gamma, beta)
}

// BatchNormGrad: (x, gamma, dy) → (dx, dgamma, dbeta), the statistics
// recomputed from x. With x̂ = (x − mean)·rstd and g = dy·gamma, channel by
// channel over its M = N·H·W values, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)),
// dgamma = Σ dy·x̂ and dbeta = Σ dy.
type BatchNormGrad BatchNorm

func (BatchNormGrad) Type() string { return "batch_norm_grad" }

func (op BatchNormGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("batch_norm_grad", in, 3); err != nil {
		return nil, err
	}
	x := in[0].Shape
	if len(x) != 4 || !in[2].Shape.Equal(x) || !in[1].Shape.Equal(Shape{x[1]}) {
		return nil, shapeErr("batch_norm_grad", in, "want x and dy [N,C,H,W], gamma [C]")
	}
	if op.Eps <= 0 {
		return nil, shapeErr("batch_norm_grad", in, "eps must be positive, got %g", op.Eps)
	}
	return []Spec{in[0], in[1], in[1]}, nil
}

// Cost: the statistics (a read of x), the sums (reads of x and dy), then dx
// (reads of x and dy, a write of dx).
func (BatchNormGrad) Cost(in, out []Spec) Cost {
	c := elementwiseCost(in, out, 14)
	c.Bytes += 2*in[0].Bytes() + in[2].Bytes()
	return c
}

func (BatchNormGrad) Signatures(in, out []Spec) []Signature {
	return []Signature{
		sig(3, S(0), P, P, S(0), B, S(0)),
		sig(3, S(1), S(0), S(0), S(1), S(0), S(1)),
		sig(3, B, B, B, B, B, B),
	}
}

// Embedding looks rows of table [V,D] up by ids (i32, any shape):
// (table, ids) → [ids..., D].
type Embedding struct{}

func (Embedding) Type() string { return "embedding" }

func (Embedding) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("embedding", in, 2); err != nil {
		return nil, err
	}
	t, ids := in[0], in[1]
	if len(t.Shape) != 2 || !t.DType.IsFloat() {
		return nil, shapeErr("embedding", in, "table must be float [V,D]")
	}
	if ids.DType != I32 {
		return nil, shapeErr("embedding", in, "ids must be i32")
	}
	out := append(ids.Shape.Clone(), t.Shape[1])
	return []Spec{{out, t.DType}}, nil
}

func (Embedding) Cost(in, out []Spec) Cost { return Cost{Bytes: bytesOf(in[1:], out, out)} }

func (Embedding) Signatures(in, out []Spec) []Signature {
	r := len(out[0].Shape)
	sigs := []Signature{sig(1, S(r-1), S(1), B), sig(1, P, S(0), B), sig(1, B, B, B)}
	for a := range r - 1 {
		sigs = append(sigs, sig(1, S(a), B, S(a)))
	}
	return sigs
}

func (Embedding) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	t := n.Inputs[0]
	if !need[0] {
		return []*Tensor{nil, nil}
	}
	return []*Tensor{g.apply1(EmbeddingGrad{Table: t.Spec.Shape.Clone()}, n.Inputs[1], dy[0]), nil}
}

// Embedding adds a lookup of ids in table.
func (g *Graph) Embedding(table, ids *Tensor) *Tensor { return g.apply1(Embedding{}, table, ids) }

// EmbeddingGrad scatter-adds dy into a zeroed table: (ids, dy) → dtable.
type EmbeddingGrad struct{ Table Shape }

func (EmbeddingGrad) Type() string { return "embedding_grad" }

func (op EmbeddingGrad) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("embedding_grad", in, 2); err != nil {
		return nil, err
	}
	if len(op.Table) != 2 || !op.Table.valid() || in[0].DType != I32 {
		return nil, shapeErr("embedding_grad", in, "want i32 ids and a [V,D] table, got table %v", op.Table)
	}
	want := append(in[0].Shape.Clone(), op.Table[1])
	if !in[1].Shape.Equal(want) {
		return nil, shapeErr("embedding_grad", in, "dy must be %v", want)
	}
	return []Spec{{op.Table.Clone(), in[1].DType}}, nil
}

func (op EmbeddingGrad) Cost(in, out []Spec) Cost { return elementwiseCost(in, in[1:], 1) }

func (op EmbeddingGrad) Signatures(in, out []Spec) []Signature {
	r := len(in[1].Shape)
	sigs := []Signature{sig(1, S(1), B, S(r-1)), sig(1, B, B, B)}
	for a := range r - 1 {
		sigs = append(sigs, sig(1, P, S(a), S(a)))
	}
	return sigs
}
