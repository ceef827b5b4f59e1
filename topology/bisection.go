package topology

import (
	"math"

	"github.com/flowkit/flowkit/units"
)

// exhaustiveBisection is the largest device count whose balanced splits are
// all tried (C(12,6)/2 = 462 max-flow runs).
const exhaustiveBisection = 12

// Bisection is the bandwidth across a balanced cut of the devices.
type Bisection struct {
	Bandwidth units.BytesPerSecond // per direction, from A to B
	A, B      []DeviceID
	Method    string
}

// Bisection computes the bisection bandwidth: the least, over balanced
// splits of the devices into halves A and B, of the maximum flow from A to
// B under the links' per-direction bandwidths, where devices only send (A)
// or receive (B) and never relay. With at most 12 devices every balanced
// split is tried, so the result is exact. Larger clusters are cut between
// the first and second halves of their nodes (or of the devices, in one
// node): for the symmetric fabrics of the presets (a switch or a
// non-blocking fat tree) that cut is the minimum one.
func (c *Cluster) Bisection() Bisection {
	n := len(c.Devices)
	if n < 2 {
		return Bisection{Method: "one device"}
	}
	if n <= exhaustiveBisection {
		best := Bisection{Bandwidth: units.BytesPerSecond(math.Inf(1)), Method: "exact: every balanced split"}
		half := n / 2
		// Device 0 always in A, so each split is tried once.
		for mask := 1; mask < 1<<n; mask += 2 {
			if popcount(mask) != half && popcount(mask) != n-half {
				continue
			}
			if n%2 == 0 && popcount(mask) != half {
				continue
			}
			var a, b []DeviceID
			for i := range n {
				if mask&(1<<i) != 0 {
					a = append(a, DeviceID(i))
				} else {
					b = append(b, DeviceID(i))
				}
			}
			if f := c.flowAcross(a, b); f < best.Bandwidth {
				best.Bandwidth, best.A, best.B = f, a, b
			}
		}
		return best
	}
	var a, b []DeviceID
	if len(c.Nodes) > 1 {
		for _, node := range c.Nodes {
			if len(a) < n/2 {
				a = append(a, node.Devices...)
			} else {
				b = append(b, node.Devices...)
			}
		}
		if len(b) == 0 { // one node holds most devices; fall back to halves
			a, b = nil, nil
		}
	}
	if a == nil {
		for i := range n {
			if i < n/2 {
				a = append(a, DeviceID(i))
			} else {
				b = append(b, DeviceID(i))
			}
		}
	}
	return Bisection{Bandwidth: c.flowAcross(a, b), A: a, B: b, Method: "cut between the halves of the nodes"}
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// flowAcross is the maximum flow from the devices of a to those of b.
func (c *Cluster) flowAcross(a, b []DeviceID) units.BytesPerSecond {
	nv := c.NumVertices()
	src, dst := nv, nv+1
	n := newFlowNet(nv + 2)
	role := make([]int, nv) // 1: in A (sends only), 2: in B (receives only)
	var total float64
	for _, l := range c.Links {
		total += float64(l.Bandwidth)
	}
	for _, d := range a {
		role[d] = 1
		n.arc(src, int(d), total)
	}
	for _, d := range b {
		role[d] = 2
		n.arc(int(d), dst, total)
	}
	add := func(u, v Vertex, w float64) {
		if _, isDev := c.DeviceAt(u); isDev && role[u] != 1 {
			return
		}
		if _, isDev := c.DeviceAt(v); isDev && role[v] != 2 {
			return
		}
		n.arc(int(u), int(v), w)
	}
	for _, l := range c.Links {
		add(l.A, l.B, float64(l.Bandwidth))
		add(l.B, l.A, float64(l.Bandwidth))
	}
	return units.BytesPerSecond(n.maxFlow(src, dst))
}
