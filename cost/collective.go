package cost

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Op is a collective operation.
type Op int

const (
	OpAllReduce Op = iota
	OpReduceScatter
	OpAllGather
	OpAllToAll
	OpBroadcast
)

var opNames = []string{"all-reduce", "reduce-scatter", "all-gather", "all-to-all", "broadcast"}

func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// BusFactor is nccl-tests' factor from algorithm bandwidth (size/time) to
// bus bandwidth, the per-link rate that is comparable across group sizes
// (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n−1)/n; reduce-scatter,
// all-gather and all-to-all (n−1)/n; broadcast 1.
func (o Op) BusFactor(n int) float64 {
	if n < 2 {
		return 0
	}
	switch o {
	case OpAllReduce:
		return 2 * float64(n-1) / float64(n)
	case OpBroadcast:
		return 1
	}
	return float64(n-1) / float64(n)
}

// Algo is a collective algorithm.
type Algo int

const (
	Auto         Algo = iota // the fastest this model predicts, as NCCL's tuner picks
	Ring                     // ring (pipelined chain for broadcast)
	Tree                     // double binary tree across nodes, chains within (all-reduce)
	Hierarchical             // intra-node, then inter-node over rails, then intra-node
	Direct                   // every rank sends every other its part at once (all-to-all; across processes, see Collective)
)

var algoNames = []string{"auto", "ring", "tree", "hierarchical", "direct"}

func (a Algo) String() string {
	if a >= 0 && int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("Algo(%d)", int(a))
}

// ParseAlgo parses an algorithm name.
func ParseAlgo(s string) (Algo, error) {
	for i, n := range algoNames {
		if strings.EqualFold(s, n) {
			return Algo(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnsupported, s, strings.Join(algoNames, ", "))
}

// algorithms lists, per op, the algorithms it has, in the order Auto
// breaks ties.
func algorithms(o Op) []Algo {
	switch o {
	case OpAllReduce:
		return []Algo{Ring, Tree, Hierarchical, Direct}
	case OpReduceScatter, OpAllGather:
		return []Algo{Ring, Hierarchical, Direct}
	case OpBroadcast:
		return []Algo{Ring}
	case OpAllToAll:
		return []Algo{Direct}
	}
	return nil
}

// candidates are the algorithms Auto chooses among for op over a group
// split into segs by node. Across processes (CPU devices of several nodes)
// all-reduce, reduce-scatter and all-gather are Direct alone, the one way
// the multi-process runtime runs them; elsewhere those ops take NCCL's
// algorithms, never Direct.
func (m *Comm) candidates(o Op, group []topology.DeviceID, segs [][]topology.DeviceID) []Algo {
	algos := algorithms(o)
	if o == OpAllToAll || o == OpBroadcast {
		return algos
	}
	if m.processes(group, segs) {
		return []Algo{Direct}
	}
	return slices.DeleteFunc(algos, func(a Algo) bool { return a == Direct })
}

// processes says whether group is CPU devices of several nodes: processes
// of a multi-process run (flowrun exec --procs places a plan's devices
// on one process per host).
func (m *Comm) processes(group []topology.DeviceID, segs [][]topology.DeviceID) bool {
	if len(segs) < 2 {
		return false
	}
	for _, d := range group {
		if m.c.Devices[d].Spec.Class != topology.CPU {
			return false
		}
	}
	return true
}

// Estimate is a priced collective.
type Estimate struct {
	Op       Op
	Algo     Algo // the algorithm used (Auto resolved)
	Ranks    int
	Size     units.Bytes
	Time     time.Duration
	Channels int                  // channels of the bandwidth-dominant phase
	AlgBW    units.BytesPerSecond // Size / Time
	BusBW    units.BytesPerSecond // AlgBW × Op.BusFactor(Ranks)
	// Links are the links the collective uses and how much of each, by
	// direction, averaged over Time (see LinkUse), in link order.
	Links []LinkUse
}

// Collective prices op over group for a buffer of size bytes, with the
// nccl-tests convention for size: the full (unsharded) buffer for
// all-reduce, reduce-scatter, all-gather and broadcast, and each rank's
// whole send buffer for all-to-all. With n ranks, m nodes, g ranks per
// node, B a phase's packed bandwidth and α its per-hop latency:
//
//	ring all-reduce       2(n−1)/n·S/B + 2(n−1)·α
//	ring reduce-scatter   (n−1)/n·S/B + (n−1)·α       (all-gather alike)
//	ring broadcast        S/B + Σ α along the chain   (pipelined from group[0])
//	tree all-reduce       S/B_t + 2·(deepest root-to-leaf latency)
//	hierarchical all-red. 2·[(g−1)/g·S/B_in + (g−1)·α_in] + 2(m−1)/m·(S/g)/B_rail + 2(m−1)·α_rail
//	hierarchical r-s/a-g  (g−1)/g·S/B_in + (g−1)·α_in + (m−1)/m·(S/g)/B_rail + (m−1)·α_rail
//	direct all-to-all     (S/n)/B + max α
//	direct r-s/a-g        (S/n)/B + max α             (each rank sends its part to every other)
//	direct all-reduce     2·c/B + 2·max α             (direct reduce-scatter, then all-gather; chunk c ≥ S/n)
//
// Ring steps are synchronous, so each waits for the slowest hop (α is the
// largest route latency of the ring). The tree is NCCL's: a chain through
// each node's ranks and two complementary binary trees over the nodes
// (heap-shaped and its mirror), each carrying half the data up and down at
// once; B_t packs those flows, so a tree costs 2S/B wherever a rank relays
// in both trees' directions, and only S/B when two nodes exchange halves.
// Hierarchical runs g rail rings at once (rank i of every node), sharing
// the NICs; it needs the same number of ranks on every node.
//
// Direct is how the multi-process CPU runtime (runtime.NewRankRunner) runs
// collectives, one device per process: every rank sends each other rank
// its message at once, so each rank's link carries n−1 flows, priced by
// channel packing like any pattern (on a switch, B is the rank's port over
// n−1 flows, and a phase takes (n−1)/n·S/B). An all-reduce is a
// reduce-scatter (rank k gets chunk k of every register and reduces it)
// then an all-gather of the reduced chunks: 2 latency steps, not 2(n−1).
// Its chunks are those of the runtime (chunkOf there): S/n rounded up to
// 64 bytes, at least 16 KiB, so that a register of at most 16 KiB is
// reduced by group[0] alone (everyone sends it the whole register, it
// sends back the result: (n−1)·S through its link each way), and one of
// less than n·16 KiB by its first ⌈S/16 KiB⌉ ranks. Sizes map to the
// runtime's values at 4 bytes each (it holds float32 and int32 values),
// so the 16 KiB are its 4,096 values and the 64 bytes its 16. On a switch
// Direct is slower than a ring where (n−1)·(c − S/n)/B exceeds (n−2)·α, c
// the largest chunk: for small registers ((n−1)²/n·S/B when group[0]
// reduces alone) and, with two ranks, for one not split in equal chunks;
// it is what the runtime does.
//
// Auto prices every algorithm the op has (ring, tree and, across nodes
// with equal ranks per node, hierarchical, for all-reduce) and takes the
// fastest, ties going to that order — the rule of NCCL's tuner, which also
// predicts each algorithm's time and picks the least. Across nodes trees
// win small messages (2·depth steps of latency, not 2(n−1)); rings win
// large ones in a node (2(n−1)/n·S/B against 2S/B); hierarchical wins
// large ones when the intra-node fabric is much faster than the network.
// Across processes (CPU devices of several nodes) Auto is Direct, the
// runtime's only algorithm there; elsewhere it never picks Direct for
// all-reduce, reduce-scatter or all-gather, which NCCL does not have.
//
// Estimates are cached by op, group, size, algorithm and MaxChannels (a
// simulated plan asks for the same collectives every micro-batch and
// iteration, and every replica it stands for); each call gets its own
// copy of Links.
func (m *Comm) Collective(op Op, group []topology.DeviceID, size units.Bytes, algo Algo) (Estimate, error) {
	k := estimateKey{op: op, algo: algo, size: size, channels: m.MaxChannels, group: groupKey("", group)}
	m.mu.Lock()
	e, ok := m.estimates[k]
	m.mu.Unlock()
	if ok {
		e.Links = slices.Clone(e.Links)
		return e, nil
	}
	e, err := m.collective(op, group, size, algo)
	if err != nil {
		return e, err
	}
	m.mu.Lock()
	m.estimates[k] = e
	m.mu.Unlock()
	e.Links = slices.Clone(e.Links)
	return e, nil
}

// estimateKey is what a collective's Estimate depends on, besides the
// cluster.
type estimateKey struct {
	op       Op
	algo     Algo
	size     units.Bytes
	channels int
	group    string // groupKey: the ranks in order
}

// collective is Collective, uncached.
func (m *Comm) collective(op Op, group []topology.DeviceID, size units.Bytes, algo Algo) (Estimate, error) {
	if err := m.checkGroup(group); err != nil {
		return Estimate{}, err
	}
	if size < 0 {
		return Estimate{}, fmt.Errorf("%w: negative size %d", ErrGroup, size)
	}
	algos := algorithms(op)
	if algos == nil {
		return Estimate{}, fmt.Errorf("%w: unknown op %v", ErrUnsupported, op)
	}
	n := len(group)
	segs := m.segments(group)
	if algo == Auto {
		algos = m.candidates(op, group, segs)
	} else {
		found := false
		for _, a := range algos {
			found = found || a == algo
		}
		if !found {
			return Estimate{}, fmt.Errorf("%w: %v has no %v algorithm (have %v)", ErrUnsupported, op, algo, algos)
		}
		algos = []Algo{algo}
	}
	best := Estimate{Time: time.Duration(math.MaxInt64)}
	var firstErr error
	for _, a := range algos {
		if algo == Auto && a == Hierarchical && !uniform(segs) {
			continue
		}
		e, err := m.price(op, a, group, segs, size)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if e.Time < best.Time {
			best = e
		}
	}
	if best.Time == time.Duration(math.MaxInt64) {
		return Estimate{}, firstErr
	}
	best.Op, best.Ranks, best.Size = op, n, size
	if best.Time > 0 {
		best.AlgBW = units.BytesPerSecond(float64(size) / best.Time.Seconds())
		best.BusBW = best.AlgBW * units.BytesPerSecond(op.BusFactor(n))
	}
	return best, nil
}

func uniform(segs [][]topology.DeviceID) bool {
	if len(segs) < 2 || len(segs[0]) < 2 {
		return false
	}
	for _, s := range segs {
		if len(s) != len(segs[0]) {
			return false
		}
	}
	return true
}

func (m *Comm) price(op Op, a Algo, group []topology.DeviceID, segs [][]topology.DeviceID, size units.Bytes) (e Estimate, _ error) {
	n := len(group)
	e = Estimate{Algo: a}
	if n == 1 {
		return e, nil
	}
	u := usage{}
	defer func() { e.Links = u.uses(e.Time) }()
	S := float64(size)
	nf := float64(n)
	switch a {
	case Ring:
		if op == OpBroadcast {
			order := m.broadcastOrder(segs, group[0])
			p, err := m.pack(groupKey("bcast", order), func(int, topology.Capacity) []flow { return ringFlows(order, false) })
			if err != nil {
				return e, err
			}
			var fill time.Duration
			for i := 0; i+1 < len(order); i++ {
				fill += p.latency(order[i], order[i+1])
			}
			e.Time, e.Channels = phaseTime(S, p)+fill, p.channels
			u.add(m, p, phaseTime(S, p))
			break
		}
		p, err := m.pack(groupKey("ring", group), m.ringGen(segs))
		if err != nil {
			return e, err
		}
		e.Channels = p.channels
		steps, vol := n-1, (nf-1)/nf*S
		if op == OpAllReduce {
			steps, vol = 2*steps, 2*vol
		}
		e.Time = phaseTime(vol, p) + time.Duration(steps)*p.maxLatency()
		u.add(m, p, phaseTime(vol, p))
	case Tree:
		t, ch, err := m.tree(group, segs, S, u)
		if err != nil {
			return e, err
		}
		e.Time, e.Channels = t, ch
	case Hierarchical:
		if !uniform(segs) && len(segs) > 1 {
			return e, fmt.Errorf("%w: hierarchical %v needs the same number of ranks on every node", ErrUnsupported, op)
		}
		t, ch, err := m.hierarchical(op, group, segs, S, u)
		if err != nil {
			return e, err
		}
		e.Time, e.Channels = t, ch
	case Direct:
		if op == OpAllReduce {
			t, ch, err := m.directAllReduce(group, size, u)
			if err != nil {
				return e, err
			}
			e.Time, e.Channels = t, ch
			break
		}
		p, err := m.pack(groupKey("a2a", group), func(int, topology.Capacity) []flow { return directFlows(group, nil) })
		if err != nil {
			return e, err
		}
		e.Channels = p.channels
		e.Time = phaseTime(S/nf, p) + p.maxLatency()
		u.add(m, p, phaseTime(S/nf, p))
	}
	return e, nil
}

// The runtime's all-reduce chunks across processes (chunkOf in runtime),
// in bytes of its 4-byte values: at least 4,096 values, a multiple of 16.
const (
	directMinChunk = 4096 * 4
	directAlign    = 16 * 4
)

// DirectChunks is the bytes of each rank's chunk of an all-reduce of size
// bytes over n ranks, as the runtime splits it: equal but the last, the
// last ones empty for a small register. (The runtime's tests check that
// its split is this one.)
func DirectChunks(size units.Bytes, n int) []units.Bytes {
	per := (size + units.Bytes(n) - 1) / units.Bytes(n)
	per = max(directMinChunk, (per+directAlign-1)/directAlign*directAlign)
	out := make([]units.Bytes, n)
	for k := range out {
		out[k] = max(0, min(per, size-units.Bytes(k)*per))
	}
	return out
}

// directFlows is every member sending to every other member: to member k
// with weight w[k] (1 for all if w is nil).
func directFlows(group []topology.DeviceID, w []float64) []flow {
	var fs []flow
	for _, a := range group {
		for k, b := range group {
			if a != b && (w == nil || w[k] > 0) {
				fs = append(fs, flow{a, b, weight(w, k)})
			}
		}
	}
	return fs
}

func weight(w []float64, k int) float64 {
	if w == nil {
		return 1
	}
	return w[k]
}

// directAllReduce prices the runtime's all-reduce across processes: rank k
// receives chunk k from every other rank and reduces it, then sends the
// result to every other rank, each phase's messages all at once. With
// every chunk full the two phases are the same all-pairs pattern; with
// short or empty chunks (small registers) each flow weighs its chunk.
func (m *Comm) directAllReduce(group []topology.DeviceID, size units.Bytes, u usage) (time.Duration, int, error) {
	chunks := DirectChunks(size, len(group))
	per := float64(chunks[0])
	if chunks[len(chunks)-1] == chunks[0] {
		p, err := m.pack(groupKey("a2a", group), func(int, topology.Capacity) []flow { return directFlows(group, nil) })
		if err != nil {
			return 0, 0, err
		}
		u.add(m, p, phaseTime(2*per, p))
		return phaseTime(2*per, p) + 2*p.maxLatency(), p.channels, nil
	}
	w := make([]float64, len(chunks))
	var key strings.Builder
	for k, c := range chunks {
		w[k] = float64(c) / per
		fmt.Fprintf(&key, ":%d", c)
	}
	in, err := m.pack(groupKey("direct-in"+key.String(), group), func(int, topology.Capacity) []flow { return directFlows(group, w) })
	if err != nil {
		return 0, 0, err
	}
	out, err := m.pack(groupKey("direct-out"+key.String(), group), func(int, topology.Capacity) []flow {
		var fs []flow
		for _, f := range directFlows(group, w) {
			fs = append(fs, flow{f.dst, f.src, f.w})
		}
		return fs
	})
	if err != nil {
		return 0, 0, err
	}
	u.add(m, in, phaseTime(per, in))
	u.add(m, out, phaseTime(per, out))
	return phaseTime(per, in) + phaseTime(per, out) + in.maxLatency() + out.maxLatency(), max(in.channels, out.channels), nil
}

// broadcastOrder is the ring order starting at root.
func (m *Comm) broadcastOrder(segs [][]topology.DeviceID, root topology.DeviceID) []topology.DeviceID {
	var order []topology.DeviceID
	for _, b := range m.baseOrders(segs) {
		order = append(order, b...)
	}
	for i, d := range order {
		if d == root {
			return rotate(order, i)
		}
	}
	return order
}

// treeParent is node k's parent in tree t over m nodes: t = 0 is the
// heap-shaped tree rooted at 0, t = 1 its mirror rooted at m−1, so a node
// interior in one is (for even m) a leaf in the other. −1 for the root.
func treeParent(t, k, m int) int {
	if t == 1 {
		k = m - 1 - k
	}
	if k == 0 {
		return -1
	}
	p := (k - 1) / 2
	if t == 1 {
		p = m - 1 - p
	}
	return p
}

func (m *Comm) tree(group []topology.DeviceID, segs [][]topology.DeviceID, S float64, u usage) (time.Duration, int, error) {
	chains := m.baseOrders(segs)
	nodes := len(chains)
	var fs []flow
	for _, c := range chains {
		for i := 0; i+1 < len(c); i++ {
			fs = append(fs, flow{c[i], c[i+1], 1}, flow{c[i+1], c[i], 1})
		}
	}
	for t := range 2 {
		for k := range nodes {
			if p := treeParent(t, k, nodes); p >= 0 {
				fs = append(fs, flow{chains[k][0], chains[p][0], 0.5}, flow{chains[p][0], chains[k][0], 0.5})
			}
		}
	}
	p, err := m.pack(groupKey("tree", group), func(int, topology.Capacity) []flow { return fs })
	if err != nil {
		return 0, 0, err
	}
	chainDepth := make([]time.Duration, nodes)
	for k, c := range chains {
		for i := 0; i+1 < len(c); i++ {
			chainDepth[k] += max(p.latency(c[i], c[i+1]), p.latency(c[i+1], c[i]))
		}
	}
	var deepest time.Duration
	for t := range 2 {
		var depth func(k int) time.Duration
		depth = func(k int) time.Duration {
			par := treeParent(t, k, nodes)
			if par < 0 {
				return 0
			}
			return depth(par) + max(p.latency(chains[k][0], chains[par][0]), p.latency(chains[par][0], chains[k][0]))
		}
		for k := range nodes {
			deepest = max(deepest, depth(k)+chainDepth[k])
		}
	}
	u.add(m, p, phaseTime(S, p))
	return phaseTime(S, p) + 2*deepest, p.channels, nil
}

func (m *Comm) hierarchical(op Op, group []topology.DeviceID, segs [][]topology.DeviceID, S float64, u usage) (time.Duration, int, error) {
	g, nodes := len(segs[0]), len(segs)
	gf, mf := float64(g), float64(nodes)
	var intra time.Duration
	if g > 1 {
		p, err := m.pack(groupKey("intra", group), func(_ int, capacity topology.Capacity) []flow {
			var fs []flow
			for _, s := range segs {
				fs = append(fs, ringFlows(m.bestCycle(s, capacity), true)...)
			}
			return fs
		})
		if err != nil {
			return 0, 0, err
		}
		intra = phaseTime((gf-1)/gf*S, p) + time.Duration(g-1)*p.maxLatency()
		u.add(m, p, phaseTime((gf-1)/gf*S, p))
		if op == OpAllReduce { // the intra-node phase runs twice
			u.add(m, p, phaseTime((gf-1)/gf*S, p))
		}
	}
	var inter time.Duration
	channels := 0
	if nodes > 1 {
		base := m.baseOrders(segs)
		var fs []flow
		for r := range g {
			rail := make([]topology.DeviceID, nodes)
			for k := range nodes {
				rail[k] = base[k][r]
			}
			fs = append(fs, ringFlows(rail, true)...)
		}
		p, err := m.pack(groupKey("rails", group), func(int, topology.Capacity) []flow { return fs })
		if err != nil {
			return 0, 0, err
		}
		channels = p.channels
		steps := nodes - 1
		vol := (mf - 1) / mf * S / gf
		if op == OpAllReduce {
			steps, vol = 2*steps, 2*vol
		}
		inter = phaseTime(vol, p) + time.Duration(steps)*p.maxLatency()
		u.add(m, p, phaseTime(vol, p))
	}
	if op == OpAllReduce {
		return 2*intra + inter, channels, nil
	}
	return intra + inter, channels, nil
}

// AllReduce prices an all-reduce of size bytes over group.
func (m *Comm) AllReduce(group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	e, err := m.Collective(OpAllReduce, group, size, algo)
	return e.Time, err
}

// ReduceScatter prices a reduce-scatter of a size-byte buffer over group.
func (m *Comm) ReduceScatter(group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	e, err := m.Collective(OpReduceScatter, group, size, algo)
	return e.Time, err
}

// AllGather prices an all-gather producing a size-byte buffer on each rank.
func (m *Comm) AllGather(group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	e, err := m.Collective(OpAllGather, group, size, algo)
	return e.Time, err
}

// AllToAll prices an all-to-all where each rank sends size bytes in all.
func (m *Comm) AllToAll(group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	e, err := m.Collective(OpAllToAll, group, size, algo)
	return e.Time, err
}

// Broadcast prices a broadcast of size bytes from group[0].
func (m *Comm) Broadcast(group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	e, err := m.Collective(OpBroadcast, group, size, algo)
	return e.Time, err
}

// AllReduce prices an all-reduce on cluster c (see Comm.Collective). For
// many calls on one cluster, keep a Comm: it caches bandwidths.
func AllReduce(c *topology.Cluster, group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	return NewComm(c).AllReduce(group, size, algo)
}

// ReduceScatter prices a reduce-scatter on cluster c.
func ReduceScatter(c *topology.Cluster, group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	return NewComm(c).ReduceScatter(group, size, algo)
}

// AllGather prices an all-gather on cluster c.
func AllGather(c *topology.Cluster, group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	return NewComm(c).AllGather(group, size, algo)
}

// AllToAll prices an all-to-all on cluster c.
func AllToAll(c *topology.Cluster, group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	return NewComm(c).AllToAll(group, size, algo)
}

// Broadcast prices a broadcast on cluster c.
func Broadcast(c *topology.Cluster, group []topology.DeviceID, size units.Bytes, algo Algo) (time.Duration, error) {
	return NewComm(c).Broadcast(group, size, algo)
}

// PointToPoint prices a transfer on cluster c.
func PointToPoint(c *topology.Cluster, src, dst topology.DeviceID, size units.Bytes) (time.Duration, error) {
	return NewComm(c).PointToPoint(src, dst, size)
}
