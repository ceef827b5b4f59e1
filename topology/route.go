package topology

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
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
	if from == to {
		return Route{From: from, To: to, Bandwidth: units.BytesPerSecond(math.Inf(1))}, true
	}
	b := c.widest(from, to, capacity)[to]
	if b <= 0 {
		return Route{}, false
	}
	return c.shortestAtLeast(from, to, b*(1-1e-9), capacity), true
}

// Widest returns, for every vertex, the largest bottleneck bandwidth of a
// path from device from that does not pass through another device.
func (c *Cluster) Widest(from DeviceID, capacity Capacity) []units.BytesPerSecond {
	return c.widest(from, -1, capacity)
}

// widest is Widest, stopping once to's bandwidth is final (to < 0: never).
func (c *Cluster) widest(from, to DeviceID, capacity Capacity) []units.BytesPerSecond {
	best := make([]units.BytesPerSecond, c.NumVertices())
	done := make([]bool, c.NumVertices())
	src := Vertex(from)
	best[src] = units.BytesPerSecond(math.Inf(1))
	q := &vertexQueue{less: func(a, b qItem) bool {
		if a.w != b.w {
			return a.w > b.w
		}
		return a.v < b.v
	}}
	heap.Push(q, qItem{v: src, w: float64(best[src])})
	for q.Len() > 0 {
		it := heap.Pop(q).(qItem)
		if done[it.v] {
			continue
		}
		done[it.v] = true
		if to >= 0 && it.v == Vertex(to) {
			break // popped in order of bandwidth: final
		}
		if _, isDev := c.DeviceAt(it.v); isDev && it.v != src {
			continue // devices are endpoints only
		}
		for _, a := range c.adj[it.v] {
			w := min(best[it.v], capacity(a.link, a.fwd))
			if w > best[a.other] {
				best[a.other] = w
				heap.Push(q, qItem{v: a.other, w: float64(w)})
			}
		}
	}
	return best
}

// shortestAtLeast finds the path with fewest hops, then least latency,
// then fewest fabric ports of the two ends' nodes other than the ends' own
// (Port), from from to to over links whose capacity is at least floor.
func (c *Cluster) shortestAtLeast(from, to DeviceID, floor units.BytesPerSecond, capacity Capacity) Route {
	n := c.NumVertices()
	type label struct {
		hops, avoid int
		lat         time.Duration
		prev        Vertex
		via         adjacent
		set         bool
	}
	// avoided are the ports of from's and to's nodes that are neither's
	// own: a route leaves and enters a node through its device's port when
	// that is as short as any other.
	avoided := map[Vertex]bool{}
	own := map[Vertex]bool{}
	for _, d := range []DeviceID{from, to} {
		if p, ok := c.Port(d); ok {
			own[p] = true
			for _, o := range c.Nodes[c.Devices[d].Node].Devices {
				if q, ok := c.Port(o); ok {
					avoided[q] = true
				}
			}
		}
	}
	for p := range own {
		delete(avoided, p)
	}
	lab := make([]label, n)
	done := make([]bool, n)
	src, dst := Vertex(from), Vertex(to)
	lab[src] = label{set: true, prev: -1}
	q := &vertexQueue{less: func(a, b qItem) bool {
		if a.h != b.h {
			return a.h < b.h
		}
		if a.l != b.l {
			return a.l < b.l
		}
		if a.a != b.a {
			return a.a < b.a
		}
		return a.v < b.v
	}}
	heap.Push(q, qItem{v: src})
	for q.Len() > 0 {
		it := heap.Pop(q).(qItem)
		if done[it.v] {
			continue
		}
		done[it.v] = true
		if it.v == dst {
			break
		}
		if _, isDev := c.DeviceAt(it.v); isDev && it.v != src {
			continue
		}
		for _, a := range c.adj[it.v] {
			if capacity(a.link, a.fwd) < floor || done[a.other] {
				continue
			}
			h, l, av := lab[it.v].hops+1, lab[it.v].lat+c.Links[a.link].Latency, lab[it.v].avoid
			if avoided[a.other] {
				av++
			}
			o := &lab[a.other]
			if !o.set || h < o.hops || h == o.hops && (l < o.lat || l == o.lat && av < o.avoid) {
				*o = label{hops: h, lat: l, avoid: av, prev: it.v, via: a, set: true}
				heap.Push(q, qItem{v: a.other, h: h, l: l, a: av})
			}
		}
	}
	r := Route{From: from, To: to, Bandwidth: units.BytesPerSecond(math.Inf(1))}
	for v := dst; v != src; v = lab[v].prev {
		a := lab[v].via
		r.Hops = append(r.Hops, Hop{Link: a.link, Forward: a.fwd})
		r.Latency += c.Links[a.link].Latency
		r.Bandwidth = min(r.Bandwidth, capacity(a.link, a.fwd))
	}
	for i, j := 0, len(r.Hops)-1; i < j; i, j = i+1, j-1 {
		r.Hops[i], r.Hops[j] = r.Hops[j], r.Hops[i]
	}
	return r
}

type qItem struct {
	v Vertex
	w float64
	h int
	l time.Duration
	a int // ports avoided (shortestAtLeast)
}

type vertexQueue struct {
	items []qItem
	less  func(a, b qItem) bool
}

func (q *vertexQueue) Len() int           { return len(q.items) }
func (q *vertexQueue) Less(i, j int) bool { return q.less(q.items[i], q.items[j]) }
func (q *vertexQueue) Swap(i, j int)      { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *vertexQueue) Push(x any)         { q.items = append(q.items, x.(qItem)) }
func (q *vertexQueue) Pop() any {
	it := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return it
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
