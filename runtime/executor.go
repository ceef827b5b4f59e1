package runtime

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
)

// Executor runs one graph on a CPU device, binding its persistent tensors
// to a Store and allocating every other tensor once.
type Executor struct {
	g    *graph.Graph
	dev  *CPU
	bufs []Buffer // by tensor ID
	in   [][]Buffer
	out  [][]Buffer

	inSpecs, outSpecs [][]graph.Spec
}

// NewExecutor prepares g for repeated execution on dev.
func NewExecutor(g *graph.Graph, dev *CPU, store *Store) (*Executor, error) {
	if err := g.Err(); err != nil {
		return nil, err
	}
	e := &Executor{g: g, dev: dev, bufs: make([]Buffer, len(g.Tensors))}
	for _, t := range g.Tensors {
		if t.Persistent() {
			b, err := store.bind(t)
			if err != nil {
				return nil, err
			}
			e.bufs[t.ID] = b
			continue
		}
		e.bufs[t.ID] = newBuffer(t.Spec)
	}
	e.in = make([][]Buffer, len(g.Nodes))
	e.out = make([][]Buffer, len(g.Nodes))
	e.inSpecs = make([][]graph.Spec, len(g.Nodes))
	e.outSpecs = make([][]graph.Spec, len(g.Nodes))
	for i, n := range g.Nodes {
		for _, t := range n.Inputs {
			e.in[i] = append(e.in[i], e.bufs[t.ID])
			e.inSpecs[i] = append(e.inSpecs[i], t.Spec)
		}
		for _, t := range n.Outputs {
			e.out[i] = append(e.out[i], e.bufs[t.ID])
			e.outSpecs[i] = append(e.outSpecs[i], t.Spec)
		}
	}
	return e, nil
}

// Buffer returns the storage of tensor t, e.g. to fill an input before Run
// or read a result after.
func (e *Executor) Buffer(t *graph.Tensor) Buffer { return e.bufs[t.ID] }

// Run executes every node once, in order, as iteration iter.
func (e *Executor) Run(iter int) error {
	for i, n := range e.g.Nodes {
		if err := e.dev.launch(n.Op, e.inSpecs[i], e.outSpecs[i], step{iter: iter}, e.in[i], e.out[i]); err != nil {
			return fmt.Errorf("runtime: iteration %d, node %s: %w", iter, n.Name, err)
		}
	}
	return nil
}
