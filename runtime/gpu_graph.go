package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// gpuGraph is one iteration of a GPU-only plan captured as a CUDA graph:
// the same enqueues as an eager run, recorded once and replayed, so that an
// iteration costs one launch instead of one per kernel.
type gpuGraph struct {
	exec   *cu.GraphExec
	graph  *cu.Graph
	origin *cu.Stream
	pool   *SyntheticFeeder // whose device pool the inputs are gathered from; nil: staged from the host
	timed  bool
	gemm   GEMMPolicy // PlanRunner.GEMM when captured
	nodes  int
	// Per-firing timing events, recorded by the graph itself when timed.
	tstart, tend []*cu.Event
	events       []*cu.Event // fork and joins
}

// Close frees the graph.
func (gg *gpuGraph) Close() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	keep(gg.exec.Destroy())
	keep(gg.graph.Destroy())
	for _, e := range append(append(gg.tstart, gg.tend...), gg.events...) {
		if e != nil {
			keep(e.Destroy())
		}
	}
	return errors.Join(errs...)
}

// capturable says why p cannot be replayed as one captured iteration, or "".
// A graph's arguments are fixed, so every iteration must use the same
// register slots: each register's writes per iteration must be a multiple
// of its slots. All devices must be GPUs.
func (r *PlanRunner) capturable() string {
	p := r.p
	for i, d := range p.Devices {
		if r.gpu.devs[i] == nil {
			return "device " + d.Name + " is not a GPU"
		}
	}
	for i := range p.Registers {
		w := p.WritesPerIteration(i)
		if w > 0 && w%p.Registers[i].Slots != 0 {
			return fmt.Sprintf("register %s has %d slots for %d writes per iteration", p.Registers[i].Name, p.Registers[i].Slots, w)
		}
	}
	for _, t := range p.Tasks {
		if t.Kind == plans.AllReduce {
			return "it has all-reduces"
		}
	}
	return ""
}

// iterationOrder is an order of one iteration's firings that respects
// every same-iteration edge (stream order included).
func (r *PlanRunner) iterationOrder() []int {
	n := len(r.p.Firings)
	indeg := make([]int, n)
	succ := make([][]int, n)
	for to, es := range r.edges {
		for _, e := range es {
			if e.Delta == 0 {
				indeg[to]++
				succ[e.From] = append(succ[e.From], to)
			}
		}
	}
	var order, queue []int
	for f := range n {
		if indeg[f] == 0 {
			queue = append(queue, f)
		}
	}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		order = append(order, f)
		for _, to := range succ[f] {
			if indeg[to]--; indeg[to] == 0 {
				queue = append(queue, to)
			}
		}
	}
	return order // complete: Deps rejected same-iteration cycles
}

// capture records one iteration as a CUDA graph on the compute stream of
// the plan's first device. Streams fork from it and join back into it, and
// the graph ends by advancing the iteration counter its kernels read.
func (r *PlanRunner) capture(feed Feeder, timed bool) (*gpuGraph, error) {
	g := r.gpu
	p := r.p
	dev := g.firstGPU()
	origin := -1
	for s, st := range p.Streams {
		if st.Device == g.firstIndex() && st.Name == "compute" {
			origin = s
		}
	}
	if origin < 0 {
		return nil, errors.New("runtime: plan's first device has no compute stream")
	}
	pool, _ := feed.(*SyntheticFeeder)
	gg := &gpuGraph{origin: g.streams[origin], pool: pool, timed: timed, gemm: r.GEMM}
	newEvent := func(timing bool) (*cu.Event, error) {
		e, err := dev.ctx.NewEvent(timing)
		if err == nil && !timing {
			gg.events = append(gg.events, e)
		}
		return e, err
	}
	if timed {
		for range p.Firings {
			s, err := newEvent(true)
			if err != nil {
				return nil, err
			}
			e, err := newEvent(true)
			if err != nil {
				return nil, err
			}
			gg.tstart = append(gg.tstart, s)
			gg.tend = append(gg.tend, e)
		}
	}
	// Allocate before capturing: the pool or the staging buffers (ring
	// slot 0's, used every iteration) that the input tasks read.
	if sf, ok := feed.(*SyntheticFeeder); ok {
		if _, err := g.devicePoolOf(sf); err != nil {
			return nil, err
		}
	} else {
		for f, fi := range p.Firings {
			t := &p.Tasks[fi.Task]
			if t.Kind == plans.Input && len(g.staging[f]) == 0 {
				h, err := dev.ctx.MallocHost(units.Bytes(4 * p.Registers[t.Writes[0]].Spec.Shape.NumElements()))
				if err != nil {
					return nil, err
				}
				g.staging[f] = append(g.staging[f], h)
			}
		}
	}
	const it = 1 // a steady-state iteration: slots repeat every iteration
	if !g.warm {
		if err := r.warmUp(feed, it); err != nil {
			return nil, fmt.Errorf("warming up: %w", err)
		}
		g.warm = true
	}
	if g.rates == nil {
		var err error
		if g.rates, err = r.newRateTables(); err != nil {
			return nil, err
		}
	}
	if err := gg.origin.BeginCapture(); err != nil {
		return nil, err
	}
	g.capturing = true
	defer func() { g.capturing = false }()
	fail := func(err error) (*gpuGraph, error) {
		if g, err2 := gg.origin.EndCapture(); err2 == nil {
			g.Destroy()
		}
		for _, e := range append(append(gg.tstart, gg.tend...), gg.events...) {
			e.Destroy()
		}
		return nil, err
	}
	fork, err := newEvent(false)
	if err != nil {
		return fail(err)
	}
	if err := fork.Record(gg.origin); err != nil {
		return fail(err)
	}
	used := map[int]bool{origin: true}
	for _, f := range r.iterationOrder() {
		home := r.streamOf(f)
		s := g.streams[home]
		if !used[home] {
			used[home] = true
			if err := s.Wait(fork); err != nil {
				return fail(err)
			}
		}
		for _, e := range r.edges[f] {
			if e.Delta == 0 && r.streamOf(e.From) != home {
				if err := s.Wait(g.end[e.From][0]); err != nil {
					return fail(err)
				}
			}
		}
		if timed {
			if err := gg.tstart[f].RecordExternal(s); err != nil {
				return fail(err)
			}
		}
		if err := r.enqueue(s, f, it, g.counter, 0, feed); err != nil {
			return fail(fmt.Errorf("%s: %w", p.FiringName(f), err))
		}
		if timed {
			if err := gg.tend[f].RecordExternal(s); err != nil {
				return fail(err)
			}
		}
		if err := g.end[f][0].Record(s); err != nil {
			return fail(err)
		}
	}
	for home := range used {
		if home == origin {
			continue
		}
		join, err := newEvent(false)
		if err != nil {
			return fail(err)
		}
		if err := join.Record(g.streams[home]); err != nil {
			return fail(err)
		}
		if err := gg.origin.Wait(join); err != nil {
			return fail(err)
		}
	}
	if err := dev.k.IterAdvance(gg.origin, g.counter); err != nil {
		return fail(err)
	}
	if gg.graph, err = gg.origin.EndCapture(); err != nil {
		return nil, err
	}
	if gg.nodes, err = gg.graph.Nodes(); err != nil {
		gg.graph.Destroy()
		return nil, err
	}
	if gg.exec, err = gg.graph.Instantiate(); err != nil {
		gg.graph.Destroy()
		return nil, err
	}
	return gg, nil
}

// warmUp runs one iteration eagerly before the first capture and then
// puts the parameters and optimizer state back as they were: every kernel
// and cuBLAS algorithm the iteration uses is then loaded (lazy module
// loading and cuBLAS's first-call set-up must not happen inside a capture),
// and the run's first iteration still starts from the initial state.
func (r *PlanRunner) warmUp(feed Feeder, it int) error {
	g := r.gpu
	p := r.p
	dev := g.firstGPU()
	host := g.host[g.firstIndex()]
	type saved struct {
		reg int
		at  cu.DevicePtr
	}
	var keep []saved
	var total units.Bytes
	for i := range p.Registers {
		if p.Registers[i].Persistent {
			keep = append(keep, saved{i, cu.DevicePtr(total)})
			total += (p.Registers[i].Spec.Bytes() + 255) / 256 * 256
		}
	}
	backup, err := dev.ctx.Malloc(max(total, 256))
	if err != nil {
		return err
	}
	defer dev.ctx.Free(backup)
	for i := range keep {
		keep[i].at += backup
		if err := host.CopyDtoD(keep[i].at, r.ptr(keep[i].reg, 0), p.Registers[keep[i].reg].Spec.Bytes()); err != nil {
			return err
		}
	}
	if err := host.Synchronize(); err != nil {
		return err
	}
	for _, f := range r.iterationOrder() {
		home := r.streamOf(f)
		s := g.streams[home]
		for _, e := range r.edges[f] {
			if e.Delta == 0 && r.streamOf(e.From) != home {
				if err := s.Wait(g.end[e.From][0]); err != nil {
					return err
				}
			}
		}
		if err := r.enqueue(s, f, it, g.iters, 0, feed); err != nil {
			return fmt.Errorf("%s: %w", p.FiringName(f), err)
		}
		if err := g.end[f][0].Record(s); err != nil {
			return err
		}
	}
	for _, s := range g.streams {
		if s != nil {
			if err := s.Synchronize(); err != nil {
				return err
			}
		}
	}
	for _, k := range keep {
		if err := host.CopyDtoD(r.ptr(k.reg, 0), k.at, p.Registers[k.reg].Spec.Bytes()); err != nil {
			return err
		}
	}
	return host.Synchronize()
}

// runGraph replays the captured iteration iters times. With TaskTimes it
// synchronizes after every iteration to read each firing's events;
// without, only the iteration boundaries are timed, and the GPU runs the
// iterations back to back.
func (x *run) runGraph(ctx context.Context) error {
	r := x.r
	g := r.gpu
	// A host-fed graph serves any feeder: it copies from the staging
	// buffers. (Feeders themselves are not compared: a func or a struct
	// with a slice would make == panic.)
	pool, pooled := x.feed.(*SyntheticFeeder)
	if g.graph == nil || g.graph.pool != pool || g.graph.timed != r.TaskTimes || g.graph.gemm != r.GEMM {
		if g.graph != nil && g.graph.gemm != r.GEMM {
			g.warm = false // tune the new policy's products before capturing them
		}
		if g.graph != nil {
			if err := g.graph.Close(); err != nil {
				return err
			}
			g.graph = nil
		}
		gg, err := r.capture(x.feed, r.TaskTimes)
		if err != nil {
			return fmt.Errorf("runtime: capturing an iteration: %w", err)
		}
		g.graph = gg
	}
	gg := g.graph
	dev := g.firstGPU()
	s := gg.origin
	if err := g.setInts(g.counter, []int64{int64(r.iteration)}); err != nil { // the replays advance it
		return err
	}
	if g.rates != nil {
		if err := g.rates.fill(g, r.iteration); err != nil {
			return err
		}
	}
	marks := make([]*cu.Event, x.iters+1)
	for i := range marks {
		e, err := dev.ctx.NewEvent(true)
		if err != nil {
			return err
		}
		defer e.Destroy()
		marks[i] = e
	}
	if err := marks[0].Record(s); err != nil {
		return err
	}
	if err := marks[0].Synchronize(); err != nil {
		return err
	}
	x.mu.Lock()
	g.baseAt = time.Since(x.start)
	x.mu.Unlock()
	if err := g.base.Record(s); err != nil {
		return err
	}
	hist := make([]float32, lossCap*g.nloss)
	readLosses := func(from, to int) error { // iterations [from, to)
		if g.nloss == 0 || to <= from {
			return nil
		}
		if err := copyBack(s, unsafe.Pointer(unsafe.SliceData(hist)), g.lossHist, units.Bytes(4*len(hist))); err != nil {
			return err
		}
		for it := from; it < to; it++ {
			for j := range g.nloss {
				loss := float64(hist[((r.iteration+it)%lossCap)*g.nloss+j]) / float64(r.p.TotalMicros())
				x.mu.Lock()
				mean, report := x.addLoss(it, loss)
				x.mu.Unlock()
				if report {
					r.Progress(it, mean)
				}
			}
		}
		return nil
	}
	read := 0
	for it := range x.iters {
		if err := ctx.Err(); err != nil {
			return err
		}
		if it > 0 && x.stopping() {
			x.iters = it
			break
		}
		if g.rates != nil && it > 0 && it%g.rates.n == 0 {
			// The tables hold iterations up to this one: refill them
			// once the replays that read them have run.
			if err := s.Synchronize(); err != nil {
				return err
			}
			if err := g.rates.fill(g, r.iteration+it); err != nil {
				return err
			}
		}
		if !pooled {
			// Host-fed inputs: fill the staging buffers the graph copies
			// from; the previous iteration has finished with them.
			for f, fi := range r.p.Firings {
				if r.p.Tasks[fi.Task].Kind == plans.Input {
					if err := r.stage(f, it, x.feed); err != nil {
						return err
					}
				}
			}
		}
		if err := gg.exec.Launch(s); err != nil {
			return err
		}
		if err := marks[it+1].Record(s); err != nil {
			return err
		}
		synced := r.TaskTimes || !pooled
		if synced {
			if err := marks[it+1].Synchronize(); err != nil {
				return err
			}
		}
		if r.TaskTimes {
			for f, fi := range r.p.Firings {
				start, err := g.eventTime(gg.tstart[f])
				if err != nil {
					return err
				}
				end, err := g.eventTime(gg.tend[f])
				if err != nil {
					return err
				}
				x.events = append(x.events, trace.Event{Task: int32(fi.Task), Iter: int32(it), Micro: int32(fi.Micro), Start: start, End: end})
			}
		}
		if synced || it+1-read == lossCap {
			if err := s.Synchronize(); err != nil {
				return err
			}
			if err := readLosses(read, it+1); err != nil {
				return err
			}
			read = it + 1
		}
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if err := readLosses(read, x.iters); err != nil {
		return err
	}
	for it := range x.iters {
		d, err := cu.Elapsed(marks[it], marks[it+1])
		if err != nil {
			return err
		}
		x.steps = append(x.steps, d)
	}
	return nil
}

// stage feeds firing f's slice of iteration it into its ring slot 0
// staging buffer, the one a captured graph copies from.
func (r *PlanRunner) stage(f, it int, feed Feeder) error {
	return r.fill(r.gpu.staging[f][0], f, it, feed)
}

// fill feeds input firing f's slice of iteration it into page-locked
// buffer h, in the dtype of the register the firing writes: inputs
// (rounded to bf16 in place where the register is bf16), labels, or a
// language model's token ids.
func (r *PlanRunner) fill(h cu.HostBuffer, f, it int, feed Feeder) error {
	p := r.p
	fi := p.Firings[f]
	t := &p.Tasks[fi.Task]
	spec := p.Registers[t.Writes[0]].Spec
	n := spec.Shape.NumElements()
	var images []float32
	var ints []int32
	if spec.DType.IsFloat() {
		images = h.Float32s()[:n]
	} else {
		ints = unsafe.Slice((*int32)(h.Ptr), n)
	}
	if err := feedInput(feed, r.tokens[t.ID], r.iteration+it, t.Offset+fi.Micro*p.MicroBatch, p.MicroBatch, images, ints); err != nil {
		return err
	}
	if spec.DType == graph.BF16 {
		// In place, front to back: element i's two bytes land at or
		// before where element i was read.
		half := unsafe.Slice((*uint16)(h.Ptr), n)
		for i, v := range images {
			half[i] = cu.BF16FromFloat32(v)
		}
	}
	return nil
}
