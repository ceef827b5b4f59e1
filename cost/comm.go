package cost

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// Errors of the communication model.
var (
	ErrGroup       = errors.New("cost: bad device group")
	ErrUnsupported = errors.New("cost: unsupported algorithm")
)

// Comm is the communication model of a cluster: point-to-point transfers
// and collectives over the routes the topology gives. It caches the
// bandwidth of each pattern it has priced (bandwidths do not depend on the
// message size) and each collective's Estimate, and is safe for concurrent
// use.
//
// # Flows and channels
//
// Every algorithm is priced as phases; a phase is a set of concurrent
// flows (src → dst, with a weight: the share of the phase's volume the flow
// carries). A phase moving V bytes per unit of weight at rate B takes
//
//	T = V/B + steps·α
//
// B comes from channel packing, as NCCL builds channels: channel 1 routes
// every flow by the topology's rule (widest path, then fewest hops, then
// least latency) over the links' achievable bandwidths (bandwidth ×
// efficiency), and runs at the rate the most loaded link allows, min over
// links of capacity / (sum of the weights of the flows crossing it). Its
// use is subtracted and the next channel is routed on what is left — new
// ring orders, other NVLinks, other NICs — until a channel would add less
// than a quarter of the first, a flow finds no capacity left, a flow would
// cross a kind of link (NVLink, PCIe, InfiniBand, …) that channel 1 did
// not (NCCL builds every channel from one path type: it does not add PCIe
// rings to NVLink ones), or MaxChannels is reached. B is the sum of the channels' rates. So a
// DGX-1V's hybrid cube mesh yields four rings (two over its double NVLinks,
// one each way, two over its single ones), and a node with eight NICs
// yields eight inter-node channels, while one NIC per node caps a ring at
// that NIC. α, the per-step latency, is taken from channel 1's routes.
type Comm struct {
	c *topology.Cluster
	// MaxChannels bounds channel packing (NCCL's default maximum is 32;
	// 16 covers 8 NICs in both directions).
	MaxChannels int

	mu        sync.Mutex
	cache     map[string]packed
	estimates map[estimateKey]Estimate                // Collective's, by its arguments
	orders    map[string][]topology.DeviceID          // baseOrders' rings, by segment
	direct    map[[2]topology.DeviceID]topology.Route // point-to-point routes, on the full capacities
}

// NewComm returns the communication model of c.
func NewComm(c *topology.Cluster) *Comm {
	return &Comm{c: c, MaxChannels: 16, cache: map[string]packed{}, estimates: map[estimateKey]Estimate{}, orders: map[string][]topology.DeviceID{}, direct: map[[2]topology.DeviceID]topology.Route{}}
}

// Cluster is the cluster being modeled.
func (m *Comm) Cluster() *topology.Cluster { return m.c }

// PointToPoint is the time to send size bytes from src to dst along their
// route: the route's latency plus size over its bottleneck achievable
// bandwidth (min over its links of bandwidth × efficiency).
func (m *Comm) PointToPoint(src, dst topology.DeviceID, size units.Bytes) (time.Duration, error) {
	t, _, err := m.PointToPointUse(src, dst, size)
	return t, err
}

// LinkUse is the share of one direction of a link's achievable bandwidth
// that a transfer or a collective uses while it runs alone, averaged over
// its time (its latency uses none). Concurrent ones whose shares of a link
// add up above 1 must slow down; the simulator shares links so. On a link
// whose directions share its bandwidth (Duplex < 1), a use of either
// direction comes with one of Both, the share of the two directions'
// together (topology.Link.Both).
type LinkUse struct {
	Link    topology.LinkID
	Forward bool
	Both    bool // the link's two directions together; Forward is false
	Share   float64
}

// PointToPointUse is PointToPoint with the links the transfer uses: each
// link of its route at the route's bottleneck rate, for the part of its
// time that is not latency.
func (m *Comm) PointToPointUse(src, dst topology.DeviceID, size units.Bytes) (time.Duration, []LinkUse, error) {
	if err := m.checkGroup([]topology.DeviceID{src}); err != nil {
		return 0, nil, err
	}
	if err := m.checkGroup([]topology.DeviceID{dst}); err != nil {
		return 0, nil, err
	}
	if size < 0 {
		return 0, nil, fmt.Errorf("%w: negative size %d", ErrGroup, size)
	}
	if src == dst {
		return 0, nil, nil
	}
	r, ok := m.directRoute(src, dst)
	if !ok {
		return 0, nil, fmt.Errorf("%w from %s to %s", topology.ErrNoRoute, m.c.Devices[src].Name, m.c.Devices[dst].Name)
	}
	moving := size.Over(r.Bandwidth)
	t := r.Latency + moving
	if t == 0 {
		return 0, nil, nil
	}
	uses := make([]LinkUse, 0, len(r.Hops))
	busy := moving.Seconds() / t.Seconds()
	for _, h := range r.Hops {
		l := m.c.Links[h.Link]
		uses = append(uses, LinkUse{Link: h.Link, Forward: h.Forward, Share: float64(r.Bandwidth) / float64(l.Effective()) * busy})
		if l.HalfShared() {
			uses = append(uses, LinkUse{Link: h.Link, Both: true, Share: float64(r.Bandwidth) / float64(l.Both()) * busy})
		}
	}
	return t, uses, nil
}

// directRoute is the route of a transfer from src to dst on the full
// capacities (cached: every transfer between two devices asks for it).
func (m *Comm) directRoute(src, dst topology.DeviceID) (topology.Route, bool) {
	key := [2]topology.DeviceID{src, dst}
	m.mu.Lock()
	r, ok := m.direct[key]
	m.mu.Unlock()
	if ok {
		return r, true
	}
	if r, ok = m.c.RouteWith(src, dst, m.full()); ok {
		m.mu.Lock()
		m.direct[key] = r
		m.mu.Unlock()
	}
	return r, ok
}

// usage sums the phases of a collective: by resource (packed.bw's keys),
// the share of its bandwidth times the seconds it is used so.
type usage map[int]float64

// add records a phase of t over pattern p.
func (u usage) add(m *Comm, p packed, t time.Duration) {
	for i, bw := range p.bw {
		l, _, both := resource(i)
		capacity := m.c.Links[l].Effective()
		if both {
			capacity = m.c.Links[l].Both()
		}
		u[i] += bw / float64(capacity) * t.Seconds()
	}
}

// uses averages the phases over the collective's whole time.
func (u usage) uses(total time.Duration) []LinkUse {
	if total <= 0 {
		return nil
	}
	out := make([]LinkUse, 0, len(u))
	for _, i := range slices.Sorted(maps.Keys(u)) {
		if share := u[i] / total.Seconds(); share > 0 {
			l, fwd, both := resource(i)
			out = append(out, LinkUse{Link: l, Forward: fwd, Both: both, Share: share})
		}
	}
	return out
}

// A resource of channel packing is one direction of a link, 2·link (+1
// backward), or both directions of a link whose directions share its
// bandwidth (Duplex < 1), −1 − link.
func directed(h topology.Hop) int {
	if h.Forward {
		return 2 * int(h.Link)
	}
	return 2*int(h.Link) + 1
}

func bothWays(l topology.LinkID) int { return -1 - int(l) }

// resource decodes a resource index.
func resource(i int) (l topology.LinkID, fwd, both bool) {
	if i < 0 {
		return topology.LinkID(-1 - i), false, true
	}
	return topology.LinkID(i / 2), i%2 == 0, false
}

// full gives every link its achievable bandwidth.
func (m *Comm) full() topology.Capacity {
	return func(l topology.LinkID, _ bool) units.BytesPerSecond { return m.c.Links[l].Effective() }
}

// flow is one concurrent transfer of a phase.
type flow struct {
	src, dst topology.DeviceID
	w        float64
}

// packed is a priced pattern.
type packed struct {
	rate     float64 // bytes/s per unit of weight, summed over channels
	channels int
	bw       map[int]float64                        // bytes/s the pattern moves over each resource (see resource), over all channels
	lat      map[[2]topology.DeviceID]time.Duration // channel 1's route latencies
}

func (p packed) latency(a, b topology.DeviceID) time.Duration {
	return p.lat[[2]topology.DeviceID{a, b}]
}

// maxLatency is the largest route latency among the pattern's flows.
func (p packed) maxLatency() time.Duration {
	var mx time.Duration
	for _, l := range p.lat {
		mx = max(mx, l)
	}
	return mx
}

// pack prices a pattern by channel packing (see Comm). gen returns the
// flows of channel ch given the capacities left.
func (m *Comm) pack(key string, gen func(ch int, capacity topology.Capacity) []flow) (packed, error) {
	channels := max(1, m.MaxChannels)
	key = strconv.Itoa(channels) + "|" + key // MaxChannels may change between calls
	m.mu.Lock()
	p, ok := m.cache[key]
	m.mu.Unlock()
	if ok {
		return p, nil
	}
	links := m.c.Links
	// res is what the channels so far left of each directed link, and
	// after them of both directions of each link (res[2·len(links) + l],
	// limiting only a link whose directions share its bandwidth).
	res := make([]float64, 3*len(links))
	both := res[2*len(links):]
	for i, l := range links {
		res[2*i], res[2*i+1] = float64(l.Effective()), float64(l.Effective())
		both[i] = math.Inf(1)
		if l.HalfShared() {
			both[i] = float64(l.Both())
		}
	}
	// left is what the channels so far left of each directed link (none
	// below a millionth of it), as the channel's searches ask for it: of a
	// link whose directions share its bandwidth, no more than both
	// directions have left.
	left := make([]units.BytesPerSecond, len(res))
	capacity := func(l topology.LinkID, fwd bool) units.BytesPerSecond {
		d := left[2*int(l)+1]
		if fwd {
			d = left[2*int(l)]
		}
		return min(d, left[2*len(links)+int(l)])
	}
	p = packed{lat: map[[2]topology.DeviceID]time.Duration{}, bw: map[int]float64{}}
	var first float64
	load := make([]float64, len(res))
	families := map[string]bool{}
	for ch := 0; ch < channels; ch++ {
		for i, r := range res {
			left[i] = units.BytesPerSecond(r)
			if r <= 1e-6*float64(links[i/2%len(links)].Effective()) {
				left[i] = 0
			}
		}
		flows := gen(ch, capacity)
		routes, found := m.routes(flows, capacity)
		clear(load)
		routed := true
		var lats [][3]int64
		for i, f := range flows {
			if f.src == f.dst || f.w == 0 {
				continue
			}
			r, ok := routes[i], found[i]
			if !ok {
				if ch == 0 {
					return packed{}, fmt.Errorf("%w from %s to %s", topology.ErrNoRoute, m.c.Devices[f.src].Name, m.c.Devices[f.dst].Name)
				}
				routed = false
				break
			}
			for _, h := range r.Hops {
				load[directed(h)] += f.w
				if links[h.Link].HalfShared() {
					load[2*len(links)+int(h.Link)] += f.w
				}
				fam := m.family(h.Link)
				if ch == 0 {
					families[fam] = true
				} else if !families[fam] {
					routed = false // a slower path type than channel 1's
				}
			}
			lats = append(lats, [3]int64{int64(f.src), int64(f.dst), int64(r.Latency)})
		}
		if !routed {
			break
		}
		rate := math.Inf(1)
		for i, l := range load {
			if l > 0 {
				rate = min(rate, res[i]/l)
			}
		}
		if math.IsInf(rate, 1) { // nothing crosses a link
			p.rate = rate
			break
		}
		if rate <= 0 || ch > 0 && rate < first/4 {
			break
		}
		if ch == 0 {
			first = rate
			for _, l := range lats {
				k := [2]topology.DeviceID{topology.DeviceID(l[0]), topology.DeviceID(l[1])}
				p.lat[k] = max(p.lat[k], time.Duration(l[2]))
			}
		}
		for i, l := range load {
			res[i] -= rate * l
			if l > 0 {
				k := i
				if i >= 2*len(links) {
					k = bothWays(topology.LinkID(i - 2*len(links)))
				}
				p.bw[k] += rate * l
			}
		}
		p.rate += rate
		p.channels++
	}
	m.mu.Lock()
	m.cache[key] = p
	m.mu.Unlock()
	return p, nil
}

// routes routes every flow under capacity (by flow; flows that move
// nothing are not routed), with one search of widest paths per source.
func (m *Comm) routes(flows []flow, capacity topology.Capacity) ([]topology.Route, []bool) {
	routes, found := make([]topology.Route, len(flows)), make([]bool, len(flows))
	bySrc := map[topology.DeviceID][]int{}
	var srcs []topology.DeviceID
	for i, f := range flows {
		if f.src == f.dst || f.w == 0 {
			continue
		}
		if _, ok := bySrc[f.src]; !ok {
			srcs = append(srcs, f.src)
		}
		bySrc[f.src] = append(bySrc[f.src], i)
	}
	for _, src := range srcs {
		idx := bySrc[src]
		dsts := make([]topology.DeviceID, len(idx))
		for k, i := range idx {
			dsts[k] = flows[i].dst
		}
		rs, ok := m.c.RoutesWith(src, dsts, capacity)
		for k, i := range idx {
			routes[i], found[i] = rs[k], ok[k]
		}
	}
	return routes, found
}

func (m *Comm) family(l topology.LinkID) string {
	d, _ := m.c.Links[l].Kind.Defaults()
	return d.Family
}

// phaseTime is V/B for a volume v per unit of weight.
func phaseTime(v float64, p packed) time.Duration {
	if v <= 0 || math.IsInf(p.rate, 1) {
		return 0
	}
	return units.Bytes(math.Round(v)).Over(units.BytesPerSecond(p.rate))
}

func (m *Comm) checkGroup(group []topology.DeviceID) error {
	if len(group) == 0 {
		return fmt.Errorf("%w: empty", ErrGroup)
	}
	seen := map[topology.DeviceID]bool{}
	for _, d := range group {
		if d < 0 || int(d) >= len(m.c.Devices) {
			return fmt.Errorf("%w: device %d not in cluster %s (%d devices)", ErrGroup, d, m.c.Name, len(m.c.Devices))
		}
		if seen[d] {
			return fmt.Errorf("%w: device %s twice", ErrGroup, m.c.Devices[d].Name)
		}
		seen[d] = true
	}
	return nil
}

// segments splits a group by node: nodes in cluster order, members in ID
// order.
func (m *Comm) segments(group []topology.DeviceID) [][]topology.DeviceID {
	byNode := map[int][]topology.DeviceID{}
	var nodes []int
	for _, d := range group {
		n := m.c.Devices[d].Node
		if _, ok := byNode[n]; !ok {
			nodes = append(nodes, n)
		}
		byNode[n] = append(byNode[n], d)
	}
	slices.Sort(nodes)
	segs := make([][]topology.DeviceID, len(nodes))
	for i, n := range nodes {
		segs[i] = byNode[n]
		slices.Sort(segs[i])
	}
	return segs
}

// exhaustiveRing is the largest member count whose ring orders are all
// searched (8!/… with branch and bound).
const exhaustiveRing = 9

// bestCycle orders members into the ring whose narrowest consecutive hop
// (widest-path bandwidth under capacity) is widest, searching every order
// for up to exhaustiveRing members (first member fixed; ties keep the
// earliest order found, so ID order wins among equals). Larger sets keep
// ID order.
func (m *Comm) bestCycle(members []topology.DeviceID, capacity topology.Capacity) []topology.DeviceID {
	n := len(members)
	if n <= 2 || n > exhaustiveRing {
		return slices.Clone(members)
	}
	w := make([][]float64, n)
	for i, a := range members {
		w[i] = make([]float64, n)
		for j, b := range m.c.WidestTo(a, members, capacity) {
			w[i][j] = float64(b)
		}
	}
	best, bestVal := make([]int, n), -1.0
	for i := range best {
		best[i] = i
	}
	path := []int{0}
	used := make([]bool, n)
	used[0] = true
	var dfs func(cur float64)
	dfs = func(cur float64) {
		if cur <= bestVal {
			return
		}
		last := path[len(path)-1]
		if len(path) == n {
			if v := min(cur, w[last][0]); v > bestVal {
				bestVal = v
				copy(best, path)
			}
			return
		}
		for j := 1; j < n; j++ {
			if !used[j] {
				used[j] = true
				path = append(path, j)
				dfs(min(cur, w[last][j]))
				path = path[:len(path)-1]
				used[j] = false
			}
		}
	}
	dfs(math.Inf(1))
	out := make([]topology.DeviceID, n)
	for i, j := range best {
		out[i] = members[j]
	}
	return out
}

// baseOrders is each segment's best ring on the full capacities (cached:
// every collective over a segment asks for it, priced or not).
func (m *Comm) baseOrders(segs [][]topology.DeviceID) [][]topology.DeviceID {
	out := make([][]topology.DeviceID, len(segs))
	for i, s := range segs {
		key := groupKey("order", s)
		m.mu.Lock()
		o, ok := m.orders[key]
		m.mu.Unlock()
		if !ok {
			o = m.bestCycle(s, m.full())
			m.mu.Lock()
			m.orders[key] = o
			m.mu.Unlock()
		}
		out[i] = o
	}
	return out
}

func ringFlows(order []topology.DeviceID, closed bool) []flow {
	var fs []flow
	for i := range order {
		j := i + 1
		if j == len(order) {
			if !closed {
				break
			}
			j = 0
		}
		fs = append(fs, flow{order[i], order[j], 1})
	}
	return fs
}

func rotate(s []topology.DeviceID, k int) []topology.DeviceID {
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// ringGen builds a ring over the group. In one node, each channel searches
// the best ring on the capacity left. Across nodes the ring visits nodes
// in order, each node's members in their best ring order, rotated by the
// channel index so that channels enter and leave nodes through different
// devices (and so different NICs), as NCCL's channels do.
func (m *Comm) ringGen(segs [][]topology.DeviceID) func(int, topology.Capacity) []flow {
	if len(segs) == 1 {
		return func(_ int, capacity topology.Capacity) []flow {
			return ringFlows(m.bestCycle(segs[0], capacity), true)
		}
	}
	base := m.baseOrders(segs)
	return func(ch int, _ topology.Capacity) []flow {
		var order []topology.DeviceID
		for _, b := range base {
			order = append(order, rotate(b, ch)...)
		}
		return ringFlows(order, true)
	}
}

func groupKey(op string, group []topology.DeviceID) string {
	var b strings.Builder
	b.WriteString(op)
	for _, d := range group {
		b.WriteString("," + strconv.Itoa(int(d)))
	}
	return b.String()
}
