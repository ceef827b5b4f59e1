package runtime

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"

	"github.com/flowkit/flowkit/graph"
)

// Store holds persistent tensors by name.
type Store struct {
	seed    uint64
	tensors map[string]*stored
}

type stored struct {
	spec graph.Spec
	buf  Buffer
	// shard, for a tensor-parallel part, says of which tensor. That tensor
	// is assembled from its parts as they are stored: want is their
	// number, seen the parts stored so far, and it is available once all
	// are (want 0: a tensor stored whole).
	shard *graph.Shard
	want  int
	seen  map[int]bool
}

// complete says whether a tensor holds its whole value.
func (st *stored) complete() bool { return len(st.seen) == st.want }

// NewStore returns an empty store whose tensors are initialized from seed.
func NewStore(seed uint64) *Store { return &Store{seed: seed, tensors: map[string]*stored{}} }

// bind returns the buffer of persistent tensor t, creating and initializing
// it on first use. A later graph naming the same tensor must agree on its
// spec.
func (s *Store) bind(t *graph.Tensor) (Buffer, error) {
	if st, ok := s.tensors[t.Name]; ok {
		if !st.complete() {
			return Buffer{}, fmt.Errorf("runtime: tensor %s: the store has %d of its %d tensor-parallel parts", t.Name, len(st.seen), st.want)
		}
		if !st.spec.Shape.Equal(t.Spec.Shape) {
			return Buffer{}, fmt.Errorf("runtime: tensor %s is %v in the store, %v in the graph", t.Name, st.spec, t.Spec)
		}
		return st.buf, nil
	}
	buf := newBuffer(t.Spec)
	initialize(s.seed, t.Name, t.Init, buf.F)
	s.tensors[t.Name] = &stored{spec: t.Spec, buf: buf}
	return buf, nil
}

// initialize fills a persistent tensor from its initializer with a
// generator seeded by the seed and the tensor's name, so a tensor's initial
// value does not depend on what else the graph declares, nor on whether it
// runs through an Executor or a plan. A shard (graph.Shard) is its part of
// the full tensor, initialized so.
func initialize(seed uint64, name string, init graph.Init, v []float32) {
	if sh := init.Shard; sh != nil {
		full := make([]float32, sh.Full.NumElements())
		whole := init
		whole.Shard = sh.Within // nil but for a part of a part (ZeRO over tensor-parallel groups)
		initialize(seed, sh.Of, whole, full)
		graph.Take(sh, full, v)
		return
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	switch init.Kind {
	case graph.Zeros:
		clear(v)
	case graph.Ones:
		for i := range v {
			v[i] = 1
		}
	case graph.Uniform:
		for i := range v {
			v[i] = float32((2*rng.Float64() - 1) * init.Scale)
		}
	case graph.Normal:
		for i := range v {
			v[i] = float32(rng.NormFloat64() * init.Scale)
		}
	}
}

// Get returns the values of a stored tensor (shared, not copied). A
// tensor stored in tensor-parallel parts is there once all its parts are.
func (s *Store) Get(name string) ([]float32, bool) {
	st, ok := s.tensors[name]
	if !ok || !st.complete() {
		return nil, false
	}
	return st.buf.F, true
}

// Names lists the stored tensors, sorted: each tensor-parallel part, and
// the tensor they make once all are there.
func (s *Store) Names() []string {
	names := make([]string, 0, len(s.tensors))
	for n, st := range s.tensors {
		if st.complete() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Tensor is a stored tensor's value, e.g. to move it between processes.
type Tensor struct {
	Name string
	Spec graph.Spec
	F    []float32
	// Shard, for a tensor-parallel part, says of which tensor.
	Shard *graph.Shard `json:",omitempty"`
}

// Tensors returns copies of the stored tensors, sorted by name: the
// tensor-parallel parts, not the tensors assembled from them (Put
// assembles them again).
func (s *Store) Tensors() []Tensor {
	var ts []Tensor
	for _, n := range s.Names() {
		if st := s.tensors[n]; st.want == 0 {
			ts = append(ts, Tensor{Name: n, Spec: st.spec, F: append([]float32(nil), st.buf.F...), Shard: st.shard})
		}
	}
	return ts
}

// Put stores the tensors, replacing any of the same names. A
// tensor-parallel part (Tensor.Shard) is also copied into its place in
// the tensor it is part of.
func (s *Store) Put(ts ...Tensor) error {
	for _, t := range ts {
		if n := t.Spec.Shape.NumElements(); n != len(t.F) {
			return fmt.Errorf("runtime: tensor %s: %d values for %v", t.Name, len(t.F), t.Spec)
		}
		st := &stored{spec: t.Spec, buf: Buffer{F: append([]float32(nil), t.F...)}, shard: t.Shard}
		if sh := t.Shard; sh != nil {
			if err := sh.Check(); err != nil {
				return fmt.Errorf("runtime: tensor %s: %w", t.Name, err)
			}
			if !sh.Shape().Equal(t.Spec.Shape) {
				return fmt.Errorf("runtime: tensor %s is %v, part %d of %d of %s %v along axis %d", t.Name, t.Spec, sh.Part, sh.Parts, sh.Of, sh.Full, sh.Axis)
			}
			s.place(st, sh)
		}
		s.tensors[t.Name] = st
	}
	return nil
}

// place copies part st into its place in the tensor shard sh says it is
// part of, and that tensor, once whole, into the tensor it is part of in
// turn (sh.Within: a replica's ZeRO part of a tensor-parallel part).
func (s *Store) place(st *stored, sh *graph.Shard) {
	full, ok := s.tensors[sh.Of]
	if !ok || full.want != sh.Parts || !full.spec.Shape.Equal(sh.Full) {
		full = &stored{spec: graph.Spec{Shape: sh.Full.Clone(), DType: st.spec.DType}, want: sh.Parts, seen: map[int]bool{}, shard: sh.Within}
		full.buf = newBuffer(full.spec)
		s.tensors[sh.Of] = full
	}
	graph.Place(sh, st.buf.F, full.buf.F)
	full.seen[sh.Part] = true
	if full.complete() && full.shard != nil {
		s.place(full, full.shard)
	}
}

// whole returns the store's whole tensors (shared, not copied), sorted by
// name: those stored whole and those assembled from all their parts, not
// the parts.
func (s *Store) whole() []Tensor {
	var ts []Tensor
	for _, n := range s.Names() {
		if st := s.tensors[n]; st.shard == nil {
			ts = append(ts, Tensor{Name: n, Spec: st.spec, F: st.buf.F})
		}
	}
	return ts
}

// fill sets v to the value of tensor name of the given shape, which a
// graph initializes by init: the stored tensor, or, for a part
// (init.Shard), its part of the stored whole, as initialize takes it.
func (s *Store) fill(name string, init graph.Init, shape graph.Shape, v []float32) error {
	if sh := init.Shard; sh != nil {
		full := make([]float32, sh.Full.NumElements())
		if err := s.fill(sh.Of, graph.Init{Shard: sh.Within}, sh.Full, full); err != nil {
			return err
		}
		graph.Take(sh, full, v)
		return nil
	}
	st, ok := s.tensors[name]
	switch {
	case !ok || !st.complete():
		return fmt.Errorf("runtime: the weights have no tensor %s", name)
	case !st.spec.Shape.Equal(shape):
		return fmt.Errorf("runtime: tensor %s is %v in the weights, %v in the plan", name, st.spec.Shape, shape)
	}
	copy(v, st.buf.F)
	return nil
}
