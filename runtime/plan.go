package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// PlanRunner executes a plan unchanged on the devices of this process: a
// plan's CPU device is a CPU device with the plan's worker count, its
// registers carved from one arena at the plan's offsets (scaled by two in a
// plan with 2-byte dtypes, which the CPU computes in f32); a GPU device is
// a CUDA device whose arena is one allocation at the plan's offsets. Each
// stream is a goroutine firing its tasks in the plan's order once every
// dependency edge is satisfied — the edges the simulator follows; a GPU
// stream's goroutine enqueues its firings on a CUDA stream (see gpuPlan).
// A plan whose devices are all GPUs is captured once as a CUDA graph and
// replayed (unless Eager is set).
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
	// Stop, once closed, ends a Run at an iteration boundary: the
	// iterations some stream has begun finish, none begins after them,
	// and Run returns the iterations done, fewer than asked. The weights
	// are then those of that many whole iterations. A Run always runs at
	// least one: one called with Stop closed runs one iteration and
	// returns (ask closed(Stop) before calling Run not to). In a multi-process
	// run, rank 0's Stop stops every rank after the same iterations (they
	// agree on them: see stopRanks); another rank's asks rank 0 to stop
	// (StopAsked).
	Stop <-chan struct{}
	// StopAsked, if set, is called on rank 0 of a multi-process run when
	// another rank's Stop has closed during a Run, with that rank: closing
	// rank 0's Stop then stops every rank. It is called from the goroutine
	// that receives the Run's messages, so it must not block.
	StopAsked func(rank int)
	// Eager runs GPU plans by enqueueing every firing every iteration, as
	// heterogeneous plans always run, instead of replaying a CUDA graph.
	Eager bool
	// TaskTimes records every firing's start and end on GPUs that replay a
	// graph (events recorded by the graph; the run synchronizes after every
	// iteration to read them). Without it a graph replay times whole
	// iterations only and its trace has no events.
	TaskTimes bool
	// GEMM says how GPUs run dense layers (Dense, DenseGrad) and matrix
	// products (MatMul): by default each shape's fastest way, timed on its
	// first run; the other policies are for comparing. All compute the
	// same, up to rounding.
	GEMM GEMMPolicy

	// iteration counts the iterations run so far, over every Run: an
	// iteration's number says Adam's step, dropout's masks and the
	// feeder's batch, so that runs in several calls (or resumed from a
	// checkpoint, SetIteration) compute what one run would.
	iteration int

	gpu       *gpuPlan // nil for plans of CPU devices only
	rk        *ranked  // nil unless the run spans processes
	lossTasks int      // loss firings per iteration
	// counts says, by task, whether a loss task's firings make the
	// iteration's loss: those of tensor-parallel rank 0 (the others
	// compute the same values).
	counts []bool
	// tokens says, by task, whether an input task feeds token ids.
	tokens []bool
	// zeros is what an idle member of a round's collective reads (see
	// plans.Plan.Idle), as long as the longest such read; never written.
	zeros []float32
	// widen scales the plan's arena offsets: a CPU device computes every
	// float dtype in f32, so a plan with 2-byte registers runs in an arena
	// laid out at twice its planned offsets and size, where each register
	// has room for f32 elements and no two that the plan keeps apart
	// overlap.
	widen units.Bytes
}

// NewPlanRunner prepares p for execution: devices, arenas, decoded ops,
// and persistent registers initialized from the plan's seed (as a Store
// with that seed would). A plan's GPU devices are CUDA devices 0, 1, … in
// plan order; where there is no GPU the error wraps cuda.ErrNotAvailable.
// Close releases them.
func NewPlanRunner(p *plans.Plan) (*PlanRunner, error) {
	return newPlanRunner(p, nil)
}

// NewGPUPlanRunner is NewPlanRunner with the plan's GPU devices already
// opened (in plan order); the runner does not close them.
func NewGPUPlanRunner(p *plans.Plan, gpus ...*GPU) (*PlanRunner, error) {
	return newPlanRunner(p, gpus)
}

func newPlanRunner(p *plans.Plan, gpus []*GPU) (r *PlanRunner, err error) {
	return newPlanRunnerOn(p, gpus, nil)
}

// CheckHostMemory says whether the arenas of p's CPU devices fit this
// machine's memory, as NewPlanRunner allocates them: for a caller that
// runs many plans and would check them all before it begins.
func CheckHostMemory(p *plans.Plan) error {
	return checkHostMemory(p, nil, widening(p))
}

// widening is what a plan's CPU arenas are widened by: 2 where bf16
// registers are held in f32, else 1.
func widening(p *plans.Plan) units.Bytes {
	for _, reg := range p.Registers {
		if reg.Spec.DType.Size() == 2 {
			return 2
		}
	}
	return 1
}

// checkHostMemory says whether the arenas of the plan's CPU devices that
// are this process's (all, or with rk those of its rank) fit this
// machine's memory, as widen (2: bf16 registers held in f32) makes them:
// a plan compiled for a larger machine would otherwise end the process
// with the Go runtime's out-of-memory crash, not an error.
func checkHostMemory(p *plans.Plan, rk *ranked, widen units.Bytes) error {
	have, ok := topology.HostMemory()
	if !ok {
		return nil
	}
	var need, most units.Bytes
	largest := -1
	for i, d := range p.Devices {
		if isGPU(d) || !rk.local(i) {
			continue
		}
		b := (p.Memory[i].Peak*widen + 3) / 4 * 4
		need += b
		if largest < 0 || b > most {
			largest, most = i, b
		}
	}
	if need <= have {
		return nil
	}
	return fmt.Errorf("runtime: the plan's CPU devices need %v of memory (the largest, %s, %v), this machine has %v",
		need, p.Devices[largest].Name, most, have)
}

// newPlanRunnerOn prepares the devices of p that are this process's: all,
// or with rk those of its rank.
func newPlanRunnerOn(p *plans.Plan, gpus []*GPU, rk *ranked) (r *PlanRunner, err error) {
	if p.SharedTP || p.SharedDP {
		return nil, fmt.Errorf("runtime: the plan lists tensor-parallel rank 0 or data-parallel replica 0 only (tp_shared, dp_shared: compiled for the simulator with --shared-tp or --shared-dp): compile it without those to run it")
	}
	edges, err := p.Deps()
	if err != nil {
		return nil, err
	}
	r = &PlanRunner{p: p, edges: make([][]plans.Edge, len(p.Firings)), Stall: time.Minute, widen: widening(p), rk: rk}
	for _, e := range edges {
		r.edges[e.To] = append(r.edges[e.To], e)
	}
	if rk != nil {
		rk.derive(p, edges)
		r.edges = rk.waits
	}
	if err := checkHostMemory(p, rk, r.widen); err != nil { // before anything is allocated
		return nil, err
	}
	hasGPU := false
	for _, d := range p.Devices {
		spec, ok := topology.Lookup(d.Type)
		switch {
		case ok && spec.Class == topology.GPU:
			hasGPU = true
		case !ok || spec.Class != topology.CPU:
			return nil, fmt.Errorf("runtime: plan device %s is a %s: not available: this runtime executes on CPU devices and NVIDIA GPUs", d.Name, d.Type)
		case d.Workers < 1:
			return nil, fmt.Errorf("runtime: plan device %s has %d workers", d.Name, d.Workers)
		}
	}
	if hasGPU {
		if err := gpuSupported(p); err != nil {
			return nil, err
		}
		g, err := newGPUPlan(p, edges, gpus)
		if err != nil {
			return nil, err
		}
		r.gpu = g
		defer func() {
			if err != nil {
				g.Close()
			}
		}()
	}
	for i, d := range p.Devices {
		if isGPU(d) || !rk.local(i) {
			r.devs = append(r.devs, nil)
			r.arenas = append(r.arenas, nil)
			continue
		}
		r.devs = append(r.devs, NewCPU(d.Workers))
		n := (p.Memory[i].Peak*r.widen + 3) / 4
		if !hasGPU {
			r.arenas = append(r.arenas, make([]float32, n))
			continue
		}
		// Page-locked, so that copies to and from GPUs run asynchronously.
		h, err := r.gpu.firstGPU().ctx.MallocHost(max(4*n, 4))
		if err != nil {
			return nil, fmt.Errorf("runtime: plan device %s: arena: %w", d.Name, err)
		}
		r.gpu.pinned = append(r.gpu.pinned, h)
		f := h.Float32s()[:n]
		clear(f)
		r.arenas = append(r.arenas, f)
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
	r.counts = make([]bool, len(p.Tasks))
	r.tokens = make([]bool, len(p.Tasks))
	for i := range p.Tasks {
		home := p.Streams[p.Tasks[i].Streams[0]].Device
		r.counts[i] = graph.IsLoss(r.ops[i]) && p.TPRank(home) == 0
		if t := &p.Tasks[i]; t.Kind == plans.Input {
			spec := p.Registers[t.Writes[0]].Spec
			r.tokens[i] = spec.DType == graph.I32 && len(spec.Shape) > 1 // labels are one axis
		}
		if r.counts[i] && rk.local(home) {
			r.lossTasks += p.Fires(i)
		}
		if t := &p.Tasks[i]; t.Rounds {
			for _, u := range t.Reads {
				if p.Idle(t, u, p.MB-1) { // the last round is idle where any is
					r.zeros = make([]float32, max(len(r.zeros), p.Registers[u.Reg].Spec.Shape.NumElements()))
				}
			}
		}
	}
	for i := range p.Registers {
		reg := &p.Registers[i]
		if !reg.Persistent || !rk.local(reg.Device) {
			continue
		}
		if r.devs[reg.Device] != nil {
			initialize(p.Seed, reg.Name, reg.Init, r.slot(i, 0).F)
			continue
		}
		b := newBuffer(reg.Spec)
		initialize(p.Seed, reg.Name, reg.Init, b.F)
		if err := r.upload(i, 0, b); err != nil {
			return nil, fmt.Errorf("runtime: initializing %s: %w", reg.Name, err)
		}
	}
	return r, nil
}

// Notes says where the run departed from the plan's intent without changing
// what it computes (up to one more bf16 rounding): the fused cuBLASLt
// products its GPUs ran unfused (GPU.Fallbacks).
func (r *PlanRunner) Notes() []string {
	var notes []string
	for _, g := range r.gpus() {
		for _, f := range g.Fallbacks() {
			notes = append(notes, fmt.Sprintf("%v: ran unfused: %s", g, f))
		}
	}
	return notes
}

// Tunings lists how the GPUs run each product they have timed under
// GEMMTuned (GPU.Tunings), in this run or an earlier one.
func (r *PlanRunner) Tunings() []string {
	var l []string
	for _, g := range r.gpus() {
		for _, t := range g.Tunings() {
			l = append(l, fmt.Sprintf("cuda:%d: %s", g.Info().Ordinal, t))
		}
	}
	return l
}

// gpus returns the plan's GPUs, each once.
func (r *PlanRunner) gpus() []*GPU {
	if r.gpu == nil {
		return nil
	}
	var l []*GPU
	for _, g := range r.gpu.devs {
		if g != nil && !slices.Contains(l, g) {
			l = append(l, g)
		}
	}
	return l
}

// Close releases the runner's GPU resources (nothing for CPU plans).
func (r *PlanRunner) Close() error {
	if r.gpu == nil {
		return nil
	}
	err := r.gpu.Close()
	r.gpu = nil
	return err
}

// value returns a copy of slot 0 of register reg, wherever it lives.
func (r *PlanRunner) value(reg int) (Buffer, error) {
	if d := r.p.Registers[reg].Device; !r.rk.local(d) {
		return Buffer{}, fmt.Errorf("runtime: %s is on device %s of rank %d", r.p.Registers[reg].Name, r.p.Devices[d].Name, r.rk.ranks[d])
	}
	if r.devs[r.p.Registers[reg].Device] == nil {
		return r.download(reg, 0)
	}
	src := r.slot(reg, 0)
	b := newBuffer(r.p.Registers[reg].Spec)
	copy(b.F, src.F)
	copy(b.I, src.I)
	return b, nil
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
// state of replica 0 (copied), e.g. to evaluate the trained model. Under
// tensor parallelism it holds each rank's parts and, assembled from them,
// the whole tensors. In a multi-process run it holds those on this rank's
// devices.
func (r *PlanRunner) Store() (*Store, error) {
	s := NewStore(r.p.Seed)
	for i, reg := range r.p.Registers {
		// Replica 0's weights and state, and under ZeRO every replica's
		// part of the state, and under stage 3 of the weights (under
		// stages 1 and 2 a weight's parts are masters, Register.Master,
		// and replica 0 holds it whole). A tensor-parallel rank's part,
		// named for its rank, is replica 0's to put.
		sh := reg.Init.Shard
		zeroPart := sh != nil && r.p.Zero > 0 && !reg.Master && reg.Name != sh.Of+sh.Suffix()
		if reg.Persistent && !reg.Master && (r.p.Replica(reg.Device) == 0 || zeroPart) && r.rk.local(reg.Device) {
			b, err := r.value(i)
			if err != nil {
				return nil, err
			}
			if err := s.Put(Tensor{Name: reg.Name, Spec: reg.Spec, F: b.F, Shard: reg.Init.Shard}); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Param returns a copy of the current value of persistent register name
// on the device of the given replica (and its stage), for inspection.
func (r *PlanRunner) Param(name string, replica int) ([]float32, bool) {
	for i, reg := range r.p.Registers {
		if reg.Persistent && reg.Name == name && r.p.Replica(reg.Device) == replica {
			b, err := r.value(i)
			return b.F, err == nil
		}
	}
	return nil, false
}

// RunResult is what a run of a plan measured.
type RunResult struct {
	// Trace holds every firing's start and end (none for a GPU graph
	// replay without TaskTimes).
	Trace *trace.Trace
	// Loss is the mean training loss of each iteration.
	Loss []float64
	// Steps is each iteration's duration: from one iteration's end to the
	// next's (the first from the run's start), so that their mean is the
	// throughput step time.
	Steps []time.Duration
	// Part is, in a multi-process run, this rank's result for MergeRanks
	// (Trace, Loss and Steps are then this rank's alone).
	Part *RankResult
}

// StepTime is the mean of Steps after the first warmup iterations.
func (res *RunResult) StepTime(warmup int) (time.Duration, error) {
	if warmup < 0 || warmup >= len(res.Steps) {
		return 0, fmt.Errorf("runtime: warm-up %d leaves none of %d iterations", warmup, len(res.Steps))
	}
	var sum time.Duration
	for _, d := range res.Steps[warmup:] {
		sum += d
	}
	return sum / time.Duration(len(res.Steps)-warmup), nil
}

// Run executes iters iterations, feeding inputs from feed, and returns the
// trace of every firing and the loss of every iteration.
func (r *PlanRunner) Run(ctx context.Context, iters int, feed Feeder) (*RunResult, error) {
	if iters < 1 {
		return nil, fmt.Errorf("runtime: iterations must be ≥ 1, got %d", iters)
	}
	if nf := max(len(r.p.Firings), 1); iters > trace.MaxEvents/nf {
		return nil, fmt.Errorf("runtime: %d iterations of %d firings each are more than the %d events a trace holds (at most %d iterations of this plan)",
			iters, nf, trace.MaxEvents, trace.MaxEvents/nf)
	}
	p := r.p
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x := &run{r: r, ctx: ctx, cancel: cancel, iters: iters, asked: iters, feed: feed,
		done:   make([]int, len(p.Firings)),
		events: make([]trace.Event, 0, len(p.Firings)*iters),
		loss:   make([]float64, iters),
		losses: make([]int, iters),
	}
	x.cond = sync.NewCond(&x.mu)
	x.start = time.Now()
	x.progress = x.start
	if r.gpu != nil {
		x.streamEnd = make([]trace.Time, len(p.Streams))
		x.hostEnd = map[[2]int]trace.Time{}
		x.issued = make([]int, iters)
		if err := r.gpu.iterationNumbers(r.iteration, iters); err != nil {
			return nil, err
		}
		if sf, ok := feed.(*SyntheticFeeder); ok {
			if _, err := r.gpu.devicePoolOf(sf); err != nil {
				return nil, err
			}
		}
		if why := r.capturable(); why == "" && !r.Eager {
			if err := x.runGraph(ctx); err != nil {
				return nil, err
			}
			r.iteration += x.iters
			return x.result(), nil
		}
		if err := x.markBase(); err != nil {
			return nil, err
		}
	}

	stopReceiving, endStop := func() {}, func() {}
	if rk := r.rk; rk != nil {
		x.rr = &rankRun{id: rk.runs, heard: map[[2]int]int{}, parts: map[[2]int][]*Message{}, begunOf: map[int]int{}}
		rk.runs++
		defer rk.link.Forget(x.rr.id)
		stopReceiving = x.startReceiving()
		if r.Stop != nil {
			endStop = x.watchStop()
		}
	}

	// One goroutine per stream runs the firings whose home it is.
	var wg sync.WaitGroup
	for s := range p.Streams {
		var order []int
		for _, f := range p.Streams[s].Order {
			if r.homeOf(f) == s {
				order = append(order, f)
			}
		}
		if len(order) == 0 {
			continue
		}
		wg.Go(func() {
			if err := x.stream(order); err != nil {
				x.fail(err)
			}
		})
	}
	stop := x.watchdog()
	wg.Wait()
	endStop()
	if x.rr != nil && r.rk.me != 0 && context.Cause(ctx) == nil {
		if err := x.reportEnd(); err != nil {
			x.fail(err)
		}
	}
	stop()
	stopReceiving()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	iters = x.iters // fewer if stopped
	if r.gpu != nil {
		// Collect the last iterations' GPU firings.
		for f := range p.Firings {
			if !r.onGPU(f) {
				continue
			}
			for it := max(0, iters-r.gpu.ring); it < iters; it++ {
				if err := x.harvest(f, it); err != nil {
					return nil, err
				}
			}
		}
	}
	r.iteration += iters
	res := x.result()
	if x.rr != nil {
		res.Part = &RankResult{Rank: r.rk.me, Start: x.start, Events: res.Trace.Events, Landed: x.rr.landed, Loss: res.Loss}
	}
	prev := trace.Time(0)
	for _, end := range res.Trace.IterationEnds() {
		res.Steps = append(res.Steps, end.Sub(prev))
		prev = end
	}
	return res, nil
}

func (x *run) result() *RunResult {
	tr := x.r.p.NewTrace("runtime")
	tr.Events = x.events
	return &RunResult{Trace: tr, Loss: x.loss[:x.iters], Steps: x.steps}
}

// markBase records the GPU event that the run's GPU times count from. Its
// time on the run's clock is taken once it has completed, so GPU times
// map no earlier than they happened: a GPU firing never appears to start
// before a CPU firing it waited for.
func (x *run) markBase() error {
	g := x.r.gpu
	s := g.host[g.firstIndex()]
	if err := g.base.Record(s); err != nil {
		return err
	}
	if err := g.base.Synchronize(); err != nil {
		return err
	}
	g.baseAt = time.Since(x.start)
	return nil
}

// addLoss adds a loss firing's share to iteration it's loss and says
// whether that completes the iteration's loss (and Progress should hear
// of it). x.mu is held.
func (x *run) addLoss(it int, loss float64) (mean float64, report bool) {
	x.loss[it] += loss
	x.losses[it]++
	return x.loss[it], x.losses[it] == x.r.lossTasks && x.r.Progress != nil && x.r.rk == nil
}

// run is the state of one Run.
type run struct {
	r      *PlanRunner
	ctx    context.Context
	cancel context.CancelCauseFunc // fail
	iters  int                     // lowered when the runner's Stop closes (x.mu held)
	asked  int                     // iters as Run was called
	feed   Feeder
	start  time.Time
	rr     *rankRun // multi-process runs

	mu       sync.Mutex
	cond     *sync.Cond
	done     []int // iterations finished (issued, on a GPU), by firing
	issued   []int // firings done, by iteration (GPU plans)
	steps    []time.Duration
	events   []trace.Event
	loss     []float64
	losses   []int     // loss firings finished, by iteration
	progress time.Time // last time a firing finished
	begun    int       // iterations begun on some stream
	// paused holds back, in a multi-process run that is stopping, every
	// iteration no stream has begun until the ranks agree where to stop.
	paused bool
	// In a plan with a GPU, where the host records CPU firings (see
	// recordedStart): the last recorded end on each stream, and the
	// recorded ends of the host's firings of recent iterations.
	streamEnd []trace.Time
	hostEnd   map[[2]int]trace.Time // by firing and iteration
}

// begin says whether a stream may begin iteration it. Once the runner's
// Stop has closed, no stream begins an iteration no stream has begun:
// the run ends with whole iterations. While the run is paused, a stream
// may begin an iteration another has begun, and waits to begin any other
// (false if the run fails meanwhile).
func (x *run) begin(it int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.iters > x.begun && x.stopping() {
		x.iters = max(x.begun, 1)
	}
	for x.paused && it >= x.begun {
		if context.Cause(x.ctx) != nil {
			return false
		}
		x.cond.Wait()
	}
	if it >= x.iters {
		return false
	}
	x.begun = max(x.begun, it+1)
	return true
}

// stopping says whether the runner's Stop has closed, for a run of one
// process (a multi-process run stops by stopRanks).
func (x *run) stopping() bool { return x.rr == nil && closed(x.r.Stop) }

// stream runs a stream's firings, iteration after iteration.
func (x *run) stream(order []int) error {
	for it := 0; x.begin(it); it++ {
		for _, f := range order {
			if err := x.wait(f, it); err != nil {
				return err
			}
			if x.r.onGPU(f) {
				if err := x.issue(f, it); err != nil {
					return fmt.Errorf("runtime: %s of iteration %d: %w", x.r.p.FiringName(f), it, err)
				}
				x.mu.Lock()
				x.finish(f, it)
				x.mu.Unlock()
				continue
			}
			after, err := x.awaitGPU(f, it)
			if err != nil {
				return err
			}
			start := max(time.Since(x.start), x.recordedStart(f, it, after))
			loss, err := x.fire(f, it)
			if err != nil {
				return fmt.Errorf("runtime: %s of iteration %d: %w", x.r.p.FiringName(f), it, err)
			}
			end := max(time.Since(x.start), start)
			fi := x.r.p.Firings[f]
			x.mu.Lock()
			x.recordedEnd(f, it, trace.Time(end))
			x.finish(f, it)
			x.events = append(x.events, trace.Event{Task: int32(fi.Task), Iter: int32(it), Micro: int32(fi.Micro),
				Start: trace.Time(start), End: trace.Time(end)})
			mean, report := 0.0, false
			if x.r.counts[fi.Task] {
				mean, report = x.addLoss(it, loss)
			}
			x.mu.Unlock()
			if report {
				x.r.Progress(it, mean)
			}
			if x.rr != nil {
				if err := x.notify(f, it); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// recordedStart is the earliest that the host's firing f of iteration it
// may be recorded as starting, in a plan with a GPU: after, the latest end
// of the GPU firings it waited for (see awaitGPU), and the recorded ends
// of the host's firings before it on its streams and on its edges. GPU
// times map to the run's clock a little late (see markBase), so a firing
// that waited for one may be recorded as starting, and ending, later than
// the clock reads when it has ended; what follows it then starts no
// earlier on the record, so that the trace keeps every stream's order and
// every edge as the run kept them. Without a GPU, the clock is the record:
// 0.
func (x *run) recordedStart(f, it int, after trace.Time) time.Duration {
	if x.r.gpu == nil {
		return 0
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	lo := after
	for _, s := range x.r.p.Tasks[x.r.p.Firings[f].Task].Streams {
		lo = max(lo, x.streamEnd[s])
	}
	for _, e := range x.r.edges[f] {
		if need := it - e.Delta; need >= 0 {
			lo = max(lo, x.hostEnd[[2]int{e.From, need}])
		}
	}
	return time.Duration(lo)
}

// recordedEnd notes, in a plan with a GPU, that the host's firing f of
// iteration it is recorded as ending at end (see recordedStart). It keeps
// the ends of the last hostEndIters iterations of each firing. x.mu is
// held.
func (x *run) recordedEnd(f, it int, end trace.Time) {
	if x.r.gpu == nil {
		return
	}
	for _, s := range x.r.p.Tasks[x.r.p.Firings[f].Task].Streams {
		x.streamEnd[s] = max(x.streamEnd[s], end)
	}
	x.hostEnd[[2]int{f, it}] = end
	delete(x.hostEnd, [2]int{f, it - hostEndIters})
}

// hostEndIters is how many iterations of a host firing's recorded ends a
// run keeps: more than an edge reaches back (a plan with a GPU starts no
// iteration before the one two back has been issued everywhere).
const hostEndIters = 8

// finish marks firing f of iteration it done (on a GPU: issued). x.mu is
// held.
func (x *run) finish(f, it int) {
	x.done[f] = it + 1
	if x.issued != nil {
		x.issued[it]++
	}
	x.progress = time.Now()
	x.cond.Broadcast()
}

// awaitGPU waits, for a firing on a CPU stream, until the GPU firings its
// edges name have finished on their GPUs (wait saw them issued), and
// returns the latest of their ends on the run's clock. GPU times are
// mapped to that clock a little late (see markBase), so the firing's start
// is recorded no earlier than that: the trace then shows every edge kept.
func (x *run) awaitGPU(f, it int) (trace.Time, error) {
	g := x.r.gpu
	if g == nil {
		return 0, nil
	}
	var latest trace.Time
	for _, e := range x.r.edges[f] {
		if need := it - e.Delta; need >= 0 && x.r.onGPU(e.From) {
			ev := g.end[e.From][need%g.ring]
			if err := ev.Synchronize(); err != nil {
				return 0, err
			}
			end, err := g.eventTime(ev)
			if err != nil {
				return 0, err
			}
			latest = max(latest, end)
		}
	}
	return latest, nil
}

// wait blocks until firing f may run (or, on a GPU, be issued) in
// iteration it. In a plan with GPUs, no stream starts iteration it before
// every firing of iteration it−2 has been issued: that bounds the events
// in flight (see gpuPlan).
func (x *run) wait(f, it int) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for {
		if err := context.Cause(x.ctx); err != nil {
			return err
		}
		ready := x.issued == nil || it < 2 || x.issued[it-2] == len(x.r.p.Firings)
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
func (x *run) watchdog() (stop func()) {
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
					x.fail(fmt.Errorf("%w: no task finished for %v", ErrStalled, x.r.Stall))
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
	dev := x.r.devs[p.Streams[x.r.homeOf(f)].Device]
	reads := make([]Buffer, len(t.Reads))
	for i, u := range t.Reads {
		if x.r.devs[p.Registers[u.Reg].Device] == nil { // a tensor-parallel sum's read on another rank
			continue
		}
		if p.Idle(t, u, fi.Micro) {
			reads[i] = Buffer{F: x.r.zeros[:p.Registers[u.Reg].Spec.Shape.NumElements()]}
			continue
		}
		v, err := p.ReadVersion(u, it, fi.Micro)
		if err != nil {
			return 0, err
		}
		reads[i] = x.r.slot(u.Reg, p.Slot(u.Reg, v))
	}
	writes := make([]Buffer, len(t.Writes))
	for i, w := range t.Writes {
		if x.r.devs[p.Registers[w].Device] != nil { // on a GPU (see Transfer) or another rank
			writes[i] = x.r.slot(w, p.Slot(w, p.WriteVersion(w, t.ID, it, fi.Micro)))
		}
	}
	switch t.Kind {
	case plans.Compute:
		op := x.r.ops[t.ID]
		out := writes
		if _, ok := op.(graph.Mutator); ok {
			out = nil // updates write their inputs in place
		}
		at := step{iter: x.r.iteration + it, micro: p.FirstMicro(t.Replica) + fi.Micro, micros: p.TotalMicros()}
		if err := dev.launch(op, x.r.in[t.ID], x.r.out[t.ID], at, reads, out); err != nil {
			return 0, err
		}
		if graph.IsLoss(op) {
			return float64(out[0].F[0]) / float64(at.micros), nil
		}
	case plans.Input:
		b := writes[0]
		from := t.Offset + fi.Micro*p.MicroBatch
		return 0, feedInput(x.feed, x.r.tokens[t.ID], x.r.iteration+it, from, p.MicroBatch, b.F, b.I)
	case plans.Transfer:
		if !x.r.rk.local(p.Registers[t.Writes[0]].Device) {
			return 0, x.sendTransfer(f, it, reads[0])
		}
		if dst := t.Writes[0]; x.r.devs[p.Registers[dst].Device] == nil {
			return 0, x.r.toGPU(dst, p.Slot(dst, p.WriteVersion(dst, t.ID, it, fi.Micro)), reads[0])
		}
		if reads[0].I != nil {
			copy(writes[0].I, reads[0].I)
		} else {
			cpu.Copy(dev.pool, reads[0].F, writes[0].F)
		}
	case plans.Accumulate:
		scale := 1 / float32(p.Fires(t.ID))
		if fi.Micro == 0 {
			cpu.Scale(dev.pool, scale, reads[0].F, writes[0].F)
		} else {
			cpu.Axpy(dev.pool, scale, reads[0].F, writes[0].F)
		}
	case plans.AllReduce:
		if t.Sum { // out of place: each member's write starts as its read
			for i, w := range writes {
				if w.F != nil {
					cpu.Copy(dev.pool, reads[i].F, w.F)
				}
			}
		}
		if x.r.gpu != nil && x.r.gpu.hostRun[f] {
			return 0, x.r.allReduceHost(t, it, fi.Micro, writes)
		}
		if x.rr != nil && len(x.r.rk.active[f]) > 1 {
			return 0, x.allReduceRanks(t, f, it, reads, writes)
		}
		allReduce(dev.pool, writes, p.AllReduceWeights(t))
	case plans.Pack:
		bucketCopy(dev.pool, p, t, writes[0].F, reads)
	case plans.Unpack:
		bucketCopy(dev.pool, p, t, reads[0].F, writes)
	case plans.AllGather, plans.ReduceScatter:
		if x.rr != nil && len(x.r.rk.active[f]) > 1 {
			return 0, x.allReduceRanks(t, f, it, reads, writes)
		}
		return 0, splitCollective(dev.pool, p, t, reads, writes)
	default:
		return 0, fmt.Errorf("unknown task kind %q", t.Kind)
	}
	return 0, nil
}

// bucketCopy copies pack or unpack task t's gradients into its bucket
// (pack), or the bucket into them, piece by piece (plans.BucketPieces).
func bucketCopy(pool *cpu.Pool, p *plans.Plan, t *plans.Task, bucket []float32, grads []Buffer) {
	for _, pc := range p.BucketPieces(t) {
		g, b := grads[pc.Grad].F[pc.From:pc.From+pc.N], bucket[pc.At:pc.At+pc.N]
		if t.Kind == plans.Pack {
			cpu.Copy(pool, g, b)
		} else {
			cpu.Copy(pool, b, g)
		}
	}
}

// splitCollective runs an all-gather or a reduce-scatter, of a
// tensor-parallel group (a sum) or of ZeRO over the replicas (a mean, as
// the gradient all-reduce's): ins are the members' reads, outs their
// writes (nil for a member on another rank, which computes its own). Sums
// add the members in order, so every member and every run gets the same
// bits.
func splitCollective(pool *cpu.Pool, p *plans.Plan, t *plans.Task, ins, outs []Buffer) error {
	n := len(t.Writes)
	weights := p.AllReduceWeights(t) // a reduce-scatter's: ZeRO's replicas' weighted mean (nil: the plain mean); a group's sum: ones
	for i, in := range ins {
		if in.F == nil {
			return fmt.Errorf("runtime: %s lacks member %d's %s", t.Name, i, p.Registers[t.Reads[i].Reg].Name)
		}
	}
	for i, out := range outs {
		if out.F == nil {
			continue
		}
		switch t.Kind {
		case plans.AllGather:
			whole := p.Registers[t.Writes[i]].Spec.Shape
			for j, in := range ins {
				graph.Place(graph.SeqShard(whole, t.Axis, n, j), in.F, out.F)
			}
		case plans.ReduceScatter:
			part := graph.SeqShard(p.Registers[t.Reads[i].Reg].Spec.Shape, t.Axis, n, i)
			graph.Take(part, ins[0].F, out.F)
			tmp := make([]float32, len(out.F))
			if weights != nil {
				cpu.Scale(pool, float32(weights[0]), out.F, out.F)
			}
			for j, in := range ins[1:] {
				graph.Take(part, in.F, tmp)
				if weights != nil {
					cpu.Axpy(pool, float32(weights[j+1]), tmp, out.F)
				} else {
					cpu.Add(pool, out.F, tmp, out.F)
				}
			}
			if weights == nil {
				cpu.Scale(pool, 1/float32(n), out.F, out.F)
			}
		}
	}
	return nil
}

// allReduce replaces every buffer by the mean of all, or with weights (see
// plans.Plan.AllReduceWeights) by their weighted sum, as reduce computes
// it, so that every replica gets the same bits.
func allReduce(p *cpu.Pool, bufs []Buffer, weights []float64) {
	fs := make([][]float32, len(bufs))
	for i, b := range bufs {
		fs[i] = b.F
	}
	reduce(p, fs, weights)
	for _, b := range fs[1:] {
		cpu.Copy(p, fs[0], b)
	}
}

// reduce sets bufs[0] to the mean of bufs, or with weights to their
// weighted sum, adding them in order. Each element is computed alone, so
// a range of elements reduced apart (an all-reduce's chunk on a rank) gets
// the bits the whole gets.
func reduce(p *cpu.Pool, bufs [][]float32, weights []float64) {
	acc := bufs[0]
	if weights == nil {
		for _, b := range bufs[1:] {
			cpu.Add(p, acc, b, acc)
		}
		cpu.Scale(p, 1/float32(len(bufs)), acc, acc)
		return
	}
	cpu.Scale(p, float32(weights[0]), acc, acc)
	for i, b := range bufs[1:] {
		cpu.Axpy(p, float32(weights[i+1]), b, acc)
	}
}
