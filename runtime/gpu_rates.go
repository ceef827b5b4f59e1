package runtime

import (
	"fmt"
	"unsafe"

	"github.com/flowkit/flowkit/graph"
	kcuda "github.com/flowkit/flowkit/kernels/cuda"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// rateCap is the number of iterations a rate table holds: a captured
// graph's replays run that many iterations between refills. It matches the
// losses' ring, whose reads synchronize as often. (A variable, so that
// tests can make the refills frequent.)
var rateCap = lossCap

// rateKey is a learning rate and its schedule: the updates of one
// optimizer share one table.
type rateKey struct {
	lr float32
	s  graph.Schedule
}

// rateTables hold the learning rates of a captured graph's scheduled
// updates. A graph keeps its kernels' arguments, so the rate of iteration
// it (counted from 0) is not an argument: for each distinct rate and
// schedule a table of rateCap float32 on the plan's first GPU holds it at
// entry it % rateCap, which the update kernels read by the iteration
// counter the replays advance (kernels/cuda's Rate). The host fills the
// tables for rateCap iterations at a time, while the GPU is idle
// (runGraph), with the values the eager path passes: each step's rate is
// Schedule.Rate's float32, bit for bit.
type rateTables struct {
	keys  []rateKey
	index map[rateKey]int
	n     int          // iterations a table holds: rateCap when made
	dev   cu.DevicePtr // float32 [len(keys)][n]
	host  []float32
}

// newRateTables allocates the tables of the plan's scheduled updates, or
// returns nil if it has none.
func (r *PlanRunner) newRateTables() (*rateTables, error) {
	rt := &rateTables{index: map[rateKey]int{}, n: rateCap}
	for _, t := range r.p.Tasks {
		op := r.ops[t.ID]
		s := graph.ScheduleOf(op)
		if s.IsZero() {
			continue
		}
		k := rateKey{lrOf(op), s}
		if _, ok := rt.index[k]; !ok {
			rt.index[k] = len(rt.keys)
			rt.keys = append(rt.keys, k)
		}
	}
	if len(rt.keys) == 0 {
		return nil, nil
	}
	rt.host = make([]float32, len(rt.keys)*rt.n)
	var err error
	if rt.dev, err = r.gpu.firstGPU().ctx.Malloc(units.Bytes(4 * len(rt.host))); err != nil {
		return nil, fmt.Errorf("runtime: learning-rate tables: %w", err)
	}
	return rt, nil
}

// lrOf is an update op's base learning rate.
func lrOf(op graph.Op) float32 {
	switch op := op.(type) {
	case graph.SGDUpdate:
		return op.LR
	case graph.MomentumUpdate:
		return op.LR
	case graph.AdamUpdate:
		return op.LR
	}
	return 0
}

// of is the table of lr under s.
func (rt *rateTables) of(lr float32, s graph.Schedule) (kcuda.Rate, error) {
	j, ok := 0, false
	if rt != nil {
		j, ok = rt.index[rateKey{lr, s}]
	}
	if !ok {
		return kcuda.Rate{}, fmt.Errorf("runtime: cuda: no rate table for learning rate %v under %s", lr, s)
	}
	return kcuda.Rate{LR: lr, Table: rt.dev + cu.DevicePtr(4*j*rt.n), Len: rt.n}, nil
}

// fill writes the rates of iterations from … from+n−1 and waits for the
// copy. Nothing may be reading the tables.
func (rt *rateTables) fill(g *gpuPlan, from int) error {
	for j, k := range rt.keys {
		for it := from; it < from+rt.n; it++ {
			rt.host[j*rt.n+it%rt.n] = k.s.Rate(k.lr, it+1)
		}
	}
	s := g.host[g.firstIndex()]
	if err := s.CopyHtoD(rt.dev, unsafe.Pointer(unsafe.SliceData(rt.host)), units.Bytes(4*len(rt.host))); err != nil {
		return err
	}
	return s.Synchronize()
}

// free releases the tables' device memory.
func (rt *rateTables) free(g *gpuPlan) error {
	if rt == nil {
		return nil
	}
	return g.firstGPU().ctx.Free(rt.dev)
}
