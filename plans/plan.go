package plans

import (
	"sync"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Version is the plan file format's version. 2 (2026-11-30) added the
// all-gather and reduce-scatter tasks (sequence parallelism, ZeRO),
// interleaved stages, ZeRO's master parts, and plans listing one rank or
// replica for several, which a reader of version 1 would misread. ZeRO
// stages 2 and 3 use version 2's fields; a reader that knows stages 0 and
// 1 only refuses their plans by the stage. 3 (2026-11-30) writes plans
// compactly (file.go): the firings implied by the tasks, stream orders as
// runs over micro-batches. Task.Rounds (2026-12-01, ZeRO stages 2 and 3
// over uneven replicas) kept version 3: a plan without it reads as
// before, and a reader without it refuses the field. So did the pack and
// unpack tasks of gradient buckets and their Task.Parts (2026-12-02,
// Strategy.Bucket): a reader without them refuses their kind and field.
const Version = 3

// Plan is a compiled training iteration: everything the simulator and the
// runtime need, and nothing either decides for itself.
type Plan struct {
	Version    int    `json:"version"`
	Model      string `json:"model"`
	Strategy   string `json:"strategy"`
	Batch      int    `json:"batch"`         // global samples per iteration
	MicroBatch int    `json:"micro_batch"`   // samples per micro-batch
	MB         int    `json:"micro_batches"` // per replica; with Shares, the largest share
	// Shares, in a plan of uneven data parallelism, are the micro-batches
	// each replica runs per iteration (all of MicroBatch samples; replica r
	// takes the batch's micro-batches FirstMicro(r) onwards). Absent, every
	// replica runs MB.
	Shares []int `json:"replica_micro_batches,omitempty"`
	DP     int   `json:"replicas"`                 // data-parallel replicas
	PP     int   `json:"stages"`                   // pipeline stages
	VPP    int   `json:"virtual_stages,omitempty"` // model stages per pipeline stage under an interleaved schedule (Strategy.VPP)
	Zero   int   `json:"zero,omitempty"`           // ZeRO stage (Strategy.Zero)
	// SharedTP says the plan lists the tasks, registers and streams of
	// tensor-parallel rank 0 only, which every rank of its group runs
	// alike (Config.SharedTP): for the simulator, which prices each group
	// collective over the whole group; the runtime refuses it.
	SharedTP bool `json:"tp_shared,omitempty"`
	// SharedDP says the plan lists data-parallel replica 0 only, which
	// every replica runs alike (Config.SharedDP); collectives over the
	// replicas are priced over all of them.
	SharedDP bool `json:"dp_shared,omitempty"`
	// TP is the tensor-parallel degree (absent: 1): every stage of every
	// replica runs on TP devices. Device (replica·PP + stage)·TP + rank is
	// the given rank of a stage's group (see Replica, Stage, TPRank).
	TP        int        `json:"tensor_parallel,omitempty"`
	Optimizer string     `json:"optimizer"`
	Seed      uint64     `json:"seed"` // initial weights: see runtime.Store
	Cluster   string     `json:"cluster"`
	Devices   []Device   `json:"devices"`
	Streams   []Stream   `json:"-"` // in a file, as runs (file.go)
	Tasks     []Task     `json:"tasks"`
	Registers []Register `json:"registers"`
	// Firings lists one iteration's task executions; stream orders and
	// dependency edges refer to them by index. A file lists only those
	// with an After: the tasks imply the rest (file.go).
	Firings []Firing `json:"-"`
	Memory  []Memory `json:"memory"` // per device
	// Images and Labels are the global batch's inputs, for feeders:
	// the model's input (images for a classifier) and its labels (the
	// zero Spec for a model without labels).
	Images graph.Spec `json:"images"`
	Labels graph.Spec `json:"labels,omitzero"`

	derive     sync.Mutex // guards the fields below, derived once
	deps       []Edge     // see Deps
	depRules   []rule     // why each of deps exists
	categories []Category // see Categories
}

// DType is the dtype of the model's float tensors: its inputs', unless
// they are token ids, else its first float register's.
func (p *Plan) DType() graph.DType {
	if p.Images.DType.IsFloat() {
		return p.Images.DType
	}
	for _, r := range p.Registers {
		if r.Spec.DType.IsFloat() {
			return r.Spec.DType
		}
	}
	return p.Images.DType
}

// TPDegree is the tensor-parallel degree, at least 1.
func (p *Plan) TPDegree() int { return max(p.TP, 1) }

// Replica is the data-parallel replica device d belongs to.
func (p *Plan) Replica(d int) int { return d / p.TPDegree() / p.PP }

// Stage is the pipeline stage device d runs.
func (p *Plan) Stage(d int) int { return d / p.TPDegree() % p.PP }

// Listed returns the device whose tasks device d runs: d itself, or under
// SharedTP and SharedDP its counterpart of rank 0 and replica 0.
func (p *Plan) Listed(d int) int {
	if p.SharedDP {
		d -= p.Replica(d) * p.PP * p.TPDegree()
	}
	if p.SharedTP {
		d -= p.TPRank(d)
	}
	return d
}

// TPRank is device d's rank in its tensor-parallel group.
func (p *Plan) TPRank(d int) int { return d % p.TPDegree() }

// split is the plan's division of an iteration's micro-batches over its
// replicas, as a strategy states it.
func (p *Plan) split() Strategy { return Strategy{DP: p.DP, MB: p.MB, Shares: p.Shares} }

// Micros is the number of micro-batches replica r runs per iteration.
func (p *Plan) Micros(r int) int { return p.split().Micros(r) }

// TotalMicros is the number of micro-batches of an iteration, over all
// replicas: the global batch is TotalMicros·MicroBatch samples.
func (p *Plan) TotalMicros() int { return p.split().TotalMicros() }

// FirstMicro is the index, among the iteration's micro-batches, of replica
// r's micro-batch 0.
func (p *Plan) FirstMicro(r int) int {
	if p.Shares != nil {
		n := 0
		for _, m := range p.Shares[:r] {
			n += m
		}
		return n
	}
	return r * p.MB
}

// AllReduceWeights are the weights of all-reduce task t's writes (one
// replica's register each): the replica's share of the batch, so that the
// weighted sum of the replicas' mean gradients is the batch's mean
// gradient. Nil when the replicas are even: the all-reduce is the plain
// mean. All ones for a tensor-parallel sum (Task.Sum).
func (p *Plan) AllReduceWeights(t *Task) []float64 {
	if t.Sum {
		w := make([]float64, len(t.Writes))
		for i := range w {
			w[i] = 1
		}
		return w
	}
	if p.Shares == nil {
		return nil
	}
	w := make([]float64, len(t.Writes))
	total := float64(p.TotalMicros())
	for i, r := range t.Writes {
		m := p.Micros(p.Replica(p.Registers[r].Device)) // a replica's mean over its micro-batches
		if t.Rounds {
			m = p.MB // a round's micro-batch (or zeros, see Idle), which the accumulations average over the MB rounds
		}
		w[i] = float64(m) / total
	}
	return w
}

// Fires is the number of times task t fires per iteration: once, once
// per micro-batch of its replica, or once per round (Task.Rounds).
func (p *Plan) Fires(t int) int {
	task := &p.Tasks[t]
	switch {
	case !task.PerMicro:
		return 1
	case task.Rounds:
		return p.MB
	}
	return p.Micros(task.Replica)
}

// Idle reports whether read u of task t's firing of round micro reads
// nothing: t fires once per round (Task.Rounds) and u reads, per
// micro-batch, a register of a replica that has no micro-batch in that
// round (it runs fewer than MB). Such a member of a reduce-scatter
// contributes zeros.
func (p *Plan) Idle(t *Task, u Use, micro int) bool {
	return t.Rounds && u.Mode == ReadMicro && micro >= p.WritesPerIteration(u.Reg)
}

// Device is a device the plan was compiled for.
type Device struct {
	Name    string      `json:"name"`
	Type    string      `json:"type"`    // catalog type, the cost model's key
	Workers int         `json:"workers"` // CPU devices: worker goroutines (cores)
	Memory  units.Bytes `json:"memory"`  // capacity
	// Host names the machine whose memory system the device shares with
	// the plan's other devices of that host ("" if unknown).
	Host string `json:"host,omitempty"`
}

// IsCPU says whether d is of a CPU type of the catalog: a device whose
// Workers are the cores it takes.
func (d Device) IsCPU() bool {
	spec, ok := topology.Lookup(d.Type)
	return ok && spec.Class == topology.CPU
}

// CPUCores returns the cores p's CPU devices take, by host, and how many
// CPU devices there are.
func (p *Plan) CPUCores() (byHost map[string]int, devices int) {
	byHost = map[string]int{}
	for _, d := range p.Devices {
		if d.IsCPU() {
			byHost[d.Host] += d.Workers
			devices++
		}
	}
	return byHost, devices
}

// Stream is an in-order queue of work on one device.
type Stream struct {
	Device int    `json:"device"`
	Name   string `json:"name"`  // "compute", "coll", "p2p>dev1", "input"
	Order  []int  `json:"order"` // firings, once per iteration, in order
}

// TaskKind is what a task does.
type TaskKind string

const (
	Compute    TaskKind = "compute"    // a graph op's kernel
	Input      TaskKind = "input"      // loads a micro-batch slice of the global inputs
	Transfer   TaskKind = "transfer"   // copies a register to another device
	Accumulate TaskKind = "accumulate" // acc = g/M (first firing) or acc += g/M, M its firings per iteration (Plan.Fires): the replica's micro-batches, or the rounds
	AllReduce  TaskKind = "allreduce"  // mean of a register over the data-parallel replicas, see Plan.AllReduceWeights; or a tensor-parallel sum (Task.Sum)
	// AllGather is a tensor-parallel group's all-gather under sequence
	// parallelism (graph.TPGather): each member's write is the members'
	// reads concatenated along Task.Axis.
	AllGather TaskKind = "allgather"
	// ReduceScatter is a tensor-parallel group's reduce-scatter under
	// sequence parallelism (graph.TPScatter): member i's write is part i
	// along Task.Axis of the sum of the members' reads.
	ReduceScatter TaskKind = "reducescatter"
	// Pack copies its reads, a replica's gradients, one after another
	// into its one write, flat: a bucket that one all-reduce reduces for
	// all of them (Strategy.Bucket), or that one reduce-scatter splits
	// (see Task.Parts). Unpack copies its one read, the reduced bucket,
	// out into its writes, in the same order: the reduced gradients, which
	// the updates read, or under ZeRO the replicas' parts of them, or the
	// weights an all-gather of their updated parts made whole.
	Pack   TaskKind = "pack"
	Unpack TaskKind = "unpack"
)

// BucketPiece is a contiguous range of elements that a Pack or Unpack
// copies between one of its gradients and its bucket.
type BucketPiece struct {
	Grad int // the gradient's index among the task's (a Pack's reads, an Unpack's writes)
	From int // the range's first element in the gradient
	At   int // and in the bucket
	N    int // its elements
}

// BucketPieces lists what Pack or Unpack task t copies, in the bucket's
// order: each gradient whole, one after another, or with Task.Parts piece
// i of every gradient in turn, a gradient's pieces its Parts equal ranges.
func (p *Plan) BucketPieces(t *Task) []BucketPiece {
	grads := t.Writes
	if t.Kind == Pack {
		grads = make([]int, len(t.Reads))
		for i, u := range t.Reads {
			grads[i] = u.Reg
		}
	}
	parts := max(t.Parts, 1)
	pieces := make([]BucketPiece, 0, parts*len(grads))
	at := 0
	for k := range parts {
		for i, r := range grads {
			n := p.Registers[r].Spec.Shape.NumElements() / parts
			pieces = append(pieces, BucketPiece{Grad: i, From: k * n, At: at, N: n})
			at += n
		}
	}
	return pieces
}

// kinds are the task kinds a plan may hold.
var kinds = []TaskKind{Compute, Input, Transfer, Accumulate, AllReduce, AllGather, ReduceScatter, Pack, Unpack}

// Collective reports whether tasks of kind k communicate among a group,
// each member on one stream of its device (Task.Streams[i] is member i's):
// AllReduce, AllGather and ReduceScatter.
func (k TaskKind) Collective() bool { return k == AllReduce || k == AllGather || k == ReduceScatter }

// FiringsAs is the number of firings per iteration p would have listing
// one rank for each tensor-parallel group only if sharedTP, and one
// replica for all only if sharedDP: under SharedTP and SharedDP a task
// stands for its peers' (a tensor-parallel group's collective, Task.Sum,
// for the replicas' only; the replicas' collectives for the ranks' only).
func (p *Plan) FiringsAs(sharedTP, sharedDP bool) int {
	n := 0
	for t := range p.Tasks {
		task, k := &p.Tasks[t], p.Fires(t)
		collective := task.Kind.Collective()
		if p.SharedTP && !sharedTP && !(collective && task.Sum) {
			k *= p.TPDegree()
		}
		if p.SharedDP && !sharedDP && !(collective && !task.Sum) {
			k *= p.DP
		}
		n += k
	}
	return n
}

// ReadMode says which write of a register an input reads.
type ReadMode string

const (
	// ReadMicro reads the write of the reader's own micro-batch.
	ReadMicro ReadMode = "micro"
	// ReadFinal reads the last write of the current iteration.
	ReadFinal ReadMode = "final"
	// ReadPrev reads the last write of the previous iteration (for
	// iteration 0, the register's initial value).
	ReadPrev ReadMode = "prev"
)

// Use is a task's access to a register.
type Use struct {
	Reg  int      `json:"reg"`
	Mode ReadMode `json:"mode,omitempty"` // for reads
}

// Task is an actor: it fires once per micro-batch (PerMicro) or once per
// iteration, on the streams it occupies (the first is its home).
type Task struct {
	ID       int           `json:"id"`
	Name     string        `json:"name"`
	Kind     TaskKind      `json:"kind"`
	Phase    string        `json:"phase"` // forward, backward, update, comm, input
	Stage    int           `json:"stage"`
	Replica  int           `json:"replica"`
	PerMicro bool          `json:"per_micro"`
	Streams  []int         `json:"streams"`
	Op       *graph.OpJSON `json:"op,omitempty"` // Compute
	// Reads are the registers read; for a compute task, its op's inputs in
	// order (including those it updates in place).
	Reads []Use `json:"reads"`
	// Writes are the registers written; InPlace marks read-modify-writes.
	Writes  []int `json:"writes"`
	InPlace bool  `json:"in_place,omitempty"`
	// Sum marks a tensor-parallel group's collective, once per
	// micro-batch, which adds the members' values: the all-reduce of
	// graph.TPSum (each member's write is the sum of all members' reads;
	// Reads[i] and Writes[i] are member i's), and sequence parallelism's
	// all-gathers and reduce-scatters. Without it a collective is over the
	// data-parallel replicas and reduces to their (weighted) mean (see
	// AllReduceWeights): the gradient all-reduces and ZeRO's
	// reduce-scatters and all-gathers, once per iteration; under ZeRO
	// stages 2 and 3 also once per round (Rounds: the reduce-scatter of
	// each micro-batch's gradient, and stage 3's gathers of the weights).
	Sum bool `json:"sum,omitempty"`
	// Rounds marks a per-micro-batch task that fires once per round, MB
	// times, whatever its replica's micro-batches: under ZeRO stages 2 and
	// 3, the collectives over the replicas that each micro-batch needs,
	// whose members must meet one for one, and each replica's
	// accumulation of its part of a reduce-scatter. Round m is every
	// replica's micro-batch m; where the replicas' micro-batches are
	// uneven, one that runs fewer has none in the last rounds and joins
	// their collectives without computing: it gives its part of the
	// weights to an all-gather (its gathered copy goes unread), and gets
	// its part of a reduce-scatter, to which it contributes zeros (see
	// Plan.Idle). Replica, for such a collective, is 0.
	Rounds bool `json:"rounds,omitempty"`
	// Axis is the axis an AllGather concatenates along and a
	// ReduceScatter splits.
	Axis int `json:"axis,omitempty"`
	// Parts lays a bucket out part by part (ZeRO's, Strategy.Bucket): for
	// a Pack whose bucket a reduce-scatter over Parts members splits, and
	// an Unpack of a bucket an all-gather over Parts members made, piece i
	// of every gradient (a Pack's reads, an Unpack's writes) in turn, then
	// piece i+1, a gradient's pieces being its Parts equal contiguous
	// ranges (its rows split along axis 0), so that member i's part of the
	// bucket holds its parts of every gradient or weight. 0: each whole,
	// one after another.
	Parts int `json:"parts,omitempty"`
	// Offset is, for an Input task, the sample index of its micro-batch 0
	// in the global batch.
	Offset int `json:"offset,omitempty"`
	// Work is the task's arithmetic and memory traffic, for the cost model.
	FLOPs units.FLOPs `json:"flops"`
	Bytes units.Bytes `json:"bytes"`
	// Key names the task's work (op, input specs, attributes) and Shape
	// encodes it as integers: the cost model's exact-shape lookup key.
	Key   string `json:"key"`
	Shape []int  `json:"shape"`
	// Family is Key with the micro-batch dimension left out: the same
	// work at any batch size, for interpolating calibrations.
	Family string `json:"family,omitempty"`
}

// Register is a task output: Slots buffers of one spec on one device,
// at Offset in the device's arena (slot k at Offset + k·SlotBytes).
type Register struct {
	ID        int         `json:"id"`
	Name      string      `json:"name"`
	Device    int         `json:"device"`
	Spec      graph.Spec  `json:"spec"`
	SlotBytes units.Bytes `json:"slot_bytes"`
	Slots     int         `json:"slots"`
	Offset    units.Bytes `json:"offset"`
	// Persistent registers (parameters, optimizer state) live across
	// iterations and are initialized from Init.
	Persistent bool       `json:"persistent,omitempty"`
	Init       graph.Init `json:"init"`
	// Master marks, under ZeRO stages 1 and 2, a replica's part of a
	// weight that it also holds whole (updated in the part, gathered into
	// the whole): a copy, which the whole stands for in a store. Under
	// stage 3 the part is the weight's only persistent copy, not a master.
	Master bool `json:"master,omitempty"`
	// Writers are the tasks writing the register, in the order their
	// writes happen within an iteration.
	Writers []int `json:"writers"`
}

// Bytes is the register's total size.
func (r *Register) Bytes() units.Bytes { return r.SlotBytes * units.Bytes(r.Slots) }

// Firing is one execution of a task within an iteration.
type Firing struct {
	Task  int `json:"task"`
	Micro int `json:"micro"` // -1 for per-iteration tasks
	// After lists firings of the same iteration that this one waits for
	// beyond what its registers and streams say: an order the compiler
	// imposes for memory, not data (ZeRO stage 3's prefetch, see
	// Strategy.Prefetch: a layer's gathers wait until an earlier layer's
	// gathered weights are released), as OneFlow's control registers do.
	After []int `json:"after,omitempty"`
}

// Memory is a device's planned memory.
type Memory struct {
	Device     int         `json:"device"`
	Peak       units.Bytes `json:"peak"`       // arena size
	Persistent units.Bytes `json:"persistent"` // of which parameters and state
	Unshared   units.Bytes `json:"unshared"`   // what the registers would take without reuse
}

// Edge is a dependency: firing To of iteration i may start only after
// firing From of iteration i−Delta has finished.
type Edge struct {
	From, To int
	Delta    int
}
