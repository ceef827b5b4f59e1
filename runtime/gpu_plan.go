package runtime

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

// lossCap is the number of iterations of losses kept on a GPU before the
// host reads them.
const lossCap = 1024

// gpuPlan is the CUDA side of a PlanRunner: the plan's GPU devices, their
// arenas and streams, and the events that carry the plan's edges between
// streams.
//
// A GPU stream's goroutine does not run its firings: it enqueues them, so
// "done" for a GPU firing means issued. Edges are then honoured on the GPU:
// a consumer on another GPU stream waits for the producer's end event
// (cuStreamWaitEvent), a consumer on a CPU stream synchronizes on it, and
// a GPU consumer of a CPU producer is enqueued only after the producer has
// finished. Each firing has a ring of events, one per iteration in flight;
// a stream may start iteration i only when every firing has been issued
// for iteration i−2, which bounds how far ahead any stream runs and so
// which ring slots can be in use (see ringSize).
type gpuPlan struct {
	devs    []*GPU          // by plan device; nil for CPU devices
	arena   []cu.DevicePtr  // by plan device
	work    []cu.DevicePtr  // by plan device: scratch for convolutions and attention
	streams []*cu.Stream    // by plan stream; nil on CPU devices
	host    []*cu.Stream    // by plan device: copies the host makes synchronously
	pinned  []cu.HostBuffer // the CPU devices' arenas, the mirrors

	ring       int
	start, end [][]*cu.Event // by firing, by ring slot
	base       *cu.Event     // time zero of a run's GPU events
	baseAt     time.Duration // host time of base, since the run's start

	iters     cu.DevicePtr // int64 iteration numbers itersBase…itersBase+itersCap−1, for eager runs
	itersCap  int
	itersBase int
	counter   cu.DevicePtr // int64 iteration counter advanced by graph replays

	lossIdx  []int        // by firing: index among GPU loss firings, or −1
	nloss    int          // GPU loss firings per iteration
	lossHist cu.DevicePtr // float32 [lossCap][nloss]

	pools   map[*SyntheticFeeder]*devicePool
	staging [][]cu.HostBuffer // by firing, by ring slot: host-fed inputs, made on first use by the firing's stream

	// All-reduces over a GPU and CPU devices run on the host (see
	// PlanRunner.allReduceHost): by firing, whether it is one; by GPU register
	// such an all-reduce writes, its page-locked copy on the host.
	hostRun []bool
	mirror  map[int]cu.HostBuffer

	graph     *gpuGraph   // captured iteration, for GPU-only plans
	rates     *rateTables // the captured graph's scheduled learning rates, made by its first capture
	warm      bool        // an iteration has run once before capturing (see warmUp)
	capturing bool        // enqueues are being captured: nothing may synchronize
}

// devicePool is a synthetic feeder's sample pool copied to the GPU: rows
// samples of rowLen values each, inputs (images, or a language model's
// token ids) and labels (one a sample, or one a token).
type devicePool struct {
	images, tokens, labels cu.DevicePtr
	rows, rowLen           int
	perLabels              int // labels a sample
	batch                  int
}

// free frees the pool's device memory.
func (dp *devicePool) free(ctx *cu.Context) error {
	var errs []error
	for _, ptr := range []cu.DevicePtr{dp.images, dp.tokens, dp.labels} {
		if ptr != 0 {
			errs = append(errs, ctx.Free(ptr))
		}
	}
	return errors.Join(errs...)
}

// ringSize is the number of event slots a firing needs: a consumer waits
// for iteration i−Δ of a producer that may already have been issued for
// iteration i+1.
func ringSize(edges []plans.Edge) int {
	d := 0
	for _, e := range edges {
		d = max(d, e.Delta)
	}
	return d + 3
}

// isGPU reports whether plan device d is a GPU.
func isGPU(d plans.Device) bool {
	spec, ok := topology.Lookup(d.Type)
	return ok && spec.Class == topology.GPU
}

// newGPUPlan takes the plan's GPU devices (the first GPU device of the plan
// on CUDA device 0, and so on), allocates their arenas, streams and events.
// gpus, if given, supplies the devices in that order; otherwise they are
// the process's shared ones (see sharedGPU).
func newGPUPlan(p *plans.Plan, edges []plans.Edge, gpus []*GPU) (_ *gpuPlan, err error) {
	g := &gpuPlan{devs: make([]*GPU, len(p.Devices)), arena: make([]cu.DevicePtr, len(p.Devices)),
		work: make([]cu.DevicePtr, len(p.Devices)), host: make([]*cu.Stream, len(p.Devices)),
		streams: make([]*cu.Stream, len(p.Streams)), ring: ringSize(edges), pools: map[*SyntheticFeeder]*devicePool{}}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	ordinal := 0
	for i, d := range p.Devices {
		if !isGPU(d) {
			continue
		}
		var dev *GPU
		if ordinal < len(gpus) {
			dev = gpus[ordinal]
		} else if dev, err = sharedGPU(ordinal); err != nil {
			return nil, fmt.Errorf("runtime: plan device %s (%s): %w", d.Name, d.Type, err)
		}
		if got := dev.CatalogType(); got != canonicalType(d.Type) {
			return nil, fmt.Errorf("runtime: plan device %s is a %s, but CUDA device %d is %s (%q): compile the plan for this GPU",
				d.Name, d.Type, ordinal, dev.Info().Name, got)
		}
		ordinal++
		g.devs[i] = dev
		if g.arena[i], err = dev.ctx.Malloc(max(p.Memory[i].Peak, 256)); err != nil {
			return nil, fmt.Errorf("runtime: plan device %s: arena of %v: %w", d.Name, p.Memory[i].Peak, err)
		}
		if g.host[i], err = dev.ctx.NewStream(); err != nil {
			return nil, err
		}
		var ws units.Bytes
		for t := range p.Tasks {
			if p.Streams[p.Tasks[t].Streams[0]].Device != i || p.Tasks[t].Op == nil {
				continue
			}
			op, err := graph.DecodeOp(*p.Tasks[t].Op)
			if err != nil {
				return nil, err
			}
			var in []graph.Spec
			for _, u := range p.Tasks[t].Reads {
				in = append(in, p.Registers[u.Reg].Spec)
			}
			if err := gpuCheck(op, in); err != nil {
				return nil, fmt.Errorf("runtime: task %s on %s: %w", p.Tasks[t].Name, d.Name, err)
			}
			ws = max(ws, workspace(op, in))
		}
		if ws > 0 {
			if g.work[i], err = dev.ctx.Malloc(ws); err != nil {
				return nil, fmt.Errorf("runtime: plan device %s: workspace of %v: %w", d.Name, ws, err)
			}
		}
	}
	first := g.firstGPU()
	if first == nil {
		return nil, errors.New("runtime: plan has no GPU device")
	}
	for s, st := range p.Streams {
		if dev := g.devs[st.Device]; dev != nil {
			if g.streams[s], err = dev.ctx.NewStream(); err != nil {
				return nil, err
			}
			// cuBLAS's workspaces for the stream, allocated now rather than
			// inside a graph capture.
			if err := dev.prepare(g.streams[s]); err != nil {
				return nil, err
			}
		}
	}
	g.hostRun = make([]bool, len(p.Firings))
	g.mirror = map[int]cu.HostBuffer{}
	for f, fi := range p.Firings {
		t := &p.Tasks[fi.Task]
		if t.Kind != plans.AllReduce || g.streams[t.Streams[0]] == nil {
			continue
		}
		g.hostRun[f] = true
		for _, w := range t.Writes {
			rg := &p.Registers[w]
			if g.devs[rg.Device] == nil || g.mirror[w].Ptr != nil {
				continue
			}
			h, err := g.devs[rg.Device].ctx.MallocHost(max(rg.Spec.Bytes(), 4))
			if err != nil {
				return nil, fmt.Errorf("runtime: host copy of %s: %w", rg.Name, err)
			}
			g.pinned = append(g.pinned, h)
			g.mirror[w] = h
		}
	}
	g.start = make([][]*cu.Event, len(p.Firings))
	g.end = make([][]*cu.Event, len(p.Firings))
	g.lossIdx = make([]int, len(p.Firings))
	for f, fi := range p.Firings {
		g.lossIdx[f] = -1
		t := &p.Tasks[fi.Task]
		dev := g.devs[p.Streams[t.Streams[0]].Device]
		if dev == nil || g.hostRun[f] {
			continue
		}
		for range g.ring {
			s, err := dev.ctx.NewEvent(true)
			if err != nil {
				return nil, err
			}
			e, err := dev.ctx.NewEvent(true)
			if err != nil {
				return nil, err
			}
			g.start[f] = append(g.start[f], s)
			g.end[f] = append(g.end[f], e)
		}
		if t.Op != nil {
			if op, err := graph.DecodeOp(*t.Op); err == nil && graph.IsLoss(op) {
				g.lossIdx[f] = g.nloss
				g.nloss++
			}
		}
	}
	g.staging = make([][]cu.HostBuffer, len(p.Firings))
	if g.base, err = first.ctx.NewEvent(true); err != nil {
		return nil, err
	}
	if g.counter, err = first.ctx.Malloc(8); err != nil {
		return nil, err
	}
	if g.lossHist, err = first.ctx.Malloc(units.Bytes(4 * lossCap * max(g.nloss, 1))); err != nil {
		return nil, err
	}
	return g, nil
}

// canonicalType resolves a catalog alias ("H200-141") to its type.
func canonicalType(typ string) string {
	if spec, ok := topology.Lookup(typ); ok {
		return spec.Type
	}
	return typ
}

func (g *gpuPlan) firstGPU() *GPU {
	for _, d := range g.devs {
		if d != nil {
			return d
		}
	}
	return nil
}

// Close frees what newGPUPlan allocated.
func (g *gpuPlan) Close() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if g.graph != nil {
		keep(g.graph.Close())
	}
	for f := range g.start {
		for k := range g.start[f] {
			keep(g.start[f][k].Destroy())
			keep(g.end[f][k].Destroy())
		}
	}
	for _, s := range g.streams {
		if s != nil {
			keep(s.Destroy())
		}
	}
	for i, d := range g.devs {
		if d == nil {
			continue
		}
		if g.host[i] != nil {
			keep(g.host[i].Destroy())
		}
		if g.arena[i] != 0 {
			keep(d.ctx.Free(g.arena[i]))
		}
		if g.work[i] != 0 {
			keep(d.ctx.Free(g.work[i]))
		}
	}
	if first := g.firstGPU(); first != nil {
		for _, h := range g.pinned {
			keep(first.ctx.FreeHost(h))
		}
		for _, hs := range g.staging {
			for _, h := range hs {
				keep(first.ctx.FreeHost(h))
			}
		}
		for _, ptr := range []cu.DevicePtr{g.iters, g.counter, g.lossHist} {
			if ptr != 0 {
				keep(first.ctx.Free(ptr))
			}
		}
		for _, dp := range g.pools {
			keep(dp.free(first.ctx))
		}
		keep(g.rates.free(g))
		if g.base != nil {
			keep(g.base.Destroy())
		}
	}
	return errors.Join(errs...)
}

// ptr returns the device address of slot k of register reg.
func (r *PlanRunner) ptr(reg, k int) cu.DevicePtr {
	rg := &r.p.Registers[reg]
	return r.gpu.arena[rg.Device] + cu.DevicePtr(rg.Offset+units.Bytes(k)*rg.SlotBytes)
}

// upload copies host values into a GPU register slot, converting floats to
// the register's dtype.
func (r *PlanRunner) upload(reg, k int, b Buffer) error {
	rg := &r.p.Registers[reg]
	g := r.gpu
	s := g.host[rg.Device]
	var src unsafe.Pointer
	switch {
	case b.I != nil:
		src = unsafe.Pointer(unsafe.SliceData(b.I))
	case rg.Spec.DType == graph.BF16:
		h := make([]uint16, len(b.F))
		for i, v := range b.F {
			h[i] = cu.BF16FromFloat32(v)
		}
		src = unsafe.Pointer(unsafe.SliceData(h))
		defer func() { _ = h[0] }() // keep h alive through the copy
	default:
		src = unsafe.Pointer(unsafe.SliceData(b.F))
	}
	if rg.Spec.Bytes() == 0 {
		return nil
	}
	if err := s.CopyHtoD(r.ptr(reg, k), src, rg.Spec.Bytes()); err != nil {
		return err
	}
	return s.Synchronize()
}

// download copies a GPU register slot to the host as floats (or ints).
func (r *PlanRunner) download(reg, k int) (Buffer, error) {
	rg := &r.p.Registers[reg]
	s := r.gpu.host[rg.Device]
	b := newBuffer(rg.Spec)
	n := rg.Spec.Bytes()
	if n == 0 {
		return b, nil
	}
	var err error
	switch {
	case b.I != nil:
		err = copyBack(s, unsafe.Pointer(unsafe.SliceData(b.I)), r.ptr(reg, k), n)
	case rg.Spec.DType == graph.BF16:
		h := make([]uint16, len(b.F))
		err = copyBack(s, unsafe.Pointer(unsafe.SliceData(h)), r.ptr(reg, k), n)
		for i, v := range h {
			b.F[i] = cu.Float32FromBF16(v)
		}
	default:
		err = copyBack(s, unsafe.Pointer(unsafe.SliceData(b.F)), r.ptr(reg, k), n)
	}
	return b, err
}

func copyBack(s *cu.Stream, dst unsafe.Pointer, src cu.DevicePtr, n units.Bytes) error {
	if err := s.CopyDtoH(dst, src, n); err != nil {
		return err
	}
	return s.Synchronize()
}

// onGPU reports whether firing f is enqueued on a GPU stream: its home
// stream is on a GPU, and it is not an all-reduce the host runs.
func (r *PlanRunner) onGPU(f int) bool {
	return r.gpu != nil && r.gpu.streams[r.p.Tasks[r.p.Firings[f].Task].Streams[0]] != nil && !r.gpu.hostRun[f]
}

// streamOf is firing f's home stream.
func (r *PlanRunner) streamOf(f int) int { return r.p.Tasks[r.p.Firings[f].Task].Streams[0] }

// devicePoolOf returns feed's sample pool on the GPU, copying it there on
// first use.
func (g *gpuPlan) devicePoolOf(feed *SyntheticFeeder) (*devicePool, error) {
	if dp, ok := g.pools[feed]; ok {
		return dp, nil
	}
	first := g.firstGPU()
	s := g.host[g.firstIndex()]
	dp := &devicePool{rows: len(feed.labels), rowLen: feed.sample, perLabels: 1, batch: feed.batch}
	if feed.tokens != nil {
		dp.rows, dp.perLabels = len(feed.tokens)/feed.sample, feed.sample
	}
	put := func(v []int32, f []float32) (cu.DevicePtr, error) {
		if v == nil && f == nil {
			return 0, nil
		}
		host, n := unsafe.Pointer(unsafe.SliceData(v)), len(v)
		if f != nil {
			host, n = unsafe.Pointer(unsafe.SliceData(f)), len(f)
		}
		ptr, err := first.ctx.Malloc(units.Bytes(4 * n))
		if err != nil {
			return 0, err
		}
		return ptr, s.CopyHtoD(ptr, host, units.Bytes(4*n))
	}
	var err error
	if dp.images, err = put(nil, feed.images); err == nil {
		if dp.tokens, err = put(feed.tokens, nil); err == nil {
			dp.labels, err = put(feed.labels, nil)
		}
	}
	if err == nil {
		err = s.Synchronize()
	}
	if err != nil {
		return nil, errors.Join(err, dp.free(first.ctx))
	}
	g.pools[feed] = dp
	return dp, nil
}

func (g *gpuPlan) firstIndex() int {
	for i, d := range g.devs {
		if d != nil {
			return i
		}
	}
	return -1
}

// iterationNumbers makes sure the device holds the iteration numbers
// base…base+n−1 that a run's eager firings point their kernels at (the
// run's iteration i at g.iters + 8i).
func (g *gpuPlan) iterationNumbers(base, n int) error {
	if n <= g.itersCap && base == g.itersBase {
		return nil
	}
	first := g.firstGPU()
	if n > g.itersCap && g.iters != 0 {
		if err := first.ctx.Free(g.iters); err != nil {
			return err
		}
		g.iters, g.itersCap = 0, 0
	}
	if g.iters == 0 {
		ptr, err := first.ctx.Malloc(units.Bytes(8 * n))
		if err != nil {
			return err
		}
		g.iters, g.itersCap = ptr, n
	}
	v := make([]int64, g.itersCap)
	for i := range v {
		v[i] = int64(base + i)
	}
	if err := g.setInts(g.iters, v); err != nil {
		return err
	}
	g.itersBase = base
	return nil
}

// setInts copies v to the device at ptr, synchronously.
func (g *gpuPlan) setInts(ptr cu.DevicePtr, v []int64) error {
	s := g.host[g.firstIndex()]
	if err := s.CopyHtoD(ptr, unsafe.Pointer(unsafe.SliceData(v)), units.Bytes(8*len(v))); err != nil {
		return err
	}
	return s.Synchronize()
}

// eventTime converts a GPU event to the run's clock.
func (g *gpuPlan) eventTime(e *cu.Event) (trace.Time, error) {
	d, err := cu.Elapsed(g.base, e)
	if err != nil {
		return 0, err
	}
	return trace.Time(g.baseAt + d), nil
}

// gpuSupported says what a plan with GPUs asks that this runtime cannot
// do yet.
func gpuSupported(p *plans.Plan) error {
	hasCPU := false
	for _, d := range p.Devices {
		hasCPU = hasCPU || !isGPU(d)
	}
	gpus := 0
	for _, d := range p.Devices {
		if isGPU(d) {
			gpus++
		}
	}
	if gpus > 1 {
		return fmt.Errorf("runtime: the plan uses %d GPUs: plans over several GPUs are not supported yet (one GPU, with or without CPU devices)", gpus)
	}
	if p.TPDegree() > 1 {
		return fmt.Errorf("runtime: the plan is tensor-parallel (tp=%d): tensor parallelism runs on CPU devices only so far", p.TPDegree())
	}
	if p.Zero > 0 {
		split := [...]string{1: "optimizer state", 2: "optimizer state and gradients", 3: "optimizer state, gradients and weights"}
		return fmt.Errorf("runtime: plan %s splits %s over its replicas (zero=%d): ZeRO runs on CPU devices only so far", p.Strategy, split[min(p.Zero, 3)], p.Zero)
	}
	if hasCPU {
		for _, r := range p.Registers {
			if r.Spec.DType.Size() == 2 {
				return fmt.Errorf("runtime: register %s is %s: plans placing 2-byte dtypes on GPUs and CPUs together are not supported (the CPU computes them in f32)", r.Name, r.Spec.DType)
			}
		}
	}
	return nil
}

// shared holds the process's GPUs, opened on first use and kept open: a
// device's context, cuBLAS handle and loaded kernels serve every runner.
var shared struct {
	sync.Mutex
	gpus map[int]*GPU
}

// sharedGPU returns CUDA device ordinal, opened once per process.
func sharedGPU(ordinal int) (*GPU, error) {
	shared.Lock()
	defer shared.Unlock()
	if g, ok := shared.gpus[ordinal]; ok {
		return g, nil
	}
	g, err := OpenGPU(ordinal)
	if err != nil {
		return nil, err
	}
	if shared.gpus == nil {
		shared.gpus = map[int]*GPU{}
	}
	shared.gpus[ordinal] = g
	return g, nil
}
