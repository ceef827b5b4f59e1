package graph

import (
	"fmt"
	"strconv"

	"github.com/flowkit/flowkit/units"
)

// Tensor parallelism (Shoeybi et al., 2019, "Megatron-LM") splits a layer's
// weight matrices over the devices of a tensor-parallel group, each device
// computing with its part. A model built for a group of T devices is the
// graph one device runs: its sharded weights have their local shapes, and
// two ops mark where the group communicates (Megatron's f and g):
//
//   - TPCopy before a column-parallel layer: the identity going forward;
//     going backward, its gradient is the TPSum of the devices' partial
//     gradients.
//   - TPSum after a row-parallel layer: every device's output is the sum
//     of the group's partial outputs (an all-reduce); going backward, the
//     gradient passes through unchanged.
//
// plans compiles TPSum into an all-reduce task over the group and TPCopy
// into nothing: its output is its input's register.

// Shard makes a persistent tensor one device's part of a larger tensor
// that tensor parallelism splits: the full tensor Of, of shape Full, is
// initialized as the Init says (seeded by Of's name, so every part comes
// from the same full tensor as a model without tensor parallelism has) and
// divided along Axis into Blocks equal blocks (several matrices packed in
// one, as attention's q, k and v are; 1 otherwise), each cut into Parts
// equal parts. The tensor is part Part of every block, concatenated.
type Shard struct {
	Of    string
	Full  Shape
	Axis  int
	Parts int
	Part  int
	// Blocks is ≥ 1.
	Blocks int
	// Sizes, if set, are the blocks' lengths along Axis, for blocks of
	// unequal sizes (grouped-query attention's packed projections: the
	// queries' heads·d rows, then the keys' and the values' kv_heads·d);
	// nil means Blocks equal blocks.
	Sizes []int `json:",omitempty"`
	// Within, if set, says that Of is itself a part of a larger tensor:
	// ZeRO over tensor-parallel groups splits a device's tensor-parallel
	// part further over the data-parallel replicas. Of is then that
	// part's name, and Within its shard of the whole.
	Within *Shard `json:",omitempty"`
}

// Named returns the shard for a tensor of the same layout and part named
// of (an optimizer's state of a sharded weight); nil for nil.
func (s *Shard) Named(of string) *Shard {
	if s == nil {
		return nil
	}
	c := *s
	c.Of = of
	return &c
}

// Suffix is what a sharded tensor's register name ends in: the part of
// the group, " [tp 1/2]".
func (s *Shard) Suffix() string {
	if s == nil {
		return ""
	}
	return " [tp " + strconv.Itoa(s.Part) + "/" + strconv.Itoa(s.Parts) + "]"
}

// Shape is the shape of the part.
func (s *Shard) Shape() Shape {
	sh := s.Full.Clone()
	sh[s.Axis] /= s.Parts
	return sh
}

// Check reports whether the shard describes a part of its full tensor.
func (s *Shard) Check() error {
	switch {
	case s.Axis < 0 || s.Axis >= len(s.Full):
		return fmt.Errorf("graph: shard of %s: axis %d of %v", s.Of, s.Axis, s.Full)
	case s.Parts < 1 || s.Part < 0 || s.Part >= s.Parts || s.Blocks < 1:
		return fmt.Errorf("graph: shard of %s: part %d of %d, %d blocks", s.Of, s.Part, s.Parts, s.Blocks)
	case s.Sizes == nil && s.Full[s.Axis]%(s.Blocks*s.Parts) != 0:
		return fmt.Errorf("graph: shard of %s: axis %d of %v does not divide into %d blocks of %d parts", s.Of, s.Axis, s.Full, s.Blocks, s.Parts)
	case s.Sizes != nil:
		if len(s.Sizes) != s.Blocks {
			return fmt.Errorf("graph: shard of %s: %d block sizes for %d blocks", s.Of, len(s.Sizes), s.Blocks)
		}
		sum := 0
		for _, n := range s.Sizes {
			if n < 1 || n%s.Parts != 0 {
				return fmt.Errorf("graph: shard of %s: block sizes %v do not each divide into %d parts", s.Of, s.Sizes, s.Parts)
			}
			sum += n
		}
		if sum != s.Full[s.Axis] {
			return fmt.Errorf("graph: shard of %s: block sizes %v do not add up to axis %d of %v", s.Of, s.Sizes, s.Axis, s.Full)
		}
	}
	if w := s.Within; w != nil {
		if w.Within != nil {
			return fmt.Errorf("graph: shard of %s: a part of a part of a part", s.Of)
		}
		if err := w.Check(); err != nil {
			return err
		}
		if !w.Shape().Equal(s.Full) {
			return fmt.Errorf("graph: shard of %s: %v is not %v, the shape of its part of %s", s.Of, s.Full, w.Shape(), w.Of)
		}
	}
	return nil
}

// blockLen is the length along Axis of block b.
func (s *Shard) blockLen(b int) int {
	if s.Sizes != nil {
		return s.Sizes[b]
	}
	return s.Full[s.Axis] / s.Blocks
}

// Take copies the part out of the full tensor's values (row-major, Full
// elements) into part (Shape elements).
func Take[T any](s *Shard, full, part []T) {
	s.each(func(f, p, n int) { copy(part[p:p+n], full[f:f+n]) })
}

// Place copies the part into its place in the full tensor's values, as
// Take takes it.
func Place[T any](s *Shard, part, full []T) {
	s.each(func(f, p, n int) { copy(full[f:f+n], part[p:p+n]) })
}

// each calls f for every run of n contiguous values of the part: at f in
// the full tensor and p in the part.
func (s *Shard) each(f func(full, part, n int)) {
	outer := s.Full[:s.Axis].NumElements()
	inner := s.Full[s.Axis+1:].NumElements()
	n := 0
	for o := range outer {
		start := 0 // of the block along the axis
		for b := range s.Blocks {
			block := s.blockLen(b)
			piece := block / s.Parts // of which this part takes
			f((o*s.Full[s.Axis]+start+s.Part*piece)*inner, n, piece*inner)
			n += piece * inner
			start += block
		}
	}
}

// TPCopy is Megatron's f, entering a column-parallel layer: the identity,
// whose gradient is summed over the tensor-parallel group.
type TPCopy struct{}

func (TPCopy) Type() string { return "tp_copy" }

func (TPCopy) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("tp_copy", in, 1); err != nil {
		return nil, err
	}
	return []Spec{{in[0].Shape.Clone(), in[0].DType}}, nil
}

func (TPCopy) Cost(in, out []Spec) Cost { return Cost{} }

func (TPCopy) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, B)} }

func (TPCopy) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.TPSum(dy[0])}
}

// TPCopy marks x as entering a column-parallel layer.
func (g *Graph) TPCopy(x *Tensor) *Tensor { return g.apply1(TPCopy{}, x) }

// TPSum is Megatron's g, leaving a row-parallel layer: the sum of the
// partial values the tensor-parallel group holds, which every member
// receives; its gradient is the identity.
type TPSum struct{}

func (TPSum) Type() string { return "tp_sum" }

func (TPSum) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("tp_sum", in, 1); err != nil {
		return nil, err
	}
	if err := checkFloat("tp_sum", in, 0); err != nil {
		return nil, err
	}
	return []Spec{{in[0].Shape.Clone(), in[0].DType}}, nil
}

// Cost is the local work of an all-reduce: reading and writing the tensor
// (the communication is the cost model's).
func (TPSum) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: units.FLOPs(in[0].Shape.NumElements()), Bytes: bytesOf(in, out)}
}

func (TPSum) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, P)} }

func (TPSum) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{dy[0]}
}

// TPSum adds the sum of x over the tensor-parallel group.
func (g *Graph) TPSum(x *Tensor) *Tensor { return g.apply1(TPSum{}, x) }

// Sequence parallelism (Korthikanti et al., 2022) splits, along the
// sequence, the activations between a row-parallel layer and the next
// column-parallel one (residual adds, layer norms), which tensor
// parallelism would hold whole on every device. Two marks replace TPCopy
// and TPSum there:
//
//   - TPGather before a column-parallel layer: every device receives the
//     group's parts concatenated along Axis (an all-gather); its gradient
//     is the TPScatter of the devices' partial gradients.
//   - TPScatter after a row-parallel layer: each device receives its part
//     along Axis of the sum of the group's partial outputs (a
//     reduce-scatter); its gradient is the TPGather of the parts.
//
// The communication volume equals TPSum's (an all-reduce is a
// reduce-scatter then an all-gather), and the work between them is split.

// TPGather is sequence parallelism's g: the concatenation along Axis of
// the Parts devices' tensors, which every device receives.
type TPGather struct{ Axis, Parts int }

func (TPGather) Type() string { return "tp_gather" }

func (o TPGather) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("tp_gather", in, 1); err != nil {
		return nil, err
	}
	if err := checkFloat("tp_gather", in, 0); err != nil {
		return nil, err
	}
	sh := in[0].Shape
	if o.Axis < 0 || o.Axis >= len(sh) || o.Parts < 1 {
		return nil, fmt.Errorf("graph: tp_gather: axis %d of %v, %d parts", o.Axis, sh, o.Parts)
	}
	out := sh.Clone()
	out[o.Axis] *= o.Parts
	return []Spec{{out, in[0].DType}}, nil
}

// Cost is the local work of an all-gather: writing the whole tensor.
func (TPGather) Cost(in, out []Spec) Cost { return Cost{Bytes: bytesOf(in, out)} }

func (TPGather) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, B)} }

func (o TPGather) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.TPScatter(dy[0], o.Axis, o.Parts)}
}

// TPGather gathers x's parts over a group of parts devices along axis.
func (g *Graph) TPGather(x *Tensor, axis, parts int) *Tensor {
	return g.apply1(TPGather{Axis: axis, Parts: parts}, x)
}

// TPScatter is sequence parallelism's ḡ: the sum of the Parts devices'
// partial tensors, of which each device receives its part along Axis.
type TPScatter struct{ Axis, Parts int }

func (TPScatter) Type() string { return "tp_scatter" }

func (o TPScatter) Infer(in []Spec) ([]Spec, error) {
	if err := checkArity("tp_scatter", in, 1); err != nil {
		return nil, err
	}
	if err := checkFloat("tp_scatter", in, 0); err != nil {
		return nil, err
	}
	sh := in[0].Shape
	if o.Axis < 0 || o.Axis >= len(sh) || o.Parts < 1 || sh[o.Axis]%o.Parts != 0 {
		return nil, fmt.Errorf("graph: tp_scatter: axis %d of %v does not split into %d parts", o.Axis, sh, o.Parts)
	}
	out := sh.Clone()
	out[o.Axis] /= o.Parts
	return []Spec{{out, in[0].DType}}, nil
}

// Cost is the local work of a reduce-scatter: reading the whole tensor and
// summing into the part.
func (TPScatter) Cost(in, out []Spec) Cost {
	return Cost{FLOPs: units.FLOPs(in[0].Shape.NumElements()), Bytes: bytesOf(in, out)}
}

func (TPScatter) Signatures(in, out []Spec) []Signature { return []Signature{sig(1, B, P)} }

func (o TPScatter) Grad(g *Graph, n *Node, dy []*Tensor, need []bool) []*Tensor {
	return []*Tensor{g.TPGather(dy[0], o.Axis, o.Parts)}
}

// TPScatter sums x over a group of parts devices, each keeping its part
// along axis.
func (g *Graph) TPScatter(x *Tensor, axis, parts int) *Tensor {
	return g.apply1(TPScatter{Axis: axis, Parts: parts}, x)
}

// SeqShard is the shard of part of a tensor of shape full split into parts
// along axis: how TPGather places and TPScatter takes each device's part.
func SeqShard(full Shape, axis, parts, part int) *Shard {
	return &Shard{Of: "sequence", Full: full, Axis: axis, Parts: parts, Part: part, Blocks: 1}
}

// IsTP reports whether op is one of tensor parallelism's communication
// marks: TPCopy, TPSum, TPGather or TPScatter.
func IsTP(op Op) bool {
	switch op.(type) {
	case TPCopy, TPSum, TPGather, TPScatter:
		return true
	}
	return false
}
