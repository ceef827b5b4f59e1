package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// Feeder supplies a plan's inputs: samples [from, from+n) of iteration
// iter's global batch, the model's input as floats (images NCHW for a
// classifier) and labels. Either slice is nil when the caller does not
// want it — the labels always, for a model without labels. Input tasks of
// several devices call it concurrently.
type Feeder interface {
	Feed(iter, from, n int, images []float32, labels []int32) error
}

// PlanRunner executes a plan unchanged on CPU devices of this process:
// each plan device is a CPU device with the plan's worker count, its
// registers carved from one arena at the plan's offsets (scaled by two in a
// plan with 2-byte dtypes, which the CPU computes in f32), and each stream a
// goroutine firing its tasks in the plan's order once every dependency
// edge is satisfied — the edges the simulator follows.
type PlanRunner struct {
	p      *plans.Plan
	edges  [][]plans.Edge // incoming, by firing
	devs   []*CPU
	arenas [][]float32
	ops    []graph.Op // by task, for compute tasks
	in     [][]graph.Spec
	out    [][]graph.Spec

	// Stall is how long the runner waits without any firing finishing
	// before it gives up with ErrStalled (default 1 min; 0 waits forever).
	Stall time.Duration
	// Progress, if set, is called once per iteration, when its last loss
	// is known, with the iteration's mean loss.
	Progress func(iter int, loss float64)

	lossTasks int // loss firings per iteration
	// widen scales the plan's arena offsets: a CPU device computes every
	// float dtype in f32, so a plan with 2-byte registers runs in an arena
	// laid out at twice its planned offsets and size, where each register
	// has room for f32 elements and no two that the plan keeps apart
	// overlap.
	widen units.Bytes
}

// NewPlanRunner prepares p for execution: devices, arenas, decoded ops,
// and persistent registers initialized from the plan's seed (as a Store
// with that seed would).
func NewPlanRunner(p *plans.Plan) (*PlanRunner, error) {
	edges, err := p.Deps()
	if err != nil {
		return nil, err
	}
	r := &PlanRunner{p: p, edges: make([][]plans.Edge, len(p.Firings)), Stall: time.Minute, widen: 1}
	for _, e := range edges {
		r.edges[e.To] = append(r.edges[e.To], e)
	}
	for _, reg := range p.Registers {
		if reg.Spec.DType.Size() == 2 {
			r.widen = 2
		}
	}
	for i, d := range p.Devices {
		if spec, ok := topology.Lookup(d.Type); !ok || spec.Class != topology.CPU {
			return nil, fmt.Errorf("runtime: plan device %s is a %s: not available: this runtime executes on CPU devices only", d.Name, d.Type)
		}
		if d.Workers < 1 {
			return nil, fmt.Errorf("runtime: plan device %s has %d workers", d.Name, d.Workers)
		}
		r.devs = append(r.devs, NewCPU(d.Workers))
		r.arenas = append(r.arenas, make([]float32, (p.Memory[i].Peak*r.widen+3)/4))
	}
	r.ops = make([]graph.Op, len(p.Tasks))
	r.in = make([][]graph.Spec, len(p.Tasks))
	r.out = make([][]graph.Spec, len(p.Tasks))
	for i, t := range p.Tasks {
		for _, u := range t.Reads {
			r.in[i] = append(r.in[i], p.Registers[u.Reg].Spec)
		}
		if t.Kind != plans.Compute {
			continue
		}
		if r.ops[i], err = graph.DecodeOp(*t.Op); err != nil {
			return nil, fmt.Errorf("runtime: task %s: %w", t.Name, err)
		}
		if _, mutates := r.ops[i].(graph.Mutator); !mutates {
			for _, w := range t.Writes {
				r.out[i] = append(r.out[i], p.Registers[w].Spec)
			}
		}
	}
	for i := range p.Tasks {
		if graph.IsLoss(r.ops[i]) {
			if p.Tasks[i].PerMicro {
				r.lossTasks += p.MB
			} else {
				r.lossTasks++
			}
		}
	}
	for i := range p.Registers {
		reg := &p.Registers[i]
		if reg.Persistent {
			initialize(p.Seed, reg.Name, reg.Init, r.slot(i, 0).F)
		}
	}
	return r, nil
}

// slot returns the buffer of slot k of register reg.
func (r *PlanRunner) slot(reg, k int) Buffer {
	rg := &r.p.Registers[reg]
	off := int((rg.Offset+units.Bytes(k)*rg.SlotBytes)*r.widen) / 4
	n := rg.Spec.Shape.NumElements()
	f := r.arenas[rg.Device][off : off+n : off+n]
	if rg.Spec.DType == graph.I32 {
		return Buffer{I: unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(f))), n)}
	}
	return Buffer{F: f}
}

// Store returns a Store holding the current parameters and optimizer
// state of replica 0 (copied), e.g. to evaluate the trained model.
func (r *PlanRunner) Store() *Store {
	s := NewStore(r.p.Seed)
	for i, reg := range r.p.Registers {
		if reg.Persistent && reg.Device/r.p.PP == 0 {
			b := newBuffer(reg.Spec)
			copy(b.F, r.slot(i, 0).F)
			s.tensors[reg.Name] = &stored{spec: reg.Spec, buf: b}
		}
	}
	return s
}

// Param returns the current value of persistent register name on the
// device of the given replica (and its stage), for inspection.
func (r *PlanRunner) Param(name string, replica int) ([]float32, bool) {
	for i, reg := range r.p.Registers {
		if reg.Persistent && reg.Name == name && reg.Device/r.p.PP == replica {
			return r.slot(i, 0).F, true
		}
	}
	return nil, false
}

// RunResult is what a run of a plan measured.
type RunResult struct {
	Trace *trace.Trace
	// Loss is the mean training loss of each iteration.
	Loss []float64
}

// Run executes iters iterations, feeding inputs from feed, and returns the
// trace of every firing and the loss of every iteration.
func (r *PlanRunner) Run(ctx context.Context, iters int, feed Feeder) (*RunResult, error) {
	if iters < 1 {
		return nil, fmt.Errorf("runtime: iterations must be ≥ 1, got %d", iters)
	}
	p := r.p
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x := &run{r: r, ctx: ctx, iters: iters, feed: feed,
		done:   make([]int, len(p.Firings)),
		events: make([]trace.Event, 0, len(p.Firings)*iters),
		loss:   make([]float64, iters),
		losses: make([]int, iters),
	}
	x.cond = sync.NewCond(&x.mu)
	x.start = time.Now()
	x.progress = x.start

	// One goroutine per stream runs the firings whose home it is.
	var wg sync.WaitGroup
	for s := range p.Streams {
		var order []int
		for _, f := range p.Streams[s].Order {
			if p.Tasks[p.Firings[f].Task].Streams[0] == s {
				order = append(order, f)
			}
		}
		if len(order) == 0 {
			continue
		}
		wg.Go(func() {
			if err := x.stream(order); err != nil {
				cancel(err)
				x.mu.Lock()
				x.cond.Broadcast()
				x.mu.Unlock()
			}
		})
	}
	stop := x.watchdog(cancel)
	wg.Wait()
	stop()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	tr := p.NewTrace("runtime")
	tr.Events = x.events
	return &RunResult{Trace: tr, Loss: x.loss}, nil
}

// run is the state of one Run.
type run struct {
	r     *PlanRunner
	ctx   context.Context
	iters int
	feed  Feeder
	start time.Time

	mu       sync.Mutex
	cond     *sync.Cond
	done     []int // iterations finished, by firing
	events   []trace.Event
	loss     []float64
	losses   []int     // loss firings finished, by iteration
	progress time.Time // last time a firing finished
}

// stream runs a stream's firings, iteration after iteration.
func (x *run) stream(order []int) error {
	for it := range x.iters {
		for _, f := range order {
			if err := x.wait(f, it); err != nil {
				return err
			}
			start := time.Since(x.start)
			loss, err := x.fire(f, it)
			if err != nil {
				return fmt.Errorf("runtime: %s of iteration %d: %w", x.r.p.FiringName(f), it, err)
			}
			end := time.Since(x.start)
			fi := x.r.p.Firings[f]
			x.mu.Lock()
			x.done[f] = it + 1
			x.events = append(x.events, trace.Event{Task: int32(fi.Task), Iter: int32(it), Micro: int32(fi.Micro),
				Start: trace.Time(start), End: trace.Time(end)})
			report := false
			if graph.IsLoss(x.r.ops[fi.Task]) {
				x.loss[it] += loss
				x.losses[it]++
				report = x.losses[it] == x.r.lossTasks && x.r.Progress != nil
			}
			x.progress = time.Now()
			x.cond.Broadcast()
			mean := x.loss[it]
			x.mu.Unlock()
			if report {
				x.r.Progress(it, mean)
			}
		}
	}
	return nil
}

// wait blocks until firing f may run in iteration it.
func (x *run) wait(f, it int) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for {
		if err := context.Cause(x.ctx); err != nil {
			return err
		}
		ready := true
		for _, e := range x.r.edges[f] {
			if need := it - e.Delta; need >= 0 && x.done[e.From] <= need {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		x.cond.Wait()
	}
}

// watchdog wakes the streams when the run is cancelled, and cancels it
// when no firing has finished for Stall.
func (x *run) watchdog(cancel context.CancelCauseFunc) (stop func()) {
	quit := make(chan struct{})
	go func() {
		period := time.Second
		if x.r.Stall > 0 {
			period = min(x.r.Stall/4+1, time.Second)
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-x.ctx.Done():
				x.mu.Lock()
				x.cond.Broadcast()
				x.mu.Unlock()
				return
			case <-tick.C:
				x.mu.Lock()
				stalled := x.r.Stall > 0 && time.Since(x.progress) > x.r.Stall
				x.mu.Unlock()
				if stalled {
					cancel(fmt.Errorf("%w: no task finished for %v", ErrStalled, x.r.Stall))
				}
			}
		}
	}()
	return func() { close(quit) }
}

// ErrStalled is returned when a plan's execution makes no progress.
var ErrStalled = errors.New("runtime: execution stalled")

// fire executes one firing and returns its contribution to the
// iteration's mean loss.
func (x *run) fire(f, it int) (float64, error) {
	p := x.r.p
	fi := p.Firings[f]
	t := &p.Tasks[fi.Task]
	dev := x.r.devs[p.Streams[t.Streams[0]].Device]
	reads := make([]Buffer, len(t.Reads))
	for i, u := range t.Reads {
		v, err := p.ReadVersion(u, it, fi.Micro)
		if err != nil {
			return 0, err
		}
		reads[i] = x.r.slot(u.Reg, p.Slot(u.Reg, v))
	}
	writes := make([]Buffer, len(t.Writes))
	for i, w := range t.Writes {
		writes[i] = x.r.slot(w, p.Slot(w, p.WriteVersion(w, t.ID, it, fi.Micro)))
	}
	switch t.Kind {
	case plans.Compute:
		op := x.r.ops[t.ID]
		out := writes
		if _, ok := op.(graph.Mutator); ok {
			out = nil // updates write their inputs in place
		}
		at := step{iter: it, micro: t.Replica*p.MB + fi.Micro, micros: p.DP * p.MB}
		if err := dev.launch(op, x.r.in[t.ID], x.r.out[t.ID], at, reads, out); err != nil {
			return 0, err
		}
		if graph.IsLoss(op) {
			return float64(out[0].F[0]) / float64(at.micros), nil
		}
	case plans.Input:
		b := writes[0]
		from := t.Offset + fi.Micro*p.MicroBatch
		return 0, x.feed.Feed(it, from, p.MicroBatch, b.F, b.I)
	case plans.Transfer:
		if reads[0].I != nil {
			copy(writes[0].I, reads[0].I)
		} else {
			cpu.Copy(dev.pool, reads[0].F, writes[0].F)
		}
	case plans.Accumulate:
		scale := 1 / float32(p.MB)
		if fi.Micro == 0 {
			cpu.Scale(dev.pool, scale, reads[0].F, writes[0].F)
		} else {
			cpu.Axpy(dev.pool, scale, reads[0].F, writes[0].F)
		}
	case plans.AllReduce:
		allReduceMean(dev.pool, writes)
	default:
		return 0, fmt.Errorf("unknown task kind %q", t.Kind)
	}
	return 0, nil
}

// allReduceMean replaces every buffer by the mean of all, summing in
// buffer order so that every replica gets the same bits.
func allReduceMean(p *cpu.Pool, bufs []Buffer) {
	acc := bufs[0].F
	for _, b := range bufs[1:] {
		cpu.Add(p, acc, b.F, acc)
	}
	cpu.Scale(p, 1/float32(len(bufs)), acc, acc)
	for _, b := range bufs[1:] {
		cpu.Copy(p, acc, b.F)
	}
}
