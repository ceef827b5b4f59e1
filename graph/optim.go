package graph

import (
	"fmt"
	"math"
)

// Optimizer appends the update of params from their gradients to a graph.
type Optimizer interface {
	// Name is a short description, e.g. "sgd(lr=0.01, momentum=0.9)".
	Name() string
	update(g *Graph, params, grads []*Tensor)
}

// Minimize appends to g the backward pass of loss with respect to every
// parameter and opt's updates of them: the whole training iteration.
func (g *Graph) Minimize(loss *Tensor, opt Optimizer) error {
	params := g.Params()
	grads, err := g.Backward(loss, params)
	if err != nil {
		return err
	}
	g.SetPhase(Update)
	opt.update(g, params, grads)
	g.SetPhase(Forward)
	return g.Err()
}

// OptimizerSpec is an optimizer and its settings, as the CLIs take them.
type OptimizerSpec struct {
	Name        string  // "sgd" (with momentum when Momentum > 0), "adam" or "adamw" (β = 0.9, 0.999, ε = 1e-8)
	LR          float64 // the learning rate, or the schedule's base rate
	Momentum    float64 // SGD's
	WeightDecay float64 // sgd, adam: L2 decay added to the gradient, as PyTorch's; adamw: decoupled
	Schedule    Schedule
}

// NewOptimizer returns the optimizer s names, with its settings. The
// learning rate must be positive and finite in float32, and SGD's momentum
// in [0, 1) (Adam ignores it): the update ops keep them as float32
// attributes, and a plan cannot encode a NaN or an infinity.
func NewOptimizer(s OptimizerSpec) (Optimizer, error) {
	if !(s.LR > 0) || s.LR > math.MaxFloat32 {
		return nil, fmt.Errorf("graph: learning rate (lr) %g: want a positive number up to %.2g (float32)", s.LR, math.MaxFloat32)
	}
	if s.Name == "sgd" && !(s.Momentum >= 0 && s.Momentum < 1) {
		return nil, fmt.Errorf("graph: momentum %g: want a number in [0, 1)", s.Momentum)
	}
	if err := s.Schedule.Validate(); err != nil {
		return nil, err
	}
	if !(s.WeightDecay >= 0) || s.WeightDecay > math.MaxFloat32 {
		return nil, fmt.Errorf("graph: weight decay %g: want a number ≥ 0, finite in float32", s.WeightDecay)
	}
	lr, wd := float32(s.LR), float32(s.WeightDecay)
	switch s.Name {
	case "sgd":
		return SGD{LR: lr, Momentum: float32(s.Momentum), WeightDecay: wd, Schedule: s.Schedule}, nil
	case "adam", "adamw":
		return Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: wd, Decoupled: s.Name == "adamw", Schedule: s.Schedule}, nil
	}
	return nil, fmt.Errorf("graph: unknown optimizer %q (want sgd, adam or adamw)", s.Name)
}

// scheduleName is ", schedule=…" for a schedule other than the zero one.
func scheduleName(s Schedule) string {
	if s.IsZero() {
		return ""
	}
	return ", schedule=" + s.String()
}

// SGD is stochastic gradient descent, with momentum when Momentum > 0
// (PyTorch's formulation: v = μ·v + g; w −= lr·v).
type SGD struct {
	LR, Momentum, WeightDecay float32
	Schedule                  Schedule
}

func (o SGD) Name() string {
	return fmt.Sprintf("sgd(lr=%g, momentum=%g, weight_decay=%g%s)", o.LR, o.Momentum, o.WeightDecay, scheduleName(o.Schedule))
}

func (o SGD) update(g *Graph, params, grads []*Tensor) {
	for i, w := range params {
		if o.Momentum == 0 {
			g.Apply(SGDUpdate{LR: o.LR, WeightDecay: o.WeightDecay, Schedule: o.Schedule}, w, grads[i])
			continue
		}
		v := g.TypedState(w.Name+".momentum", w.Spec.Shape, w.Spec.DType, Init{Kind: Zeros, Shard: w.Init.Shard.Named(w.Name + ".momentum")})
		g.Apply(MomentumUpdate(o), w, grads[i], v)
	}
}

// Adam is the Adam optimizer with bias correction, its weight decay added
// to the gradient as PyTorch's Adam, or Decoupled from it as AdamW
// (Loshchilov and Hutter): the weights scaled by 1 − lr·WeightDecay
// before the step.
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Decoupled                          bool
	Schedule                           Schedule
}

func (o Adam) Name() string {
	name := "adam"
	if o.Decoupled {
		name = "adamw"
	}
	return fmt.Sprintf("%s(lr=%g, betas=(%g, %g), eps=%g, weight_decay=%g%s)", name, o.LR, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, scheduleName(o.Schedule))
}

func (o Adam) update(g *Graph, params, grads []*Tensor) {
	for i, w := range params {
		m := g.TypedState(w.Name+".adam_m", w.Spec.Shape, w.Spec.DType, Init{Kind: Zeros, Shard: w.Init.Shard.Named(w.Name + ".adam_m")})
		v := g.TypedState(w.Name+".adam_v", w.Spec.Shape, w.Spec.DType, Init{Kind: Zeros, Shard: w.Init.Shard.Named(w.Name + ".adam_v")})
		g.Apply(AdamUpdate(o), w, grads[i], m, v)
	}
}

// updateInfer checks an update op's inputs: the weight, its gradient and
// its states, all of one shape; and its learning-rate schedule.
func updateInfer(op string, sched Schedule, in []Spec, n int) ([]Spec, error) {
	if _, err := sameShapes(op, in, n); err != nil {
		return nil, err
	}
	if err := sched.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return nil, nil
}

// checkRates checks an update's settings as NewOptimizer checks the
// optimizer's (a plan file's ops carry them too): a positive learning
// rate, a weight decay ≥ 0, and each fraction (momentum, Adam's betas) in
// [0, 1).
func checkRates(op string, lr, wd float32, fractions ...fraction) error {
	if !(lr > 0) || math.IsInf(float64(lr), 0) {
		return fmt.Errorf("%s: learning rate %g: want a positive number", op, lr)
	}
	if !(wd >= 0) || math.IsInf(float64(wd), 0) {
		return fmt.Errorf("%s: weight decay %g: want a number ≥ 0", op, wd)
	}
	for _, f := range fractions {
		if !(f.v >= 0 && f.v < 1) {
			return fmt.Errorf("%s: %s %g: want a number in [0, 1)", op, f.name, f.v)
		}
	}
	return nil
}

// fraction is an update's setting that checkRates wants in [0, 1).
type fraction struct {
	name string
	v    float32
}

// updateSignatures: the weight, its gradient and its states laid out alike.
func updateSignatures(in []Spec) []Signature {
	return elementwiseSignatures(len(in[0].Shape), len(in), 0, false)
}

// OptimizerOf returns the optimizer whose update op is op, and false for
// an op that updates nothing: what a plan's label of its optimizer must
// name (plans check it, so that a report or a checkpoint never names
// another optimizer than the one that ran).
func OptimizerOf(op Op) (Optimizer, bool) {
	switch o := op.(type) {
	case SGDUpdate:
		return SGD{LR: o.LR, WeightDecay: o.WeightDecay, Schedule: o.Schedule}, true
	case MomentumUpdate:
		return SGD(o), true
	case AdamUpdate:
		return Adam(o), true
	}
	return nil, false
}

// SGDUpdate is w −= lr·(g + wd·w): (w, g), updating w. The update ops'
// rate at a step is Schedule.Rate(LR, step).
type SGDUpdate struct {
	LR, WeightDecay float32
	Schedule        Schedule `json:",omitzero"`
}

func (SGDUpdate) Type() string   { return "sgd_update" }
func (SGDUpdate) Mutates() []int { return []int{0} }
func (o SGDUpdate) Infer(in []Spec) ([]Spec, error) {
	if err := checkRates("sgd_update", o.LR, o.WeightDecay); err != nil {
		return nil, err
	}
	return updateInfer("sgd_update", o.Schedule, in, 2)
}
func (SGDUpdate) Cost(in, out []Spec) Cost { return elementwiseCost(in, in[:1], 3) }
func (SGDUpdate) Signatures(in, out []Spec) []Signature {
	return updateSignatures(in)
}

// MomentumUpdate is v = μ·v + (g + wd·w); w −= lr·v: (w, g, v), updating w
// and v.
type MomentumUpdate struct {
	LR, Momentum, WeightDecay float32
	Schedule                  Schedule `json:",omitzero"`
}

func (MomentumUpdate) Type() string   { return "momentum_update" }
func (MomentumUpdate) Mutates() []int { return []int{0, 2} }
func (o MomentumUpdate) Infer(in []Spec) ([]Spec, error) {
	if err := checkRates("momentum_update", o.LR, o.WeightDecay, fraction{"momentum", o.Momentum}); err != nil {
		return nil, err
	}
	return updateInfer("momentum_update", o.Schedule, in, 3)
}
func (MomentumUpdate) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: elementwiseCost(in, in[:1], 5).FLOPs, Bytes: bytesOf(in, in[:1], in[2:])}
}
func (MomentumUpdate) Signatures(in, out []Spec) []Signature { return updateSignatures(in) }

// AdamUpdate is Adam's step, bias-corrected by the iteration number:
// (w, g, m, v), updating w, m and v; AdamW's if Decoupled.
type AdamUpdate struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Decoupled                          bool     `json:",omitempty"`
	Schedule                           Schedule `json:",omitzero"`
}

func (AdamUpdate) Type() string   { return "adam_update" }
func (AdamUpdate) Mutates() []int { return []int{0, 2, 3} }
func (AdamUpdate) PerIteration()  {}
func (o AdamUpdate) Infer(in []Spec) ([]Spec, error) {
	if err := checkRates("adam_update", o.LR, o.WeightDecay, fraction{"beta1", o.Beta1}, fraction{"beta2", o.Beta2}); err != nil {
		return nil, err
	}
	if !(o.Eps > 0) || math.IsInf(float64(o.Eps), 0) {
		return nil, fmt.Errorf("adam_update: eps %g: want a positive number", o.Eps)
	}
	return updateInfer("adam_update", o.Schedule, in, 4)
}
func (AdamUpdate) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: elementwiseCost(in, in[:1], 12).FLOPs, Bytes: bytesOf(in, in[:1], in[2:])}
}
func (AdamUpdate) Signatures(in, out []Spec) []Signature { return updateSignatures(in) }
