package topology

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/graph/network"
	"gonum.org/v1/gonum/graph/simple"
	"pgregory.net/rapid"
)

// The hand-written Dinic finds gonum's maximum flow on random networks,
// antiparallel arcs and unreachable sinks included.
func TestMaxFlowMatchesGonum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nv := rapid.IntRange(4, 8).Draw(t, "vertices") // dense: flows that later phases must undo
		n := newFlowNet(nv)
		g := simple.NewWeightedDirectedGraph(0, 0)
		for v := range nv {
			g.AddNode(simple.Node(v))
		}
		seen := map[[2]int]bool{}
		for range rapid.IntRange(8, 48).Draw(t, "arcs") {
			u, v := rapid.IntRange(0, nv-1).Draw(t, "u"), rapid.IntRange(0, nv-1).Draw(t, "v")
			if u == v || seen[[2]int{u, v}] { // gonum keeps one edge a pair
				continue
			}
			seen[[2]int{u, v}] = true
			c := float64(rapid.IntRange(1, 1000).Draw(t, "cap")) * 1e9 // bytes per second
			n.arc(u, v, c)
			g.SetWeightedEdge(g.NewWeightedEdge(simple.Node(u), simple.Node(v), c))
		}
		want := network.MaxFlowDinic(g, simple.Node(0), simple.Node(nv-1), -1)
		got := n.maxFlow(0, nv-1)
		require.InDelta(t, want, got, 1e-9*max(want, 1))
	})
}

// The second unit of flow needs the first one's path undone: s→a→b→t is
// the shortest path, and the only other way to t goes s→c→d→b, back along
// a→b, then a→e→f→t.
func TestMaxFlowUndoes(t *testing.T) {
	const s, a, b, c, d, e, f, tt = 0, 1, 2, 3, 4, 5, 6, 7
	n := newFlowNet(8)
	for _, arc := range [][2]int{{s, a}, {a, b}, {b, tt}, {s, c}, {c, d}, {d, b}, {a, e}, {e, f}, {f, tt}} {
		n.arc(arc[0], arc[1], 1)
	}
	require.Equal(t, 2.0, n.maxFlow(s, tt))
}

// A fat tree of 2,048 GPUs: the cut between the halves of its nodes
// carries each GPU's NIC bandwidth across, in well under a second (gonum's
// Dinic took 26 s).
func TestBisectionLargeFatTree(t *testing.T) {
	c, err := Preset("dgx-a100x256")
	require.NoError(t, err)
	b := c.Bisection()
	require.Len(t, b.A, 1024)
	require.Equal(t, "cut between the halves of the nodes", b.Method)
	require.InDelta(t, 25.6e12, float64(b.Bandwidth), 1e3)
}
