package plans

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/units"
)

// Config is what a plan is compiled from.
type Config struct {
	Model     string
	Batch     int // global samples per iteration
	Strategy  Strategy
	Optimizer graph.Optimizer
	Seed      uint64
	DType     graph.DType // of the model's float tensors (zero: f32)
	Cluster   string      // name, recorded in the plan
	Devices   []Device    // available devices; the plan takes the first DP·TP·PP, or those Strategy.Place names
	// SharedTP compiles tensor-parallel rank 0 only, for the simulator:
	// every rank of a group runs the same tasks on the same shapes, so the
	// plan lists one rank's (Plan.SharedTP), T times smaller. The runtime
	// does not execute such a plan.
	SharedTP bool
	// SharedDP compiles data-parallel replica 0 only, likewise: with even
	// micro-batches on replicas of the same device types, every replica
	// runs the same tasks (Plan.SharedDP).
	SharedDP bool
}

// Compile turns a model, a strategy and devices into a plan: it places the
// training graph's nodes on stages and replicas, inserts transfers,
// gradient accumulation and all-reduces, orders every stream by the
// schedule, sizes registers, derives the dependency edges (rejecting plans
// that can deadlock) and plans memory (rejecting plans that overflow a
// device).
func Compile(cfg Config) (*Plan, error) {
	c, err := newCompiler(cfg)
	if err != nil {
		return nil, err
	}
	return c.compile()
}

// newCompiler checks cfg, builds its model's training graph and places it
// on stages: everything before the plan's tasks.
func newCompiler(cfg Config) (*compiler, error) {
	st := cfg.Strategy
	if st.DP < 1 || st.PP < 1 || st.MB < 1 || st.TP < 0 {
		return nil, fmt.Errorf("%w: degrees must be ≥ 1, got dp=%d tp=%d pp=%d mb=%d", ErrInfeasible, st.DP, st.TP, st.PP, st.MB)
	}
	if n := st.Devices(); n > len(cfg.Devices) {
		return nil, fmt.Errorf("%w: %s needs %d devices, cluster %s has %d", ErrInfeasible, st, n, cfg.Cluster, len(cfg.Devices))
	}
	devices, err := st.PlaceDevices(cfg.Devices)
	if err != nil {
		return nil, err
	}
	if st.AutoShares || st.AutoLayers {
		return nil, fmt.Errorf("plans: strategy %s: the split of mb=auto or layers=auto is chosen by plans/search (flowsim plan does), not by the compiler", st)
	}
	if st.Shares != nil && (len(st.Shares) != st.DP || slices.Min(st.Shares) < 1 || slices.Max(st.Shares) != st.MB) {
		return nil, fmt.Errorf("%w: shares %v: want one count ≥ 1 per replica of dp=%d, the largest mb=%d", ErrInfeasible, st.Shares, st.DP, st.MB)
	}
	if st.Zero < 0 || st.Zero > 3 || st.Zero > 0 && st.DP < 2 {
		return nil, fmt.Errorf("%w: %s: zero=%d: want 0 to 3; ZeRO needs dp ≥ 2", ErrInfeasible, st, st.Zero)
	}
	if st.Prefetch < 0 || st.Prefetch > 0 && st.Zero != 3 {
		return nil, fmt.Errorf("%w: %s: prefetch=%d: want 0, or layers ahead ≥ 1 under zero=3", ErrInfeasible, st, st.Prefetch)
	}
	if cfg.Batch < 1 || cfg.Batch%st.TotalMicros() != 0 {
		if st.Shares != nil {
			return nil, fmt.Errorf("%w: batch %d does not split into mb=%s micro-batches of one size", ErrInfeasible, cfg.Batch, FormatCounts(st.Shares))
		}
		return nil, fmt.Errorf("%w: batch %d does not split into dp=%d replicas × mb=%d micro-batches", ErrInfeasible, cfg.Batch, st.DP, st.MB)
	}
	if cfg.Optimizer == nil {
		return nil, fmt.Errorf("plans: no optimizer")
	}
	micro := cfg.Batch / st.TotalMicros()
	m, err := zoo.Build(cfg.Model, zoo.Config{Batch: micro, Train: true, Seed: cfg.Seed, DType: cfg.DType, TP: st.TP, SP: st.SP})
	if err != nil {
		return nil, err
	}
	if err := m.Graph.Minimize(m.Loss, cfg.Optimizer); err != nil {
		return nil, err
	}
	if st.Recompute == RecomputeSelective && !m.Graph.KeepsAttentionProbs() {
		if slices.ContainsFunc(m.Graph.Nodes, func(n *graph.Node) bool { a, ok := n.Op.(graph.Attention); return ok && a.Flash }) {
			return nil, fmt.Errorf("%w: recompute=selective drops the attention's probabilities by recomputing them, and under flash attention (%s) none are kept: nothing to drop (recompute=full recomputes every layer)", ErrInfeasible, cfg.Model)
		}
		return nil, fmt.Errorf("%w: recompute=selective recomputes attention, which %s has none of (recompute=full recomputes every layer)", ErrInfeasible, cfg.Model)
	}
	stagesName := fmt.Sprintf("pp=%d", st.PP)
	if st.VirtualStages() > 1 {
		stagesName = fmt.Sprintf("pp=%d × vpp=%d (%d stages)", st.PP, st.VirtualStages(), st.ModelStages())
	}
	stage, err := placeStages(m.Graph, m.Loss, st.ModelStages(), st.Layers, stagesName)
	if err != nil {
		return nil, err
	}
	c := &compiler{cfg: cfg, st: st, g: m.Graph, stage: stage, model: m}
	c.p = &Plan{
		Version: Version, Model: cfg.Model, Strategy: st.String(), Batch: cfg.Batch,
		MicroBatch: micro, MB: st.MB, Shares: slices.Clone(st.Shares), DP: st.DP, PP: st.PP, VPP: st.VPP, TP: st.TP, Zero: st.Zero, SharedTP: cfg.SharedTP && st.TP > 1, SharedDP: cfg.SharedDP && st.DP > 1, Optimizer: cfg.Optimizer.Name(), Seed: cfg.Seed, Cluster: cfg.Cluster,
		Devices: slices.Clone(devices),
		Images:  graph.Spec{Shape: append(graph.Shape{cfg.Batch}, m.Images.Spec.Shape[1:]...), DType: m.Images.Spec.DType},
	}
	if err := checkSharedDP(c.p, st); err != nil {
		return nil, err
	}
	if err := checkSharedDevices(c.p); err != nil {
		return nil, err
	}
	if m.Labels != nil { // one label per sample, or per position of a language model's sequence
		c.p.Labels = graph.Spec{Shape: graph.Shape{cfg.Batch * (m.Labels.Spec.Shape[0] / micro)}, DType: m.Labels.Spec.DType}
	}
	return c, nil
}

// compile builds the plan's tasks, derives its dependency edges and plans
// its memory.
func (c *compiler) compile() (*Plan, error) {
	if err := c.build(); err != nil {
		return nil, err
	}
	if _, err := c.p.Deps(); err != nil {
		return nil, err
	}
	if err := planMemory(c.p); err != nil {
		return nil, err
	}
	// What a reader of the plan file would refuse, the compiler must not
	// write: a failure here is a bug of the compiler's, caught before the
	// plan is simulated or run.
	if err := c.p.check(); err != nil {
		return nil, fmt.Errorf("plans: compiled %s into an inconsistent plan (a compiler bug): %w", c.st, err)
	}
	return c.p, nil
}

// zeroKey names a per-micro-batch ZeRO collective: the reduce-scatter of
// a gradient (in the backward phase), or the all-gather of a weight before
// its forward or backward readers, over the replicas' devices of one
// tensor-parallel rank.
type zeroKey struct {
	tensor int
	phase  graph.Phase
	tp     int
}

type compiler struct {
	cfg   Config
	st    Strategy
	g     *graph.Graph
	model *zoo.Model
	stage []int // by node ID
	p     *Plan
	tp    int // the tensor-parallel rank being built (see device)

	// per device
	regOf     []map[int]int    // tensor ID → register holding it on that device
	reOf      []map[int]int    // tensor ID → register of its recomputation on that device
	copyOf    []map[int]int    // tensor ID → register of its copy received on that device
	streams   []map[string]int // stream name → stream index
	fwd, bwd  [][][]int        // device → its stage's chunk (see chunk) → the tasks of a forward (backward) micro-batch block, in order
	accOf     []map[int]int    // grad tensor ID → accumulator register
	updates   [][]int          // device → update tasks in order
	colls     [][]int          // device → all-reduce (or ZeRO reduce-scatter) tasks in order, with a bucket's pack and unpack around its all-reduce
	buckets   int              // gradient buckets made (Strategy.Bucket), which number their names
	gathers   [][]int          // device → ZeRO's all-gathers of updated weights, in order, with a bucket's pack and unpack around its all-gather
	zero      map[int]int      // under ZeRO: weight or optimizer state tensor ID → the weight's ID, for those split
	masterOf  []map[int]int    // weight ID → the register of the device's part of it (ZeRO)
	partOf    []map[int]int    // grad ID → the register of the device's part of the reduced gradient (ZeRO)
	reducedOf []map[int]int    // grad ID → the register its reduced value is unpacked into from a bucket (Strategy.Bucket)
	// Under ZeRO stages 2 and 3: the gradients of split weights, scattered
	// per micro-batch (grad ID → weight ID); the per-micro-batch
	// collectives over the replicas, which each replica joins as its
	// blocks are built; and, under stage 3, each device's temporaries of
	// the gathered weights.
	zeroGrads  map[int]int
	zeroColls  map[zeroKey]int
	zeroAccs   [][]zeroAcc // device → accumulations of gradient parts not yet in a block
	gatheredOf []map[zeroKey]int
	// Under stage 3 with prefetch: the layer of each forward node (see
	// layerStarts), and of each gather task its first reader's.
	layerOf     map[int]int
	gatherLayer map[int]int
	xfers       map[[2]int][]int     // (src task, dst device) → transfer tasks
	works       map[*graph.Node]work // see workOf
}

// work is how a task names its node's work for the cost model.
type work struct {
	key, family string
	shape       []int
}

// workOf returns n's workKey, workFamily and workShape, computed once per
// node: every replica, rank and micro-batch of a node prices the same work,
// and a node's op and inputs do not change while the plan is compiled.
// Each call gets its own shape.
func (c *compiler) workOf(n *graph.Node) work {
	w, ok := c.works[n]
	if !ok {
		w = work{key: workKey(n), family: workFamily(n), shape: workShape(n)}
		if c.works == nil {
			c.works = map[*graph.Node]work{}
		}
		c.works[n] = w
	}
	w.shape = slices.Clone(w.shape)
	return w
}

// device is the device of a replica's stage in the tensor-parallel rank
// being built, c.tp. Under an interleaved schedule (vpp=V) the model is
// cut into pp·V stages, and pipeline rank s runs stages s, s+pp, … (its
// chunks 0, 1, …).
func (c *compiler) device(replica, stage int) int {
	return (replica*c.st.PP+stage%c.st.PP)*c.st.TPDegree() + c.tp
}

// chunk is which of its device's chunks a model stage is.
func (c *compiler) chunk(stage int) int { return stage / c.st.PP }

// ranks is the number of tensor-parallel ranks compiled: one under
// Config.SharedTP, else all.
func (c *compiler) ranks() int {
	if c.cfg.SharedTP {
		return 1
	}
	return c.st.TPDegree()
}

// checkSharedDP refuses to list one replica for all where the replicas
// differ: uneven micro-batches, or devices of other types.
func checkSharedDP(p *Plan, st Strategy) error {
	if !p.SharedDP {
		return nil
	}
	if st.Shares != nil || st.AutoShares {
		return &unlikeReplicas{fmt.Errorf("%w: replica 0 cannot stand for replicas with uneven micro-batches (%s)", ErrInfeasible, st)}
	}
	per := len(p.Devices) / st.DP
	for d, dev := range p.Devices {
		if ref := p.Devices[d%per]; dev.Type != ref.Type || dev.Workers != ref.Workers {
			return &unlikeReplicas{fmt.Errorf("%w: replica 0 cannot stand for the others: device %s is %s (%d workers), its counterpart %s %s (%d)",
				ErrInfeasible, dev.Name, dev.Type, dev.Workers, ref.Name, ref.Type, ref.Workers)}
		}
	}
	return nil
}

// checkSharedDevices refuses to list a device for a peer (Plan.Listed:
// tensor-parallel ranks, data-parallel replicas) of another type, worker
// count or memory: the peer would not run as fast, or fit as it does.
func checkSharedDevices(p *Plan) error {
	for d, dev := range p.Devices {
		l := &p.Devices[p.Listed(d)]
		if dev.Type != l.Type || dev.Workers != l.Workers || dev.Memory != l.Memory {
			return &unlikeReplicas{fmt.Errorf("%w: %s cannot stand for %s: it is %s (%d workers, %v), %s is %s (%d, %v)",
				ErrInfeasible, l.Name, dev.Name, l.Type, l.Workers, l.Memory, dev.Name, dev.Type, dev.Workers, dev.Memory)}
		}
	}
	return nil
}

// unlikeReplicas is an ErrInfeasible that is also ErrUnlikeReplicas.
type unlikeReplicas struct{ error }

func (e *unlikeReplicas) Unwrap() []error { return []error{e.error, ErrUnlikeReplicas} }

// CompileSharing is Compile taking Config.SharedDP and SharedTP where they
// apply: where replica 0 cannot stand for the others (uneven
// micro-batches, devices of other types or memory) it lists them all, and
// likewise a tensor-parallel group's ranks; the plan's SharedDP and
// SharedTP say what it did. For the simulator: a shared plan has its whole
// plan's memory, and its step where sim.SharesExactly says so.
func CompileSharing(cfg Config) (*Plan, error) {
	if cfg.Strategy.AutoShares || cfg.Strategy.Shares != nil {
		cfg.SharedDP = false
	}
	p, err := Compile(cfg)
	if cfg.SharedDP && errors.Is(err, ErrUnlikeReplicas) {
		cfg.SharedDP = false
		p, err = Compile(cfg)
	}
	if cfg.SharedTP && errors.Is(err, ErrUnlikeReplicas) {
		cfg.SharedTP = false
		p, err = Compile(cfg)
	}
	return p, err
}

// replicas is the number of data-parallel replicas compiled: one under
// Config.SharedDP, else all.
func (c *compiler) replicas() int {
	if c.p.SharedDP {
		return 1
	}
	return c.st.DP
}

// eachTP calls f with c.tp set to each tensor-parallel rank in turn.
func (c *compiler) eachTP(f func() error) error {
	defer func() { c.tp = 0 }()
	for c.tp = range c.ranks() {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// inflight is the number of micro-batches whose activations a model stage
// of a replica holds at once under the schedule: the most forward blocks
// of it run before their backward blocks.
func (c *compiler) inflight(replica, stage int) int {
	held, most := 0, 0
	for _, st := range c.schedule(replica, stage%c.st.PP) {
		if st.chunk != c.chunk(stage) || st.micro >= c.st.Micros(replica) { // idle steps hold nothing
			continue
		}
		if st.forward {
			held++
		} else {
			held--
		}
		most = max(most, held)
	}
	return most
}

func (c *compiler) stream(dev int, name string) int {
	if s, ok := c.streams[dev][name]; ok {
		return s
	}
	c.p.Streams = append(c.p.Streams, Stream{Device: dev, Name: name})
	c.streams[dev][name] = len(c.p.Streams) - 1
	return len(c.p.Streams) - 1
}

// commStream is the stream a device's communication runs on: its own
// stream on an accelerator, whose copy engines and links work beside its
// compute units, but the compute stream on a CPU, where a copy or a
// reduction takes a core the kernels would otherwise use.
func (c *compiler) commStream(dev int, name string) int {
	if c.p.Devices[dev].IsCPU() {
		return c.stream(dev, "compute")
	}
	return c.stream(dev, name)
}

func (c *compiler) newRegister(dev int, name string, spec graph.Spec) int {
	r := Register{ID: len(c.p.Registers), Name: name, Device: dev, Spec: spec,
		SlotBytes: spec.Bytes(), Slots: 1}
	c.p.Registers = append(c.p.Registers, r)
	return r.ID
}

func (c *compiler) newTask(t Task) int {
	t.ID = len(c.p.Tasks)
	c.p.Tasks = append(c.p.Tasks, t)
	for _, r := range t.Writes {
		c.p.Registers[r].Writers = append(c.p.Registers[r].Writers, t.ID)
	}
	return t.ID
}

func (c *compiler) taskName(dev int, name string) string {
	if len(c.p.Devices) == 1 {
		return name
	}
	return c.p.Devices[dev].Name + "/" + name
}

func (c *compiler) build() error {
	n := len(c.p.Devices)
	c.regOf = make([]map[int]int, n)
	c.reOf = make([]map[int]int, n)
	c.copyOf = make([]map[int]int, n)
	c.streams = make([]map[string]int, n)
	c.fwd = make([][][]int, n)
	c.bwd = make([][][]int, n)
	c.accOf = make([]map[int]int, n)
	c.updates = make([][]int, n)
	c.colls = make([][]int, n)
	c.gathers = make([][]int, n)
	c.masterOf, c.partOf, c.reducedOf = make([]map[int]int, n), make([]map[int]int, n), make([]map[int]int, n)
	c.zero = c.zeroSplit()
	c.zeroGrads, c.zeroColls, c.gatheredOf, c.zeroAccs = map[int]int{}, map[zeroKey]int{}, make([]map[zeroKey]int, n), make([][]zeroAcc, n)
	if c.st.Zero >= 2 {
		for _, u := range c.updateNodes() {
			if _, ok := c.zero[u.Inputs[0].ID]; ok {
				c.zeroGrads[u.Inputs[1].ID] = u.Inputs[0].ID
			}
		}
	}
	if c.st.Zero == 3 && c.st.Prefetch > 0 {
		c.layerOf, c.gatherLayer = map[int]int{}, map[int]int{}
		fwd := forwardNodes(c.g)
		starts := layerStarts(fwd)
		if layers := len(starts) + 1; c.st.Prefetch >= layers {
			return fmt.Errorf("%w: %s: prefetch=%d: the model has %d layers, so at most %d can be gathered ahead of the one running", ErrInfeasible, c.st, c.st.Prefetch, layers, layers-1)
		}
		for i, n := range fwd {
			c.layerOf[n.ID], _ = slices.BinarySearch(starts, i+1)
		}
	}
	c.xfers = map[[2]int][]int{}
	for d := range n {
		c.regOf[d], c.reOf[d], c.copyOf[d], c.streams[d] = map[int]int{}, map[int]int{}, map[int]int{}, map[string]int{}
		c.accOf[d], c.masterOf[d], c.partOf[d], c.reducedOf[d], c.gatheredOf[d] = map[int]int{}, map[int]int{}, map[int]int{}, map[int]int{}, map[zeroKey]int{}
		c.fwd[d], c.bwd[d] = make([][]int, c.st.VirtualStages()), make([][]int, c.st.VirtualStages())
		if c.p.TPRank(d) < c.ranks() && c.p.Replica(d) < c.replicas() {
			c.stream(d, "compute")
		}
	}
	for r := range c.replicas() {
		if err := c.buildReplica(r); err != nil {
			return err
		}
	}
	if c.st.DP > 1 {
		c.buildAllReduces()
	}
	if err := c.buildUpdates(); err != nil {
		return err
	}
	c.sizeSlots()
	if err := checkPlannable(c.p); err != nil {
		return err
	}
	c.order()
	return nil
}

// buildReplica adds the forward and backward tasks of one data-parallel
// replica, with the input and transfer tasks they need.
func (c *compiler) buildReplica(replica int) error {
	consumers := c.g.Consumers()
	defer func() { // the last gradients' accumulations end their blocks
		for d := range c.zeroAccs {
			c.flushZeroAccumulates(d)
		}
	}()
	if err := c.eachTP(func() error { return c.buildInputs(replica, consumers) }); err != nil {
		return err
	}
	// Node by node, each on every tensor-parallel rank: a group's TPSum
	// is one task, added once its members' inputs are.
	add := func(n *graph.Node, name string, re []map[int]int) error {
		return c.eachTP(func() error { return c.addNode(n, replica, name, re) })
	}
	// With recompute, the backward nodes come after the recomputation of
	// the forward pass that they read from.
	var backward []*graph.Node
	for _, n := range c.g.Nodes {
		switch {
		case n.Phase == graph.Update:
			continue
		case n.Phase == graph.Backward && c.st.Recompute != RecomputeNone:
			backward = append(backward, n)
			continue
		}
		if err := add(n, n.Name, nil); err != nil {
			return err
		}
	}
	if c.st.Recompute == RecomputeNone {
		return nil
	}
	// Each layer (see Strategy.Layers) is recomputed from its inputs just
	// before the first backward node of it, so that the backward pass
	// holds the recomputed activations of one layer at a time; with full
	// recompute, only the layers' inputs are kept from the forward pass.
	fwd := forwardNodes(c.g)
	layerOf := make(map[int]int, len(fwd)) // forward node ID → layer
	starts := layerStarts(fwd)
	for i, n := range fwd {
		layerOf[n.ID], _ = slices.BinarySearch(starts, i+1)
	}
	done := map[int]bool{}
	for _, n := range backward {
		if n.Origin != nil {
			if l, ok := layerOf[n.Origin.ID]; ok && !done[l] {
				done[l] = true
				for _, f := range fwd {
					if layerOf[f.ID] == l && c.recomputes(f) {
						if err := add(f, "recompute/"+f.Name, c.reOf); err != nil {
							return err
						}
					}
				}
			}
		}
		if err := add(n, n.Name, nil); err != nil {
			return err
		}
	}
	return nil
}

// buildInputs adds a replica's persistent registers and input tasks on
// its devices of tensor-parallel rank c.tp.
func (c *compiler) buildInputs(replica int, consumers [][]*graph.Node) error {
	for _, t := range c.g.Tensors {
		if !t.Persistent() {
			continue
		}
		s := -1
		for _, n := range consumers[t.ID] {
			if ns := c.stage[n.ID]; s >= 0 && ns != s && n.Phase != graph.Update {
				return fmt.Errorf("%w: %s is read on stages %d and %d; a weight must live on one stage", ErrInfeasible, t.Name, s, ns)
			} else if s < 0 {
				s = ns
			}
		}
		if s < 0 {
			continue
		}
		dev := c.device(replica, s)
		init := t.Init
		if init.Shard != nil {
			init.Shard = init.Shard.Named(init.Shard.Of)
			init.Shard.Part = c.tp
		}
		w, split := c.zero[t.ID]
		if split && w != t.ID { // optimizer state: only this replica's part
			c.regOf[dev][t.ID] = c.zeroPart(dev, replica, t, init, false)
			continue
		}
		if split && c.st.Zero == 3 { // the weight too: its whole is gathered before each use (zeroGathered)
			c.masterOf[dev][t.ID] = c.zeroPart(dev, replica, t, init, false)
			continue
		}
		reg := c.newRegister(dev, t.Name+init.Shard.Suffix(), t.Spec)
		c.p.Registers[reg].Persistent = true
		c.p.Registers[reg].Init = init
		c.regOf[dev][t.ID] = reg
		if split { // the weight: whole for the forward and backward passes, a part to update
			c.masterOf[dev][t.ID] = c.zeroPart(dev, replica, t, init, true)
		}
	}
	for _, in := range []*graph.Tensor{c.model.Images, c.model.Labels} {
		if in == nil { // a model without labels
			continue
		}
		for _, dev := range c.readersDevices(replica, in, consumers) {
			reg := c.newRegister(dev, in.Name, in.Spec)
			c.regOf[dev][in.ID] = reg
			stage := c.firstStage(replica, dev, in, consumers)
			task := c.newTask(Task{Name: c.taskName(dev, "input/"+in.Name), Kind: Input, Phase: "input",
				Stage: stage, Replica: replica, PerMicro: true, Streams: []int{c.stream(dev, "compute")},
				Writes: []int{reg}, Offset: c.p.FirstMicro(replica) * c.p.MicroBatch,
				Bytes: in.Spec.Bytes(), Key: "input(" + in.Spec.String() + ")", Shape: in.Spec.Shape.Clone(),
				Family: "input(" + batchless(in.Spec) + ")"})
			c.toBlock(dev, stage, graph.Forward, task)
		}
	}
	return nil
}

// zeroSplit returns, under ZeRO, the weights whose optimizer state the
// replicas split and those states, each mapped to its weight: every
// weight whose first axis the replicas divide (the others are all-reduced
// and updated whole on every replica). Under tensor parallelism the graph
// is a rank's, so it is the rank's part of a split weight whose first axis
// they must divide, and every rank splits the same weights; a weight
// every rank holds whole (a layer norm's) is split over the replicas on
// each rank alike.
func (c *compiler) zeroSplit() map[int]int {
	if c.st.Zero == 0 {
		return nil
	}
	split := map[int]int{}
	for _, n := range c.updateNodes() {
		w := n.Inputs[0]
		if sh := w.Spec.Shape; len(sh) == 0 || sh[0]%c.st.DP != 0 {
			continue
		}
		for _, i := range n.Op.(graph.Mutator).Mutates() {
			split[n.Inputs[i].ID] = w.ID
		}
	}
	return split
}

// zeroPart adds the persistent register of replica's part of tensor t on
// device dev, initialized (init) as the device's whole of t would be: its
// first axis split over the replicas. Under tensor parallelism, where
// that whole is the rank's part of a larger tensor (init.Shard), the
// replica's part is a part of that part (graph.Shard.Within), as in
// Megatron-LM's distributed optimizer. A weight's part (master) is, under
// stages 1 and 2, a copy of its whole's, which the store leaves out;
// under stage 3 it is the weight's only copy.
func (c *compiler) zeroPart(dev, replica int, t *graph.Tensor, init graph.Init, master bool) int {
	whole := t.Name + init.Shard.Suffix() // the device's register of t but for ZeRO
	sh := &graph.Shard{Of: whole, Full: t.Spec.Shape.Clone(), Axis: 0, Parts: c.st.DP, Part: replica, Blocks: 1, Within: init.Shard}
	init.Shard = sh
	reg := c.newRegister(dev, fmt.Sprintf("%s [zero %d/%d]", whole, replica, c.st.DP), graph.Spec{Shape: sh.Shape(), DType: t.Spec.DType})
	c.p.Registers[reg].Persistent = true
	c.p.Registers[reg].Init = init
	c.p.Registers[reg].Master = master
	return reg
}

// firstStage is the first model stage on device dev of a replica whose
// nodes read t.
func (c *compiler) firstStage(replica, dev int, t *graph.Tensor, consumers [][]*graph.Node) int {
	first := -1
	for _, n := range consumers[t.ID] {
		if s := c.stage[n.ID]; c.device(replica, s) == dev && (first < 0 || s < first) {
			first = s
		}
	}
	return first
}

// recomputes reports whether forward node n is recomputed: under
// selective recompute the attention ops, under full every op but the
// loss (whose output would be counted twice).
func (c *compiler) recomputes(n *graph.Node) bool {
	if c.st.Recompute == RecomputeSelective {
		_, ok := n.Op.(graph.Attention)
		return ok
	}
	return !graph.IsLoss(n.Op)
}

// addNode adds the task of graph node n on its device of a replica. A
// recomputation (into the registers of re) repeats a forward node in the
// backward pass, from the recomputed tensors where there are some and
// otherwise from what the forward pass read (weights, the stage's inputs),
// into registers of its own: the backward pass then reads those (see
// readable), and the forward pass's activations live only until the next
// forward op has read them.
func (c *compiler) addNode(n *graph.Node, replica int, name string, re []map[int]int) error {
	dev := c.device(replica, c.stage[n.ID])
	phase := n.Phase
	if re != nil {
		phase = graph.Backward
	}
	switch n.Op.(type) {
	case graph.TPCopy: // the identity: its output is its input's register
		if c.gatheredWeight(n.Inputs[0]) != nil { // its readers read the gathered weight (see addNode's reads)
			return nil
		}
		reg, err := c.readable(dev, n.Inputs[0], replica)
		if err != nil {
			return err
		}
		if re != nil {
			re[dev][n.Outputs[0].ID] = reg
		} else {
			c.regOf[dev][n.Outputs[0].ID] = reg
		}
		return nil
	case graph.TPSum, graph.TPGather, graph.TPScatter:
		if c.tp == c.ranks()-1 { // every member's input is there
			return c.addTPCollective(n, replica, name, phase, re)
		}
		return nil
	}
	var reads []Use
	for _, in := range n.Inputs {
		var reg int
		if w := c.gatheredWeight(in); w != nil {
			reg = c.zeroGathered(dev, replica, n, w, phase)
		} else {
			r, err := c.readable(dev, in, replica)
			if err != nil {
				return err
			}
			reg = r
		}
		mode := ReadMicro
		if c.p.Registers[reg].Persistent { // a weight, possibly through a TPCopy (sequence parallelism's replicated weights)
			mode = ReadPrev
		}
		reads = append(reads, Use{Reg: reg, Mode: mode})
	}
	var writes []int
	for _, out := range n.Outputs {
		writes = append(writes, c.output(dev, out, re))
	}
	var kernel graph.Op = n.Op
	if rd, ok := kernel.(graph.RankDependent); ok { // the device's part of a split vocabulary
		kernel = rd.ForRank(c.tp)
	}
	op, err := graph.EncodeOp(kernel)
	if err != nil {
		return err
	}
	cost, w := n.Cost(), c.workOf(n)
	task := c.newTask(Task{Name: c.taskName(dev, name), Kind: Compute, Phase: phase.String(),
		Stage: c.stage[n.ID], Replica: replica, PerMicro: true, Streams: []int{c.stream(dev, "compute")},
		Op: &op, Reads: reads, Writes: writes, FLOPs: cost.FLOPs, Bytes: cost.Bytes, Key: w.key, Shape: w.shape, Family: w.family})
	c.toBlock(dev, c.stage[n.ID], phase, task)
	var accs []zeroAcc
	for i, out := range n.Outputs {
		if _, ok := c.zeroGrads[out.ID]; ok && re == nil {
			accs = append(accs, c.addZeroScatterMicro(out, replica, dev, c.stage[n.ID], writes[i]))
		}
	}
	if accs != nil { // the previous producer's accumulations follow this one's reduce-scatters
		c.flushZeroAccumulates(dev)
		c.zeroAccs[dev] = accs
	}
	return nil
}

// gatheredWeight returns, under ZeRO stage 3, the split weight that
// reading t reads: t itself, or the weight whose TPCopy t is (sequence
// parallelism's replicated weights); nil for any other tensor.
func (c *compiler) gatheredWeight(t *graph.Tensor) *graph.Tensor {
	if c.st.Zero < 3 {
		return nil
	}
	if p := t.Producer; p != nil {
		if _, ok := p.Op.(graph.TPCopy); !ok {
			return nil
		}
		t = p.Inputs[0]
	}
	if w, ok := c.zero[t.ID]; ok && w == t.ID {
		return t
	}
	return nil
}

// joinZero adds a replica's member to the per-micro-batch ZeRO collective
// of key, creating it (from proto, without members) for the first: the
// replicas' blocks are built one after another, and the collective is one
// task over all of them, member i being replica i.
func (c *compiler) joinZero(key zeroKey, proto Task, read Use, write, stream int) int {
	id, ok := c.zeroColls[key]
	if !ok {
		id = c.newTask(proto)
		c.zeroColls[key] = id
	}
	t := &c.p.Tasks[id]
	t.Reads = append(t.Reads, read)
	t.Writes = append(t.Writes, write)
	t.Streams = append(t.Streams, stream)
	c.p.Registers[write].Writers = append(c.p.Registers[write].Writers, id)
	return id
}

// addZeroScatterMicro adds, under ZeRO stages 2 and 3, a replica's member
// of the reduce-scatter of one micro-batch's gradient (register g on
// device dev), right after the task producing it, on the coll stream (the
// compute stream of a CPU): the replica gets its part of the replicas'
// mean, which an accumulation, returned for the caller to place, adds to
// the part it keeps over the micro-batches. Both fire once per round
// (Task.Rounds): a replica with fewer micro-batches than the rounds gets
// and accumulates its part of the others' gradients in the rounds it has
// none of its own. The whole gradient lives from its producer to the
// reduce-scatter (one slot), the part across micro-batches.
//
// The accumulation runs on the compute stream after the next task that
// produces such gradients (see flushZeroAccumulates): it waits for the
// reduce-scatter, so at most two tasks' whole gradients are ever live,
// and each reduce-scatter overlaps the next layer's backward compute.
// Without that wait a GPU's compute could run ahead of the coll stream
// and keep every gradient of the micro-batch whole at once, as stage 1's
// accumulator does. With one round the accumulation is a copy, kept for
// the same bound.
func (c *compiler) addZeroScatterMicro(grad *graph.Tensor, replica, dev, stage, g int) zeroAcc {
	w := c.zeroGrads[grad.ID]
	shape := grad.Spec.Shape.Clone()
	shape[0] /= c.st.DP
	spec := graph.Spec{Shape: shape, DType: grad.Spec.DType}
	b := grad.Spec.Bytes()
	part := c.newRegister(dev, c.taskName(dev, fmt.Sprintf("%s [zero %d/%d]", grad.Name, replica, c.st.DP)), spec)
	id := c.joinZero(zeroKey{grad.ID, graph.Backward, c.tp}, Task{Name: c.onRank("reducescatter/"+c.weightName(dev, c.g.Tensors[w]), c.g.Tensors[w]), Kind: ReduceScatter,
		Phase: graph.Backward.String(), Stage: stage, Replica: 0, PerMicro: true, Rounds: true,
		FLOPs: units.FLOPs(grad.Spec.Shape.NumElements() * c.st.DP), Bytes: b,
		Key: fmt.Sprintf("reducescatter(%d,%d)", c.st.DP, b), Shape: []int{c.st.DP, grad.Spec.Shape.NumElements()}},
		Use{Reg: g, Mode: ReadMicro}, part, c.commStream(dev, "coll"))
	c.toBlock(dev, stage, graph.Backward, id)
	acc := c.newRegister(dev, c.p.Registers[part].Name+".acc", spec)
	n := shape.NumElements()
	task := c.newTask(Task{Name: c.p.Registers[part].Name + ".accumulate", Kind: Accumulate, Phase: graph.Backward.String(),
		Stage: stage, Replica: replica, PerMicro: true, Rounds: true, Streams: []int{c.stream(dev, "compute")},
		Reads: []Use{{Reg: part, Mode: ReadMicro}}, Writes: []int{acc}, InPlace: c.st.MB > 1, // one round's only overwrites
		FLOPs: units.FLOPs(2 * n), Bytes: 3 * spec.Bytes(), Key: fmt.Sprintf("accumulate(%d)", n), Shape: []int{n}})
	c.partOf[dev][grad.ID] = acc
	return zeroAcc{task, stage}
}

// zeroAcc is an accumulation of a gradient's part waiting for its place
// in a backward block (see addZeroScatterMicro).
type zeroAcc struct{ task, stage int }

// flushZeroAccumulates puts device dev's waiting accumulations into their
// blocks, where the compute stream has got to.
func (c *compiler) flushZeroAccumulates(dev int) {
	for _, a := range c.zeroAccs[dev] {
		c.toBlock(dev, a.stage, graph.Backward, a.task)
	}
	c.zeroAccs[dev] = nil
}

// zeroGathered returns, under ZeRO stage 3, the register through which
// device dev's tasks of a phase read weight w whole: a temporary that a
// per-micro-batch all-gather of the replicas' parts fills just before the
// phase's first reader of it, one for the forward pass and one for the
// backward pass (recomputation included), as FSDP frees a weight after
// its forward use and gathers it again for the backward. One slot each:
// the next micro-batch's gather waits until this one's readers are done.
//
// Without prefetch the gather runs on the compute stream, so a whole
// weight lives from its gather to its last reader of the block, and a GPU
// waits for its gathers. With prefetch (Strategy.Prefetch) it runs on the
// device's "gather" stream, and prefetchBlock moves it ahead and bounds
// how far: on a stream of their own nothing else would hold the gathers
// back (a task waits only for the slots it writes, and each weight has
// its own register), so every weight could be whole at once.
func (c *compiler) zeroGathered(dev, replica int, n *graph.Node, w *graph.Tensor, phase graph.Phase) int {
	key := zeroKey{w.ID, phase, c.tp}
	if reg, ok := c.gatheredOf[dev][key]; ok {
		return reg
	}
	name := c.weightName(dev, w) + "@gather"
	if phase == graph.Backward {
		name += ".backward"
	}
	reg := c.newRegister(dev, c.taskName(dev, name), w.Spec)
	b := w.Spec.Bytes()
	stage, stream := c.stage[n.ID], c.stream(dev, "compute")
	if c.st.Prefetch > 0 {
		stream = c.commStream(dev, "gather")
	}
	id := c.joinZero(key, Task{Name: c.onRank("allgather/"+name, w), Kind: AllGather, Phase: phase.String(), Stage: stage, Replica: 0, PerMicro: true, Rounds: true,
		Bytes: b, Key: fmt.Sprintf("allgather(%d,%d)", c.st.DP, b), Shape: []int{c.st.DP, w.Spec.Shape.NumElements()}},
		Use{Reg: c.masterOf[dev][w.ID], Mode: ReadPrev}, reg, stream)
	c.toBlock(dev, stage, phase, id)
	if c.gatherLayer != nil {
		c.gatherLayer[id] = c.nodeLayer(n)
	}
	c.gatheredOf[dev][key] = reg
	return reg
}

// onRank is the name of a data-parallel collective of weight w (an
// all-reduce, or ZeRO's): under tensor parallelism each rank's replicas
// have their own, and where every rank holds w whole (a layer norm's
// weight), its name says which rank's it is.
func (c *compiler) onRank(name string, w *graph.Tensor) string {
	if c.st.TPDegree() > 1 && w.Init.Shard == nil {
		return fmt.Sprintf("%s [rank %d/%d]", name, c.tp, c.st.TPDegree())
	}
	return name
}

// weightName is the name of weight w's register on device dev: its whole
// register's, or under ZeRO stage 3, where the device holds only a part,
// the name of what that is a part of (the weight, or its tensor-parallel
// rank's part).
func (c *compiler) weightName(dev int, w *graph.Tensor) string {
	if reg, ok := c.regOf[dev][w.ID]; ok {
		return c.p.Registers[reg].Name
	}
	if reg, ok := c.masterOf[dev][w.ID]; ok {
		return c.p.Registers[reg].Init.Shard.Of
	}
	return w.Name
}

// output adds the register of tensor t written on device dev: of the
// forward pass, or of its recomputation (re).
func (c *compiler) output(dev int, t *graph.Tensor, re []map[int]int) int {
	name := c.taskName(dev, t.Name)
	if re != nil {
		name += "@recompute"
	}
	reg := c.newRegister(dev, name, t.Spec)
	if re != nil {
		re[dev][t.ID] = reg
	} else {
		c.regOf[dev][t.ID] = reg
	}
	return reg
}

// toBlock adds a task of a model stage to device dev's forward or
// backward micro-batch block of that stage.
func (c *compiler) toBlock(dev, stage int, phase graph.Phase, task int) {
	k := c.chunk(stage)
	if phase == graph.Backward {
		c.bwd[dev][k] = append(c.bwd[dev][k], task)
	} else {
		c.fwd[dev][k] = append(c.fwd[dev][k], task)
	}
}

// addTPCollective adds the collective of a tensor-parallel mark n over
// the group of a replica's stage, once per micro-batch: TPSum's all-reduce
// (each member's write is the sum of the members' reads), TPGather's
// all-gather and TPScatter's reduce-scatter. It runs on the members'
// compute streams, as Megatron-LM's collectives hold up the compute they
// sit between. Its size is the whole tensor's, as the cost model prices
// collectives.
func (c *compiler) addTPCollective(n *graph.Node, replica int, name string, phase graph.Phase, re []map[int]int) error {
	in, out := n.Inputs[0], n.Outputs[0]
	tp := c.st.TPDegree()
	task := Task{Phase: phase.String(), Stage: c.stage[n.ID], Replica: replica, PerMicro: true}
	whole := out.Spec // the unsplit tensor
	switch op := n.Op.(type) {
	case graph.TPSum:
		task.Kind, task.Sum = AllReduce, true
		task.FLOPs = units.FLOPs(out.Spec.Shape.NumElements() * tp)
	case graph.TPGather:
		task.Kind, task.Sum, task.Axis = AllGather, true, op.Axis
	case graph.TPScatter:
		task.Kind, task.Sum, task.Axis = ReduceScatter, true, op.Axis
		whole = in.Spec
		task.FLOPs = units.FLOPs(in.Spec.Shape.NumElements() * tp)
	}
	task.Name = c.taskName(c.device(replica, c.stage[n.ID])-c.tp, name) + fmt.Sprintf(" [tp ×%d]", tp)
	task.Bytes = whole.Bytes()
	task.Key = fmt.Sprintf("%s(%d,%d)", task.Kind, tp, whole.Bytes())
	task.Shape = []int{tp, whole.Shape.NumElements()}
	task.Family = fmt.Sprintf("%s(%d,%s)", task.Kind, tp, batchlessAt(whole, batchAxisOf(in)))
	defer func(t int) { c.tp = t }(c.tp)
	var devs []int
	for c.tp = range c.ranks() {
		dev := c.device(replica, c.stage[n.ID])
		reg, err := c.readable(dev, in, replica)
		if err != nil {
			return err
		}
		w := c.output(dev, out, re)
		task.Reads = append(task.Reads, Use{Reg: reg, Mode: ReadMicro})
		task.Writes = append(task.Writes, w)
		task.Streams = append(task.Streams, c.stream(dev, "compute"))
		devs = append(devs, dev)
	}
	id := c.newTask(task)
	for _, dev := range devs {
		c.toBlock(dev, c.stage[n.ID], phase, id)
	}
	if _, ok := c.zeroGrads[out.ID]; ok && re == nil { // a replicated weight's gradient, summed over the group (sequence parallelism)
		for i, dev := range devs {
			c.tp = i
			acc := c.addZeroScatterMicro(out, replica, dev, c.stage[n.ID], task.Writes[i])
			c.flushZeroAccumulates(dev)
			c.zeroAccs[dev] = []zeroAcc{acc}
		}
	}
	return nil
}

// readersDevices lists the devices of a replica whose nodes read t.
func (c *compiler) readersDevices(replica int, t *graph.Tensor, consumers [][]*graph.Node) []int {
	var devs []int
	for _, n := range consumers[t.ID] {
		d := c.device(replica, c.stage[n.ID])
		if !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	slices.Sort(devs)
	return devs
}

// readable returns the register through which device dev reads tensor t,
// adding a transfer from the producing device if needed.
func (c *compiler) readable(dev int, t *graph.Tensor, replica int) (int, error) {
	if reg, ok := c.reOf[dev][t.ID]; ok { // recomputed: only backward readers come after
		return reg, nil
	}
	if reg, ok := c.regOf[dev][t.ID]; ok {
		return reg, nil
	}
	if reg, ok := c.copyOf[dev][t.ID]; ok {
		return reg, nil
	}
	if t.Producer == nil {
		return 0, fmt.Errorf("plans: tensor %s has no register on %s", t.Name, c.p.Devices[dev].Name)
	}
	src := c.device(replica, c.stage[t.Producer.ID])
	srcReg, ok := c.regOf[src][t.ID]
	if !ok {
		return 0, fmt.Errorf("plans: tensor %s is read before it is produced", t.Name)
	}
	if len(c.p.Registers[srcReg].Writers) == 0 {
		return 0, fmt.Errorf("plans: tensor %s is read on %s before %s writes it", t.Name, c.p.Devices[dev].Name, c.p.Devices[src].Name)
	}
	dst := c.newRegister(dev, c.taskName(dev, t.Name+"@recv"), t.Spec)
	c.copyOf[dev][t.ID] = dst
	from := c.p.Registers[srcReg].Writers[0]
	task := c.newTask(Task{Name: c.taskName(src, "send/"+t.Name+">"+c.p.Devices[dev].Name), Kind: Transfer, Phase: "comm",
		Stage: c.stage[t.Producer.ID], Replica: replica, PerMicro: true,
		Streams: []int{c.commStream(src, "p2p>"+c.p.Devices[dev].Name)},
		Reads:   []Use{{Reg: srcReg, Mode: ReadMicro}}, Writes: []int{dst},
		Bytes: t.Spec.Bytes(), Key: fmt.Sprintf("transfer(%d)", t.Spec.Bytes()), Shape: []int{int(t.Spec.Bytes())},
		Family: "transfer(" + batchlessAt(t.Spec, batchAxisOf(t)) + ")"})
	c.xfers[[2]int{from, dev}] = append(c.xfers[[2]int{from, dev}], task)
	return dst, nil
}

// gradReg returns the register holding the whole iteration's gradient of a
// weight on a device: the gradient itself for one micro-batch, else an
// accumulator fed by an Accumulate task per micro-batch.
func (c *compiler) gradReg(dev, stage int, grad *graph.Tensor, replica int) int {
	reg := c.regOf[dev][grad.ID]
	if c.st.Micros(replica) == 1 {
		return reg
	}
	if acc, ok := c.accOf[dev][grad.ID]; ok {
		return acc
	}
	acc := c.newRegister(dev, c.p.Registers[reg].Name+".acc", grad.Spec)
	c.accOf[dev][grad.ID] = acc
	n := grad.Spec.Shape.NumElements()
	task := c.newTask(Task{Name: c.p.Registers[reg].Name + ".accumulate", Kind: Accumulate, Phase: "backward",
		Stage: stage, Replica: replica, PerMicro: true, Streams: []int{c.stream(dev, "compute")},
		Reads: []Use{{Reg: reg, Mode: ReadMicro}}, Writes: []int{acc}, InPlace: true,
		FLOPs: units.FLOPs(2 * n), Bytes: 3 * grad.Spec.Bytes(), Key: fmt.Sprintf("accumulate(%d)", n), Shape: []int{n}})
	c.toBlock(dev, stage, graph.Backward, task)
	return acc
}

// updateNodes returns the optimizer's update nodes.
func (c *compiler) updateNodes() []*graph.Node {
	var ns []*graph.Node
	for _, n := range c.g.Nodes {
		if n.Phase == graph.Update {
			ns = append(ns, n)
		}
	}
	// Gradients become ready last layer first: update (and all-reduce) in
	// that order.
	slices.Reverse(ns)
	return ns
}

// buildAllReduces adds, for every weight (of every tensor-parallel rank),
// one all-reduce over the replicas' gradient registers (in place, the
// mean), on each replica's coll stream.
func (c *compiler) buildAllReduces() {
	c.eachTP(func() error { c.buildAllReducesTP(); return nil })
}

func (c *compiler) buildAllReducesTP() {
	var closed []closedBucket
	reduce := bucketer{c: c, flush: c.addAllReduce, closed: &closed}
	scatter := bucketer{c: c, flush: c.addZeroScatter, closed: &closed}
	for i, n := range c.updateNodes() {
		if _, ok := c.zero[n.Inputs[0].ID]; !ok {
			reduce.add(n, i)
		} else if c.st.Zero == 1 { // stages 2 and 3 scattered every micro-batch's (addZeroScatterMicro)
			scatter.add(n, i)
		}
	}
	reduce.close()
	scatter.close()
	// In the order the buckets become ready, their last gradients', as
	// one gradient's collective follows another's without buckets.
	slices.SortStableFunc(closed, func(a, b closedBucket) int { return cmp.Compare(a.last, b.last) })
	for _, b := range closed {
		b.flush(b.ns)
	}
}

// bucketer fills buckets (Strategy.Bucket) with the gradients (or, for
// ZeRO's all-gathers, the weights) of update nodes, in the order they
// become ready: a bucket takes a stage's gradients of one dtype until the
// next would overflow it, and flush adds the collective of each (of a
// single gradient without Strategy.Bucket) as it closes, or, with closed
// set, later, the caller ordering those of several bucketers.
type bucketer struct {
	c      *compiler
	flush  func([]*graph.Node)
	closed *[]closedBucket
	open   []*graph.Node
	last   int // the open bucket's last node's index, in the caller's order
	size   units.Bytes
}

// closedBucket is a full bucket whose collective is still to add.
type closedBucket struct {
	ns    []*graph.Node
	last  int
	flush func([]*graph.Node)
}

// add puts update node n, the i-th of the caller's order, in the open
// bucket, closing it first if n does not fit.
func (b *bucketer) add(n *graph.Node, i int) {
	grad := n.Inputs[1]
	if len(b.open) > 0 {
		last := b.open[len(b.open)-1]
		if b.c.stage[last.ID] != b.c.stage[n.ID] || last.Inputs[1].Spec.DType != grad.Spec.DType || b.size+grad.Spec.Bytes() > b.c.st.Bucket {
			b.close()
		}
	}
	b.open, b.size, b.last = append(b.open, n), b.size+grad.Spec.Bytes(), i
}

func (b *bucketer) close() {
	switch {
	case len(b.open) == 0:
	case b.closed != nil:
		*b.closed = append(*b.closed, closedBucket{b.open, b.last, b.flush})
	default:
		b.flush(b.open)
	}
	b.open, b.size = nil, 0
}

// collBucket is what the collective of update nodes ns (of one stage and
// dtype, see bucketer) is built from: their gradients' (or weights')
// elements and bytes, its name (the first weight's, or a numbered bucket
// of several), and, for a bucket of several, each replica's pack and
// unpack around it.
type collBucket struct {
	c              *compiler
	ns             []*graph.Node
	stage          int
	name           string
	dtype          graph.DType
	n              int
	bytes          units.Bytes
	packs, unpacks []int
}

// newBucket describes the collective of ns over their input in (1: the
// gradients, 0: the weights), a bucket of several named what-bucket-K.
func (c *compiler) newBucket(ns []*graph.Node, in int, what string) *collBucket {
	b := &collBucket{c: c, ns: ns, stage: c.stage[ns[0].ID], dtype: ns[0].Inputs[in].Spec.DType}
	for _, u := range ns {
		b.bytes += u.Inputs[in].Spec.Bytes()
		b.n += u.Inputs[in].Spec.Shape.NumElements()
	}
	b.name = c.p.Registers[c.regOf[c.device(0, b.stage)][ns[0].Inputs[0].ID]].Name
	if b.several() {
		b.name = fmt.Sprintf("%s-bucket-%d", what, c.buckets)
		c.buckets++
	}
	b.name = c.onRank(b.name, ns[0].Inputs[0])
	return b
}

func (b *collBucket) several() bool { return len(b.ns) > 1 }

// register adds a flat register of n elements of the bucket on dev.
func (b *collBucket) register(dev int, name string, n int) int {
	return b.c.newRegister(dev, b.c.taskName(dev, name), graph.Spec{Shape: graph.Shape{n}, DType: b.dtype})
}

// pack adds replica r's pack of reads into bucket register into, of size
// elements, on stream, in parts (Task.Parts; 0: whole).
func (b *collBucket) pack(r, stream int, reads []Use, into, parts, size int) {
	b.packs = append(b.packs, b.copy(Pack, r, stream, reads, []int{into}, parts, size))
}

// unpack adds replica r's unpack of bucket register from, of size
// elements, into writes, on stream, in parts.
func (b *collBucket) unpack(r, stream, from int, writes []int, parts, size int) {
	b.unpacks = append(b.unpacks, b.copy(Unpack, r, stream, []Use{{Reg: from, Mode: ReadFinal}}, writes, parts, size))
}

func (b *collBucket) copy(kind TaskKind, r, stream int, reads []Use, writes []int, parts, size int) int {
	dev := b.c.p.Streams[stream].Device
	return b.c.newTask(Task{Name: b.c.taskName(dev, string(kind)+"/"+b.name), Kind: kind, Phase: "comm",
		Stage: b.stage, Replica: r, Streams: []int{stream}, Reads: reads, Writes: writes, Parts: parts,
		Bytes: units.Bytes(2*size) * b.dtype.Size(), Key: fmt.Sprintf("%s(%d)", kind, size), Shape: []int{size}})
}

// join appends collective id, with each replica's pack before it and
// unpack after it, to the replicas' lists (colls or gathers).
func (b *collBucket) join(lists [][]int, id int) {
	for r := range b.c.replicas() {
		dev := b.c.device(r, b.stage)
		if b.packs != nil {
			lists[dev] = append(lists[dev], b.packs[r])
		}
		lists[dev] = append(lists[dev], id)
		if b.unpacks != nil {
			lists[dev] = append(lists[dev], b.unpacks[r])
		}
	}
}

// addAllReduce adds the all-reduce of the gradients of update nodes ns
// (of one stage and dtype, in the order they become ready) over the
// replicas: in place for one, else through a bucket (Strategy.Bucket):
// each replica packs them into a flat register, which one all-reduce
// reduces, and unpacks it into registers of the reduced gradients, which
// the updates read. The replicas' tasks join their devices' collectives
// in that order.
func (c *compiler) addAllReduce(ns []*graph.Node) {
	b := c.newBucket(ns, 1, "grad")
	s := b.stage
	var regs, streams []int
	for r := range c.replicas() {
		dev := c.device(r, s)
		stream := c.commStream(dev, "coll")
		streams = append(streams, stream)
		if !b.several() {
			regs = append(regs, c.gradReg(dev, s, ns[0].Inputs[1], r))
			continue
		}
		var grads []Use
		var reduced []int
		for _, u := range ns {
			g := c.gradReg(dev, s, u.Inputs[1], r)
			grads = append(grads, Use{Reg: g, Mode: ReadFinal})
			out := c.newRegister(dev, c.p.Registers[g].Name+".reduced", c.p.Registers[g].Spec)
			c.reducedOf[dev][u.Inputs[1].ID] = out
			reduced = append(reduced, out)
		}
		whole := b.register(dev, b.name, b.n)
		regs = append(regs, whole)
		b.pack(r, stream, grads, whole, 0, b.n)
		b.unpack(r, stream, whole, reduced, 0, b.n)
	}
	id := c.newTask(Task{Name: "allreduce/" + b.name, Kind: AllReduce, Phase: "comm",
		Stage: s, Replica: -1, PerMicro: false, Streams: streams,
		Writes: regs, InPlace: true, FLOPs: units.FLOPs(b.n * c.st.DP), Bytes: b.bytes,
		Key: fmt.Sprintf("allreduce(%d,%d)", c.st.DP, b.bytes), Shape: []int{c.st.DP, b.n}})
	b.join(c.colls, id)
}

// addZeroScatter adds ZeRO's reduce-scatter of the gradients of update
// nodes ns (of one stage and dtype) over the replicas: each gets its part
// of the (weighted) mean, on its coll stream, once the iteration's
// gradient is whole. One gradient is scattered from its register; several
// (Strategy.Bucket) are packed part by part into a bucket (Task.Parts),
// whose part each replica gets and unpacks into the parts of the
// gradients.
func (c *compiler) addZeroScatter(ns []*graph.Node) {
	b := c.newBucket(ns, 1, "grad")
	s := b.stage
	task := Task{Name: "reducescatter/" + b.name, Kind: ReduceScatter, Phase: "comm",
		Stage: s, Replica: -1, FLOPs: units.FLOPs(b.n * c.st.DP), Bytes: b.bytes,
		Key: fmt.Sprintf("reducescatter(%d,%d)", c.st.DP, b.bytes), Shape: []int{c.st.DP, b.n}}
	partReg := func(dev int, grad *graph.Tensor, r int) int {
		part := grad.Spec.Shape.Clone()
		part[0] /= c.st.DP
		out := c.newRegister(dev, c.taskName(dev, fmt.Sprintf("%s [zero %d/%d]", grad.Name, r, c.st.DP)), graph.Spec{Shape: part, DType: b.dtype})
		c.partOf[dev][grad.ID] = out
		return out
	}
	for r := range c.replicas() {
		dev := c.device(r, s)
		stream := c.commStream(dev, "coll")
		task.Streams = append(task.Streams, stream)
		if !b.several() {
			part := partReg(dev, ns[0].Inputs[1], r) // before gradReg, which may add an accumulator: registers in the order plans always had
			task.Reads = append(task.Reads, Use{Reg: c.gradReg(dev, s, ns[0].Inputs[1], r), Mode: ReadFinal})
			task.Writes = append(task.Writes, part)
			continue
		}
		var grads []Use
		var parts []int
		for _, u := range ns {
			grads = append(grads, Use{Reg: c.gradReg(dev, s, u.Inputs[1], r), Mode: ReadFinal})
			parts = append(parts, partReg(dev, u.Inputs[1], r))
		}
		whole := b.register(dev, b.name, b.n)
		mine := b.register(dev, fmt.Sprintf("%s [zero %d/%d]", b.name, r, c.st.DP), b.n/c.st.DP)
		task.Reads = append(task.Reads, Use{Reg: whole, Mode: ReadFinal})
		task.Writes = append(task.Writes, mine)
		b.pack(r, stream, grads, whole, c.st.DP, b.n)
		b.unpack(r, stream, mine, parts, 0, b.n/c.st.DP)
	}
	b.join(c.colls, c.newTask(task))
}

// addZeroGather adds ZeRO's all-gather of the updated weights of update
// nodes ns (of one stage and dtype): every replica's part into every
// replica's whole, on the coll streams. One weight is gathered from its
// part into its register; several (Strategy.Bucket) are packed, each
// replica's parts into a flat register, gathered into a bucket laid out
// part by part, and unpacked part by part (Task.Parts) into the weights.
func (c *compiler) addZeroGather(ns []*graph.Node) {
	b := c.newBucket(ns, 0, "weight")
	s := b.stage
	task := Task{Name: "allgather/" + b.name, Kind: AllGather, Phase: "comm",
		Stage: s, Replica: -1, Bytes: b.bytes, Key: fmt.Sprintf("allgather(%d,%d)", c.st.DP, b.bytes), Shape: []int{c.st.DP, b.n}}
	for r := range c.replicas() {
		dev := c.device(r, s)
		stream := c.commStream(dev, "coll")
		task.Streams = append(task.Streams, stream)
		if !b.several() {
			w := ns[0].Inputs[0]
			task.Reads = append(task.Reads, Use{Reg: c.masterOf[dev][w.ID], Mode: ReadFinal})
			task.Writes = append(task.Writes, c.regOf[dev][w.ID])
			continue
		}
		var parts []Use
		var weights []int
		for _, u := range ns {
			parts = append(parts, Use{Reg: c.masterOf[dev][u.Inputs[0].ID], Mode: ReadFinal})
			weights = append(weights, c.regOf[dev][u.Inputs[0].ID])
		}
		mine := b.register(dev, fmt.Sprintf("%s [zero %d/%d]", b.name, r, c.st.DP), b.n/c.st.DP)
		whole := b.register(dev, b.name, b.n)
		task.Reads = append(task.Reads, Use{Reg: mine, Mode: ReadFinal})
		task.Writes = append(task.Writes, whole)
		b.pack(r, stream, parts, mine, 0, b.n/c.st.DP)
		b.unpack(r, stream, whole, weights, c.st.DP, b.n)
	}
	b.join(c.gathers, c.newTask(task))
}

// buildUpdates adds the optimizer's update tasks on every device.
func (c *compiler) buildUpdates() error {
	return c.eachTP(c.buildUpdatesTP)
}

func (c *compiler) buildUpdatesTP() error {
	for r := range c.replicas() {
		for _, n := range c.updateNodes() {
			dev := c.device(r, c.stage[n.ID])
			// Reads are the op's inputs in order: the weight and its state,
			// updated in place, and the iteration's gradient.
			var reads []Use
			var writes []int
			mutated := n.Op.(graph.Mutator).Mutates()
			_, split := c.zero[n.Inputs[0].ID] // ZeRO: the replica's parts of the weight, its state and its gradient
			for i, in := range n.Inputs {
				reduced, bucketed := c.reducedOf[dev][in.ID] // unpacked from a bucket
				switch {
				case slices.Contains(mutated, i):
					reg, ok := c.masterOf[dev][in.ID]
					if !ok || !split {
						reg = c.regOf[dev][in.ID]
					}
					reads = append(reads, Use{Reg: reg, Mode: ReadPrev})
					writes = append(writes, reg)
				case split:
					reads = append(reads, Use{Reg: c.partOf[dev][in.ID], Mode: ReadFinal})
				case bucketed:
					reads = append(reads, Use{Reg: reduced, Mode: ReadFinal})
				default:
					reads = append(reads, Use{Reg: c.gradReg(dev, c.stage[n.ID], in, r), Mode: ReadFinal})
				}
			}
			op, err := graph.EncodeOp(n.Op) // fails on attributes JSON cannot hold: a NaN learning rate
			if err != nil {
				return fmt.Errorf("plans: update of %s: %w", n.Inputs[0].Name, err)
			}
			priced := n
			if split {
				priced = c.partNode(n)
			}
			cost, w := priced.Cost(), c.workOf(priced)
			task := c.newTask(Task{Name: c.taskName(dev, "update/"+c.weightName(dev, n.Inputs[0])), Kind: Compute, Phase: "update",
				Stage: c.stage[n.ID], Replica: r, Streams: []int{c.stream(dev, "compute")},
				Op: &op, Reads: reads, Writes: writes, InPlace: true, FLOPs: cost.FLOPs, Bytes: cost.Bytes, Key: w.key, Shape: w.shape, Family: w.family})
			c.updates[dev] = append(c.updates[dev], task)
		}
	}
	gather := bucketer{c: c, flush: c.addZeroGather}
	for i, n := range c.updateNodes() {
		if _, ok := c.zero[n.Inputs[0].ID]; ok && c.st.Zero < 3 { // stage 3 keeps no whole weight to write back
			gather.add(n, i)
		}
	}
	gather.close()
	return nil
}

// partNode is update node n as a ZeRO replica runs it: on its part of
// the weight, the state and the gradient (the first axis over the
// replicas), so that it is priced, and calibrated, as the work it does.
func (c *compiler) partNode(n *graph.Node) *graph.Node {
	part := func(ts []*graph.Tensor) []*graph.Tensor {
		out := make([]*graph.Tensor, len(ts))
		for i, t := range ts {
			p := *t
			p.Spec.Shape = t.Spec.Shape.Clone()
			if len(p.Spec.Shape) > 0 {
				p.Spec.Shape[0] /= c.st.DP
			}
			out[i] = &p
		}
		return out
	}
	m := *n
	m.Inputs, m.Outputs = part(n.Inputs), part(n.Outputs)
	return &m
}

// sizeSlots gives every register the slots the schedule needs: one per
// micro-batch in flight on its stage if a backward task or a transfer reads
// it later, else one.
func (c *compiler) sizeSlots() {
	readBy := make([][]int, len(c.p.Registers))
	for _, t := range c.p.Tasks {
		for _, u := range t.Reads {
			readBy[u.Reg] = append(readBy[u.Reg], t.ID)
		}
	}
	// inflight walks a schedule: it is asked once per replica and stage,
	// not once per read of the many registers of each.
	held := map[[2]int]int{}
	inflight := func(replica, stage int) int {
		n, ok := held[[2]int{replica, stage}]
		if !ok {
			n = c.inflight(replica, stage)
			held[[2]int{replica, stage}] = n
		}
		return n
	}
	for i := range c.p.Registers {
		reg := &c.p.Registers[i]
		if reg.Persistent || len(reg.Writers) == 0 || c.p.Tasks[reg.Writers[0]].InPlace || !c.p.Tasks[reg.Writers[0]].PerMicro {
			continue
		}
		replica := c.p.Replica(reg.Device)
		mb := c.st.Micros(replica)
		writerPhase := c.p.Tasks[reg.Writers[0]].Phase
		for _, t := range readBy[i] {
			rt := &c.p.Tasks[t]
			switch {
			case rt.Kind == Transfer:
				reg.Slots = max(reg.Slots, min(2, mb))
			case rt.Phase == "backward" && writerPhase != "backward":
				reg.Slots = max(reg.Slots, inflight(replica, rt.Stage))
			}
		}
		if c.st.MaxSlots > 0 {
			reg.Slots = min(reg.Slots, c.st.MaxSlots)
		}
	}
}

// workKey identifies a node's work for calibration: op type, input specs
// and attributes.
func workKey(n *graph.Node) string {
	var b strings.Builder
	b.WriteString(n.Op.Type())
	b.WriteByte('(')
	for i, in := range n.Inputs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(in.Spec.String())
	}
	b.WriteByte(')')
	if attrs, err := json.Marshal(n.Op); err == nil && string(attrs) != "{}" {
		b.Write(attrs)
	}
	return b.String()
}

// workFamily is workKey with the micro-batch dimension — the batch axis
// of every input that is not a weight or optimizer state (batchAxisOf),
// and the attributes' shapes that follow it (familyAttrs) — left out.
func workFamily(n *graph.Node) string {
	var b strings.Builder
	b.WriteString(n.Op.Type())
	b.WriteByte('(')
	batch := 0
	for i, in := range n.Inputs {
		if i > 0 {
			b.WriteByte(',')
		}
		if in.Persistent() {
			b.WriteString(in.Spec.String())
			continue
		}
		axis := batchAxisOf(in)
		b.WriteString(batchlessAt(in.Spec, axis))
		if batch == 0 && len(in.Spec.Shape) > axis {
			batch = in.Spec.Shape[axis]
		}
	}
	b.WriteByte(')')
	if attrs, err := json.Marshal(familyAttrs(n.Op, batch)); err == nil && string(attrs) != "{}" {
		b.Write(attrs)
	}
	return b.String()
}

// familyAttrs is what workFamily writes of an op's attributes: the op,
// except where an attribute is a shape that follows the micro-batch (the
// input shape of a convolution's data gradient, a reshape's target). Its
// leading axis is written relative to batch, the batch axis of the op's
// first input that is not persistent: X [4,32,14,14] at 4 as
// "[b,32,14,14]", a reshape of [4,8,32] to [32,32] as "[8b,32]". A family
// holds one layer's shapes at any batch size only if its attributes do
// not name the batch (TestFamiliesSpanBatches).
func familyAttrs(op graph.Op, batch int) any {
	switch op := op.(type) {
	case graph.Conv2DGradData:
		return struct {
			graph.Window
			X string
		}{op.Window, batchShape(op.X, batch)}
	case graph.Reshape:
		return struct{ Shape string }{batchShape(op.Shape, batch)}
	}
	return op
}

// batchShape writes s with its leading axis as a multiple or a part of the
// batch, in lowest terms ("b", "8b", "b/8", "3b/2"). (The batch is an
// input's batch axis, which may hold a sequence's tokens as well, as a
// reshape's [b·seq, hidden] does.)
func batchShape(s graph.Shape, batch int) string {
	if len(s) == 0 || batch <= 0 || s[0] <= 0 {
		return s.String()
	}
	g := gcd(s[0], batch)
	lead := "b"
	if n := s[0] / g; n != 1 {
		lead = strconv.Itoa(n) + lead
	}
	if d := batch / g; d != 1 {
		lead += "/" + strconv.Itoa(d)
	}
	return withLead(s, lead)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// withLead writes a shape of at least one axis with its leading axis as
// lead.
func withLead(s graph.Shape, lead string) string {
	if len(s) == 1 {
		return "[" + lead + "]"
	}
	return "[" + lead + "," + strings.TrimPrefix(s[1:].String(), "[")
}

// batchless writes a spec with its leading (batch) axis as "b".
func batchless(s graph.Spec) string { return batchlessAt(s, 0) }

// batchlessAt writes a spec with its axis axis as "b" (as it is if it has
// no such axis).
func batchlessAt(s graph.Spec, axis int) string {
	if len(s.Shape) <= axis {
		return s.String()
	}
	parts := make([]string, len(s.Shape))
	for i, d := range s.Shape {
		parts[i] = strconv.Itoa(d)
	}
	parts[axis] = "b"
	return s.DType.String() + "[" + strings.Join(parts, ",") + "]"
}

// batchAxisOf is the axis of t that holds the micro-batch: the leading
// one, but for the statistics [parts, T, 3] of a vocabulary-parallel loss
// (graph.VocabStats), their sum over the tensor-parallel group and their
// gradient (graph.VocabLossGrad), whose second axis holds the batch's
// tokens.
func batchAxisOf(t *graph.Tensor) int {
	for n := t.Producer; n != nil; n = n.Inputs[0].Producer {
		switch n.Op.(type) {
		case graph.VocabStats, graph.VocabLossGrad:
			return 1
		case graph.TPSum:
			continue
		}
		return 0
	}
	return 0
}

// workShape encodes a node's work as integers for exact-shape cost
// lookups: each input's dimensions followed by 0 (dimensions are
// positive), then the op's non-negative integer and boolean attributes in
// field order.
func workShape(n *graph.Node) []int {
	var s []int
	for _, in := range n.Inputs {
		s = append(s, in.Spec.Shape...)
		s = append(s, 0)
	}
	var attrs any
	if b, err := json.Marshal(n.Op); err == nil && json.Unmarshal(b, &attrs) == nil {
		s = appendInts(s, attrs)
	}
	return s
}

// appendInts appends the integers and booleans found in a decoded JSON
// value, objects in key order.
func appendInts(s []int, v any) []int {
	switch v := v.(type) {
	case float64:
		if v == float64(int(v)) && v >= 0 {
			s = append(s, int(v))
		}
	case bool:
		if v {
			s = append(s, 1)
		} else {
			s = append(s, 0)
		}
	case []any:
		for _, x := range v {
			s = appendInts(s, x)
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s = appendInts(s, v[k])
		}
	}
	return s
}
