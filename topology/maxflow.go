package topology

import "math"

// flowNet is a flow network for Dinic's algorithm, its arcs in arrays with
// each arc's reverse beside it (arc i^1). gonum's network.MaxFlowDinic
// gives the same flows (the tests compare them) but walks its level graph
// without remembering which arcs are spent, which took 26 s on a
// 2,048-GPU fat tree where this takes milliseconds.
type flowNet struct {
	head []int     // first arc out of each vertex, −1: none
	next []int     // the next arc out of the same vertex
	to   []int     // each arc's head
	cap  []float64 // each arc's residual capacity
}

func newFlowNet(vertices int) *flowNet {
	n := &flowNet{head: make([]int, vertices)}
	for i := range n.head {
		n.head[i] = -1
	}
	return n
}

// arc adds an arc u→v of capacity c (and its reverse, of none).
func (n *flowNet) arc(u, v int, c float64) {
	for _, e := range [2]struct {
		from, to int
		cap      float64
	}{{u, v, c}, {v, u, 0}} {
		n.next = append(n.next, n.head[e.from])
		n.head[e.from] = len(n.to)
		n.to = append(n.to, e.to)
		n.cap = append(n.cap, e.cap)
	}
}

// maxFlow is the maximum flow from s to t. Residual capacities below eps
// of the largest capacity count as spent, against float rounding.
func (n *flowNet) maxFlow(s, t int) float64 {
	var largest float64
	for _, c := range n.cap {
		largest = max(largest, c)
	}
	eps := largest * 1e-12
	level := make([]int, len(n.head))
	cur := make([]int, len(n.head))
	queue := make([]int, 0, len(n.head))
	var total float64
	for {
		// Levels from s over arcs with capacity left.
		for i := range level {
			level[i] = -1
		}
		level[s] = 0
		queue = append(queue[:0], s)
		for i := 0; i < len(queue); i++ {
			u := queue[i]
			for e := n.head[u]; e >= 0; e = n.next[e] {
				if v := n.to[e]; level[v] < 0 && n.cap[e] > eps {
					level[v] = level[u] + 1
					queue = append(queue, v)
				}
			}
		}
		if level[t] < 0 {
			return total
		}
		copy(cur, n.head)
		for {
			f := n.push(s, t, math.Inf(1), level, cur, eps)
			if f <= eps {
				break
			}
			total += f
		}
	}
}

// push sends up to limit from u to t along arcs one level up, each
// vertex's arcs tried from the first not yet spent (cur), and returns what
// it sent.
func (n *flowNet) push(u, t int, limit float64, level, cur []int, eps float64) float64 {
	if u == t {
		return limit
	}
	for ; cur[u] >= 0; cur[u] = n.next[cur[u]] {
		e := cur[u]
		v := n.to[e]
		if n.cap[e] <= eps || level[v] != level[u]+1 {
			continue
		}
		if f := n.push(v, t, min(limit, n.cap[e]), level, cur, eps); f > eps {
			n.cap[e] -= f
			n.cap[e^1] += f
			return f
		}
	}
	return 0
}
