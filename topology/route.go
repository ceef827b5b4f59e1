package topology

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/flowkit/flowkit/units"
)

// ErrNoRoute is returned when no path joins two devices.
var ErrNoRoute = errors.New("topology: no route")

// Hop is one link of a route and the direction it is crossed in.
type Hop struct {
	Link    LinkID
	Forward bool // crossed from Link.A to Link.B
}

// Route is a path between two devices. Bandwidth is its bottleneck (under
// the capacities it was found with) and Latency the sum of its links'.
type Route struct {
	From, To  DeviceID
	Hops      []Hop
	Bandwidth units.BytesPerSecond
	Latency   time.Duration
}

// Capacity gives the usable bandwidth of a link in one direction; zero or
// less means the link cannot be used that way.
type Capacity func(l LinkID, forward bool) units.BytesPerSecond

// Route returns the route between two devices under the links' full
// bandwidths. Routes are chosen by one rule, in order:
//
//  1. maximize the bottleneck bandwidth (the widest path);
//  2. among the widest, minimize the number of hops;
//  3. then minimize the total latency;
//  4. remaining ties go to the path through lower-numbered links.
//
// Only switches forward traffic: a path never passes through a third
// device, since GPUs do not relay peer traffic (NCCL's rings are built
// over direct links for the same reason). Routes are cached.
func (c *Cluster) Route(from, to DeviceID) (Route, error) {
	if err := c.checkDevice(from); err != nil {
		return Route{}, err
	}
	if err := c.checkDevice(to); err != nil {
		return Route{}, err
	}
	key := [2]DeviceID{from, to}
	c.mu.Lock()
	r, ok := c.routes[key]
	c.mu.Unlock()
	if ok {
		return r, nil
	}
	r, ok = c.RouteWith(from, to, func(l LinkID, _ bool) units.BytesPerSecond { return c.Links[l].Bandwidth })
	if !ok {
		return Route{}, fmt.Errorf("%w from %s to %s", ErrNoRoute, c.Devices[from].Name, c.Devices[to].Name)
	}
	c.mu.Lock()
	c.routes[key] = r
	c.mu.Unlock()
	return r, nil
}

// RouteWith finds a route by the rule of Route under the given capacities
// (the cost model uses it to route on what other flows left). It reports
// false when no path has positive capacity. A route from a device to itself
// is empty, with infinite bandwidth.
func (c *Cluster) RouteWith(from, to DeviceID, capacity Capacity) (Route, bool) {
	rs, ok := c.RoutesWith(from, []DeviceID{to}, capacity)
	return rs[0], ok[0]
}

// RoutesWith is RouteWith from one device to several at once: routes[i]
// goes to to[i], ok[i] false when no path has positive capacity. The
// routes are those RouteWith finds; one search for the widest paths
// serves every destination.
func (c *Cluster) RoutesWith(from DeviceID, to []DeviceID, capacity Capacity) (routes []Route, ok []bool) {
	routes, ok = make([]Route, len(to)), make([]bool, len(to))
	s := c.searches.Get().(*search)
	defer c.searches.Put(s)
	widths := s.widestTo(c, from, to, capacity)
	for i, d := range to {
		if d == from {
			routes[i], ok[i] = Route{From: from, To: d, Bandwidth: units.BytesPerSecond(math.Inf(1))}, true
			continue
		}
		if b := widths[i]; b > 0 {
			routes[i], ok[i] = s.shortestAtLeast(c, from, d, b*(1-1e-9), capacity), true
		}
	}
	return routes, ok
}

// Widest returns, for every vertex, the largest bottleneck bandwidth of a
// path from device from that does not pass through another device.
func (c *Cluster) Widest(from DeviceID, capacity Capacity) []units.BytesPerSecond {
	s := c.searches.Get().(*search)
	defer c.searches.Put(s)
	s.widest(c, from, nil, capacity)
	out := make([]units.BytesPerSecond, c.NumVertices())
	for v := range out {
		out[v] = s.widthOf(Vertex(v))
	}
	return out
}

// WidestTo is Widest for the given devices only (out[i] for to[i]),
// searching no further than they need.
func (c *Cluster) WidestTo(from DeviceID, to []DeviceID, capacity Capacity) []units.BytesPerSecond {
	s := c.searches.Get().(*search)
	defer c.searches.Put(s)
	return s.widestTo(c, from, to, capacity)
}

// search is the scratch of route searches over one cluster, reused
// (Cluster.searches) so that a search allocates nothing: a vertex's
// entries are valid only where its stamp is the current search's.
type search struct {
	stamp      uint32
	seen, done []uint32 // stamp of the search that labeled, and that finalized, each vertex
	width      []units.BytesPerSecond
	lab        []label
	widths     widthQueue
	layer      []hopItem // shortestAtLeast's layers
	nextLayer  []hopItem
}

// label is a vertex's best path so far in shortestAtLeast.
type label struct {
	hops, avoid int
	lat         time.Duration
	prev        Vertex
	via         adjacent
}

func newSearch(n int) *search {
	return &search{seen: make([]uint32, n), done: make([]uint32, n), width: make([]units.BytesPerSecond, n), lab: make([]label, n)}
}

// next starts a search.
func (s *search) next() {
	s.stamp++
	if s.stamp == 0 { // wrapped: forget every old stamp
		clear(s.seen)
		clear(s.done)
		s.stamp = 1
	}
}

// widestTo is WidestTo on s.
func (s *search) widestTo(c *Cluster, from DeviceID, to []DeviceID, capacity Capacity) []units.BytesPerSecond {
	s.widest(c, from, to, capacity)
	out := make([]units.BytesPerSecond, len(to))
	for i, d := range to {
		out[i] = s.widthOf(Vertex(d))
	}
	return out
}

// widest labels vertices with the largest bottleneck bandwidth of a path
// from device from that does not pass through another device: every
// vertex, or (targets not nil) at least the targets, stopping once theirs
// are final.
func (s *search) widest(c *Cluster, from DeviceID, targets []DeviceID, capacity Capacity) {
	s.next()
	left := 0 // distinct targets not final yet
	for i, d := range targets {
		if slices.Index(targets, d) == i {
			left++
		}
	}
	src := Vertex(from)
	s.label(src, units.BytesPerSecond(math.Inf(1)))
	s.widths = append(s.widths[:0], widthItem{v: src, w: s.width[src]})
	for len(s.widths) > 0 {
		it := s.widths.pop()
		if s.done[it.v] == s.stamp {
			continue
		}
		s.done[it.v] = s.stamp
		if d, isDev := c.DeviceAt(it.v); isDev && slices.Contains(targets, d) {
			if left--; left == 0 {
				break // popped in order of bandwidth: final
			}
		}
		if _, isDev := c.DeviceAt(it.v); isDev && it.v != src {
			continue // devices are endpoints only
		}
		for _, a := range c.adj[it.v] {
			if d, isDev := c.DeviceAt(a.other); isDev && targets != nil && !slices.Contains(targets, d) {
				continue // an end no one asked for
			}
			w := min(s.width[it.v], capacity(a.link, a.fwd))
			if w > s.widthOf(a.other) {
				s.label(a.other, w)
				s.widths.push(widthItem{v: a.other, w: w})
			}
		}
	}
}

func (s *search) label(v Vertex, w units.BytesPerSecond) {
	s.seen[v], s.width[v] = s.stamp, w
}

func (s *search) widthOf(v Vertex) units.BytesPerSecond {
	if s.seen[v] != s.stamp {
		return 0
	}
	return s.width[v]
}

// shortestAtLeast finds the path with fewest hops, then least latency,
// then fewest fabric ports of the two ends' nodes other than the ends' own
// (Port), from from to to over links whose capacity is at least floor.
// It searches layer by layer, a layer being the vertices one hop further
// than the last, each layer in order of latency, ports avoided and vertex
// (the order a queue by hops, latency, ports and vertex pops them in), and
// stops at the layer that reaches to: its label is final then.
func (s *search) shortestAtLeast(c *Cluster, from, to DeviceID, floor units.BytesPerSecond, capacity Capacity) Route {
	// avoided are the ports of from's and to's nodes that are neither's
	// own: a route leaves and enters a node through its device's port when
	// that is as short as any other.
	ends := [2]DeviceID{from, to}
	owns, nodes := [2]Vertex{-1, -1}, [2]int{-1, -1}
	for i, d := range ends {
		if p, ok := c.Port(d); ok {
			owns[i], nodes[i] = p, c.Devices[d].Node
		}
	}
	avoided := func(v Vertex) bool {
		n := c.portNode[v]
		return n >= 0 && (n == nodes[0] || n == nodes[1]) && v != owns[0] && v != owns[1]
	}
	s.next()
	src, dst := Vertex(from), Vertex(to)
	s.seen[src], s.lab[src] = s.stamp, label{prev: -1}
	layer, next := append(s.layer[:0], hopItem{v: src}), s.nextLayer[:0]
	for len(layer) > 0 && s.seen[dst] != s.stamp {
		slices.SortFunc(layer, hopItem.compare)
		for _, it := range layer {
			if s.done[it.v] == s.stamp {
				continue // labeled again, better, since queued
			}
			s.done[it.v] = s.stamp
			if _, isDev := c.DeviceAt(it.v); isDev && it.v != src {
				continue
			}
			cur := s.lab[it.v]
			for _, a := range c.adj[it.v] {
				if capacity(a.link, a.fwd) < floor || s.done[a.other] == s.stamp {
					continue
				}
				if _, isDev := c.DeviceAt(a.other); isDev && a.other != dst {
					continue // an end, but not this route's
				}
				h, l, av := cur.hops+1, cur.lat+c.Links[a.link].Latency, cur.avoid
				if avoided(a.other) {
					av++
				}
				o := &s.lab[a.other]
				if s.seen[a.other] != s.stamp || h < o.hops || h == o.hops && (l < o.lat || l == o.lat && av < o.avoid) {
					s.seen[a.other] = s.stamp
					*o = label{hops: h, lat: l, avoid: av, prev: it.v, via: a}
					next = append(next, hopItem{v: a.other, l: l, a: av})
				}
			}
		}
		layer, next = next, layer[:0]
	}
	s.layer, s.nextLayer = layer, next
	r := Route{From: from, To: to, Bandwidth: units.BytesPerSecond(math.Inf(1))}
	for v := dst; v != src; v = s.lab[v].prev {
		a := s.lab[v].via
		r.Hops = append(r.Hops, Hop{Link: a.link, Forward: a.fwd})
		r.Latency += c.Links[a.link].Latency
		r.Bandwidth = min(r.Bandwidth, capacity(a.link, a.fwd))
	}
	slices.Reverse(r.Hops)
	return r
}

// widthItem is a vertex queued by widest.
type widthItem struct {
	v Vertex
	w units.BytesPerSecond
}

// before orders widest's queue: wider first, then lower vertices.
func (a widthItem) before(b widthItem) bool {
	if a.w != b.w {
		return a.w > b.w
	}
	return a.v < b.v
}

// widthQueue is a binary heap of widthItems, the first before all others.
type widthQueue []widthItem

func (q *widthQueue) push(it widthItem) {
	h := append(*q, it)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

func (q *widthQueue) pop() widthItem {
	h := *q
	top, n := h[0], len(h)-1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].before(h[m]) {
			m = l
		}
		if r := l + 1; r < n && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// hopItem is a vertex of a layer of shortestAtLeast.
type hopItem struct {
	v Vertex
	a int // ports avoided
	l time.Duration
}

// compare orders a layer: less latency, then fewer ports avoided, then
// lower vertices.
func (a hopItem) compare(b hopItem) int {
	if c := cmp.Compare(a.l, b.l); c != 0 {
		return c
	}
	if c := cmp.Compare(a.a, b.a); c != 0 {
		return c
	}
	return cmp.Compare(a.v, b.v)
}

// Kinds lists the link kinds a route crosses, in order.
func (c *Cluster) Kinds(r Route) []LinkKind {
	ks := make([]LinkKind, len(r.Hops))
	for i, h := range r.Hops {
		ks[i] = c.Links[h.Link].Kind
	}
	return ks
}

// Describe writes a route as "node0/gpu0 -nvlink2-> node0/gpu3".
func (c *Cluster) Describe(r Route) string {
	v := Vertex(r.From)
	s := c.VertexName(v)
	for _, h := range r.Hops {
		l := c.Links[h.Link]
		if h.Forward {
			v = l.B
		} else {
			v = l.A
		}
		s += fmt.Sprintf(" -%s-> %s", l.Kind, c.VertexName(v))
	}
	return s
}
