package topology

import (
	"container/heap"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/units"
)

// The route searches reuse their scratch and share one widest-path search
// among destinations; they find exactly the routes and bandwidths of the
// plain searches below (the code before), on presets with one, two and
// three fabric levels and random capacities drawn from few values, so
// that ties, which the rule of Route breaks, are common.
func TestRoutesWithMatchReference(t *testing.T) {
	clusters := map[string]*Cluster{}
	for _, name := range []string{"dgx-a100", "mixed-a100-v100", "dgx-v100x4", "dgx-a100-80gx48", "dgx-a100-80gx192"} {
		c, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		clusters[name] = c
	}
	names := []string{"dgx-a100", "mixed-a100-v100", "dgx-v100x4", "dgx-a100-80gx48", "dgx-a100-80gx192"}
	rapid.Check(t, func(rt *rapid.T) {
		var c *Cluster
		if rapid.Bool().Draw(rt, "random") {
			c = randomCluster(rt)
		} else {
			c = clusters[rapid.SampledFrom(names).Draw(rt, "cluster")]
		}
		device := rapid.IntRange(0, len(c.Devices)-1)
		from := DeviceID(device.Draw(rt, "from"))
		to := make([]DeviceID, rapid.IntRange(1, 6).Draw(rt, "targets"))
		for i := range to {
			to[i] = DeviceID(device.Draw(rt, "to"))
		}
		capacity := func(l LinkID, _ bool) units.BytesPerSecond { return c.Links[l].Effective() }
		if rapid.Bool().Draw(rt, "left") { // what other flows left: a few levels, some links full
			levels := []float64{0, 0.25, 0.5, 1}
			left := make([]float64, 2*len(c.Links))
			for i := range left {
				left[i] = levels[rapid.IntRange(0, len(levels)-1).Draw(rt, "level")]
			}
			capacity = func(l LinkID, fwd bool) units.BytesPerSecond {
				i := 2 * int(l)
				if !fwd {
					i++
				}
				return units.BytesPerSecond(left[i]) * c.Links[l].Effective()
			}
		}
		routes, ok := c.RoutesWith(from, to, capacity)
		widths := c.WidestTo(from, to, capacity)
		all := referenceWidest(c, from, -1, capacity)
		for i, d := range to {
			want, wantOK := referenceRoute(c, from, d, capacity)
			if ok[i] != wantOK || wantOK && !routesEqual(routes[i], want) {
				rt.Fatalf("route %d→%d: got %v %v, want %v %v", from, d, routes[i], ok[i], want, wantOK)
			}
			if widths[i] != all[d] {
				rt.Fatalf("widest %d→%d: got %v, want %v", from, d, widths[i], all[d])
			}
		}
		got := c.Widest(from, capacity)
		for v := range got {
			if got[v] != all[v] {
				rt.Fatalf("Widest from %d at vertex %d: got %v, want %v", from, v, got[v], all[v])
			}
		}
	})
}

// randomCluster draws a small cluster whose switches form a random tree
// that every device and NIC hangs from, plus random links, with
// latencies and kinds from few values: many routes tie on hops and
// latency, to be told apart by the rule's last criteria.
func randomCluster(rt *rapid.T) *Cluster {
	var b strings.Builder
	nodes := rapid.IntRange(1, 3).Draw(rt, "nodes")
	fmt.Fprintf(&b, "nodes:\n  - name: n\n    count: %d\n    devices:\n      - {name: \"gpu[0-3]\", type: A100-80}\n", nodes)
	b.WriteString("    switches:\n      - {name: \"sw[0-3]\", kind: pcie-switch}\n      - {name: \"nic[0-1]\", kind: nic}\n    links:\n")
	joined := map[[2]string]bool{}
	link := func(a, z string) {
		if a == z || joined[[2]string{a, z}] || joined[[2]string{z, a}] {
			return // one link per pair: bundles are counts
		}
		joined[[2]string{a, z}] = true
		kind := rapid.SampledFrom([]string{"pcie4", "nvlink3", "pcie3"}).Draw(rt, "kind")
		fmt.Fprintf(&b, "      - {from: %s, to: %s, kind: %s, latency: %dus}\n", a, z, kind, rapid.IntRange(1, 2).Draw(rt, "latency"))
	}
	sw := func(below int) string { return fmt.Sprintf("sw%d", rapid.IntRange(0, below-1).Draw(rt, "switch")) }
	for i := 1; i < 4; i++ {
		link(fmt.Sprintf("sw%d", i), sw(i))
	}
	for _, e := range []string{"gpu0", "gpu1", "gpu2", "gpu3", "nic0", "nic1"} {
		link(e, sw(4))
	}
	ends := []string{"gpu0", "gpu1", "gpu2", "gpu3", "sw0", "sw1", "sw2", "sw3", "nic0", "nic1"}
	for range rapid.IntRange(0, 8).Draw(rt, "links") {
		link(rapid.SampledFrom(ends).Draw(rt, "from"), rapid.SampledFrom(ends).Draw(rt, "to"))
	}
	b.WriteString("fabric: {kind: ib-hdr, ports: \"nic[0-1]\"}\n")
	c, err := Parse("random.yaml", []byte(b.String()))
	if err != nil {
		rt.Fatal(err)
	}
	return c
}

func routesEqual(a, b Route) bool {
	if a.From != b.From || a.To != b.To || a.Bandwidth != b.Bandwidth || a.Latency != b.Latency || len(a.Hops) != len(b.Hops) {
		return false
	}
	for i := range a.Hops {
		if a.Hops[i] != b.Hops[i] {
			return false
		}
	}
	return true
}

// referenceRoute is RouteWith as it was.
func referenceRoute(c *Cluster, from, to DeviceID, capacity Capacity) (Route, bool) {
	if from == to {
		return Route{From: from, To: to, Bandwidth: units.BytesPerSecond(math.Inf(1))}, true
	}
	b := referenceWidest(c, from, to, capacity)[to]
	if b <= 0 {
		return Route{}, false
	}
	return referenceShortestAtLeast(c, from, to, b*(1-1e-9), capacity), true
}

// referenceWidest is widest as it was before searches reused their
// scratch: container/heap, maps, a fresh search each time (to < 0: every
// vertex).
func referenceWidest(c *Cluster, from, to DeviceID, capacity Capacity) []units.BytesPerSecond {
	best := make([]units.BytesPerSecond, c.NumVertices())
	done := make([]bool, c.NumVertices())
	src := Vertex(from)
	best[src] = units.BytesPerSecond(math.Inf(1))
	q := &refQueue{less: func(a, b qItem) bool {
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

// referenceShortestAtLeast is shortestAtLeast as it was.
func referenceShortestAtLeast(c *Cluster, from, to DeviceID, floor units.BytesPerSecond, capacity Capacity) Route {
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
	q := &refQueue{less: func(a, b qItem) bool {
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

type refQueue struct {
	items []qItem
	less  func(a, b qItem) bool
}

func (q *refQueue) Len() int           { return len(q.items) }
func (q *refQueue) Less(i, j int) bool { return q.less(q.items[i], q.items[j]) }
func (q *refQueue) Swap(i, j int)      { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *refQueue) Push(x any)         { q.items = append(q.items, x.(qItem)) }
func (q *refQueue) Pop() any {
	it := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return it
}
