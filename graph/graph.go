package graph

import (
	"errors"
	"fmt"
)

// TensorKind says where a tensor's value comes from.
type TensorKind uint8

const (
	// Activation is produced by a node within the iteration.
	Activation TensorKind = iota
	// Input is fed from outside each iteration (a batch of images, labels).
	Input
	// Param is a trainable weight, persistent across iterations.
	Param
	// State is persistent non-trainable state (optimizer moments).
	State
)

func (k TensorKind) String() string {
	return [...]string{"activation", "input", "param", "state"}[k]
}

// InitKind is how a persistent tensor is initialized.
type InitKind uint8

const (
	Zeros InitKind = iota
	Ones
	Uniform // uniform in [-Scale, Scale)
	Normal  // normal with standard deviation Scale
)

// Init is a persistent tensor's initializer.
type Init struct {
	Kind  InitKind
	Scale float64
	// Shard, under tensor parallelism, makes the tensor a part of a larger
	// one, which the initializer fills.
	Shard *Shard `json:",omitempty"`
}

// Tensor is a value in the graph.
type Tensor struct {
	ID       int
	Name     string
	Spec     Spec
	Kind     TensorKind
	Init     Init  // for Param and State
	Producer *Node // nil unless Kind is Activation
}

// Shape is the tensor's shape.
func (t *Tensor) Shape() Shape { return t.Spec.Shape }

// Persistent reports whether the tensor lives across iterations.
func (t *Tensor) Persistent() bool { return t.Kind == Param || t.Kind == State }

func (t *Tensor) String() string { return t.Name + ":" + t.Spec.String() }

// Phase is the part of a training iteration a node belongs to.
type Phase uint8

const (
	Forward Phase = iota
	Backward
	Update
)

func (p Phase) String() string { return [...]string{"forward", "backward", "update"}[p] }

// Node is one application of an op.
type Node struct {
	ID      int
	Name    string
	Op      Op
	Phase   Phase
	Inputs  []*Tensor
	Outputs []*Tensor
	// Origin is, for a backward node, the forward node whose gradient rule
	// added it (placement puts the two on the same device).
	Origin *Node
	// LayerStart marks a forward node that starts a layer, as the model's
	// builder declared (see StartLayer).
	LayerStart bool
}

// Cost is the node's work.
func (n *Node) Cost() Cost { return n.Op.Cost(specs(n.Inputs), specs(n.Outputs)) }

func specs(ts []*Tensor) []Spec {
	s := make([]Spec, len(ts))
	for i, t := range ts {
		s[i] = t.Spec
	}
	return s
}

// Graph is a logical graph under construction or complete.
type Graph struct {
	Nodes   []*Node
	Tensors []*Tensor

	phase  Phase
	origin *Node          // forward node whose gradient is being built
	layer  bool           // the next node starts a layer
	names  map[string]int // node names taken
	tnames map[string]int // tensor names taken
	err    error
}

// New returns an empty graph.
func New() *Graph { return &Graph{names: map[string]int{}, tnames: map[string]int{}} }

// Err returns the first error met while building, or nil.
func (g *Graph) Err() error { return g.err }

// fail records err as the graph's error unless one is already recorded.
func (g *Graph) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// SetPhase makes the nodes added from now on belong to p.
func (g *Graph) SetPhase(p Phase) { g.phase = p }

// unique returns name, or name with a numeric suffix if taken says it is
// taken, and marks the result taken.
func unique(taken map[string]int, name string) string {
	for {
		n := taken[name]
		taken[name] = n + 1
		if n == 0 {
			return name
		}
		name = fmt.Sprintf("%s_%d", name, n)
	}
}

func (g *Graph) newTensor(name string, spec Spec, kind TensorKind) *Tensor {
	t := &Tensor{ID: len(g.Tensors), Name: unique(g.tnames, name), Spec: Spec{spec.Shape.Clone(), spec.DType}, Kind: kind}
	g.Tensors = append(g.Tensors, t)
	return t
}

// Input declares a tensor fed each iteration.
func (g *Graph) Input(name string, shape Shape, dtype DType) *Tensor {
	if !shape.valid() {
		g.fail(fmt.Errorf("graph: input %s: shape %v has a non-positive dimension", name, shape))
		return nil
	}
	return g.newTensor(name, Spec{shape, dtype}, Input)
}

// Param declares a trainable f32 weight.
func (g *Graph) Param(name string, shape Shape, init Init) *Tensor {
	return g.persistent(name, Spec{shape, F32}, init, Param)
}

// TypedParam declares a trainable weight of a floating-point dtype.
func (g *Graph) TypedParam(name string, shape Shape, dtype DType, init Init) *Tensor {
	return g.persistent(name, Spec{shape, dtype}, init, Param)
}

// State declares persistent non-trainable f32 state.
func (g *Graph) State(name string, shape Shape, init Init) *Tensor {
	return g.persistent(name, Spec{shape, F32}, init, State)
}

// TypedState declares persistent non-trainable state of a floating-point
// dtype.
func (g *Graph) TypedState(name string, shape Shape, dtype DType, init Init) *Tensor {
	return g.persistent(name, Spec{shape, dtype}, init, State)
}

func (g *Graph) persistent(name string, spec Spec, init Init, kind TensorKind) *Tensor {
	if !spec.Shape.valid() {
		g.fail(fmt.Errorf("graph: %s %s: shape %v has a non-positive dimension", kind, name, spec.Shape))
		return nil
	}
	if !spec.DType.IsFloat() {
		g.fail(fmt.Errorf("graph: %s %s: dtype %s is not floating point", kind, name, spec.DType))
		return nil
	}
	t := g.newTensor(name, spec, kind)
	t.Init = init
	return t
}

// StartLayer declares that the next node added starts a layer of the
// model: the unit pipeline stages are cut at and recomputation works by
// (plans.Strategy.Layers). A graph without any declared layer has one at
// every node reading a weight matrix or filter.
func (g *Graph) StartLayer() { g.layer = true }

// Apply adds a node applying op to inputs and returns its outputs, or nil
// after recording an error (see Err).
func (g *Graph) Apply(op Op, inputs ...*Tensor) []*Tensor {
	if g.err != nil {
		return nil
	}
	in := make([]Spec, len(inputs))
	for i, t := range inputs {
		if t == nil {
			g.fail(fmt.Errorf("graph: %s: input %d is nil", op.Type(), i))
			return nil
		}
		in[i] = t.Spec
	}
	out, err := op.Infer(in)
	if err != nil {
		g.fail(err)
		return nil
	}
	n := &Node{ID: len(g.Nodes), Name: unique(g.names, op.Type()), Op: op, Phase: g.phase, Inputs: inputs, Origin: g.origin,
		LayerStart: g.layer && g.phase == Forward}
	g.layer = false
	for i, s := range out {
		name := n.Name
		if len(out) > 1 {
			name = fmt.Sprintf("%s:%d", n.Name, i)
		}
		t := g.newTensor(name, s, Activation)
		t.Producer = n
		n.Outputs = append(n.Outputs, t)
	}
	g.Nodes = append(g.Nodes, n)
	return n.Outputs
}

// apply1 is Apply for single-output ops.
func (g *Graph) apply1(op Op, inputs ...*Tensor) *Tensor {
	out := g.Apply(op, inputs...)
	if out == nil {
		return nil
	}
	return out[0]
}

// Params returns the graph's trainable tensors in declaration order.
func (g *Graph) Params() []*Tensor { return g.byKind(Param) }

// Inputs returns the graph's per-iteration inputs in declaration order.
func (g *Graph) Inputs() []*Tensor { return g.byKind(Input) }

func (g *Graph) byKind(k TensorKind) []*Tensor {
	var ts []*Tensor
	for _, t := range g.Tensors {
		if t.Kind == k {
			ts = append(ts, t)
		}
	}
	return ts
}

// Consumers returns, for each tensor ID, the nodes that read it.
func (g *Graph) Consumers() [][]*Node {
	c := make([][]*Node, len(g.Tensors))
	for _, n := range g.Nodes {
		for _, t := range n.Inputs {
			c[t.ID] = append(c[t.ID], n)
		}
	}
	return c
}

// Cost sums the work of the nodes in the given phases (all when none given).
func (g *Graph) Cost(phases ...Phase) Cost {
	var c Cost
	for _, n := range g.Nodes {
		if len(phases) > 0 && !containsPhase(phases, n.Phase) {
			continue
		}
		nc := n.Cost()
		c.FLOPs += nc.FLOPs
		c.Bytes += nc.Bytes
	}
	return c
}

func containsPhase(ps []Phase, p Phase) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// NumParams is the number of trainable scalars.
func (g *Graph) NumParams() int {
	n := 0
	for _, t := range g.Params() {
		n += t.Spec.Shape.NumElements()
	}
	return n
}

// ErrNoGradient is returned when the loss does not depend on a parameter
// that was asked for.
var ErrNoGradient = errors.New("graph: no gradient")
