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
}

// NewStore returns an empty store whose tensors are initialized from seed.
func NewStore(seed uint64) *Store { return &Store{seed: seed, tensors: map[string]*stored{}} }

// bind returns the buffer of persistent tensor t, creating and initializing
// it on first use. A later graph naming the same tensor must agree on its
// spec.
func (s *Store) bind(t *graph.Tensor) (Buffer, error) {
	if st, ok := s.tensors[t.Name]; ok {
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
// runs through an Executor or a plan.
func initialize(seed uint64, name string, init graph.Init, v []float32) {
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

// Get returns the values of a stored tensor (shared, not copied).
func (s *Store) Get(name string) ([]float32, bool) {
	st, ok := s.tensors[name]
	if !ok {
		return nil, false
	}
	return st.buf.F, true
}

// Names lists the stored tensors, sorted.
func (s *Store) Names() []string {
	names := make([]string, 0, len(s.tensors))
	for n := range s.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Tensor is a stored tensor's value, e.g. to move it between processes.
type Tensor struct {
	Name string
	Spec graph.Spec
	F    []float32
}

// Tensors returns copies of the stored tensors, sorted by name.
func (s *Store) Tensors() []Tensor {
	var ts []Tensor
	for _, n := range s.Names() {
		st := s.tensors[n]
		ts = append(ts, Tensor{Name: n, Spec: st.spec, F: append([]float32(nil), st.buf.F...)})
	}
	return ts
}

// Put stores the tensors, replacing any of the same names.
func (s *Store) Put(ts ...Tensor) error {
	for _, t := range ts {
		if n := t.Spec.Shape.NumElements(); n != len(t.F) {
			return fmt.Errorf("runtime: tensor %s: %d values for %v", t.Name, len(t.F), t.Spec)
		}
		s.tensors[t.Name] = &stored{spec: t.Spec, buf: Buffer{F: append([]float32(nil), t.F...)}}
	}
	return nil
}
