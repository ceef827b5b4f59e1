package cost

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// A transfer uses every link of its route at the route's bottleneck rate,
// for the part of its time that is not latency: the bottleneck's share is
// that part, the others' less.
func TestPointToPointUse(t *testing.T) {
	c, err := topology.Preset("dgx-a100x2")
	require.NoError(t, err)
	m := NewComm(c)
	a, b := topology.DeviceID(0), topology.DeviceID(8) // gpu0 of each node: through the NICs
	for _, size := range []units.Bytes{1 << 10, 1 << 20, 1 << 30} {
		d, uses, err := m.PointToPointUse(a, b, size)
		require.NoError(t, err)
		alone, err := m.PointToPoint(a, b, size)
		require.NoError(t, err)
		require.Equal(t, alone, d)
		r, _ := c.RouteWith(a, b, m.full())
		busy := size.Over(r.Bandwidth).Seconds() / d.Seconds()
		require.Len(t, uses, len(r.Hops))
		top := 0.0
		for _, u := range uses {
			require.Greater(t, u.Share, 0.0)
			require.LessOrEqual(t, u.Share, busy*(1+1e-9))
			top = max(top, u.Share)
		}
		require.InEpsilon(t, busy, top, 1e-9, "the bottleneck is busy while bytes move")
	}
	_, uses, err := m.PointToPointUse(a, a, 1<<20)
	require.NoError(t, err)
	require.Empty(t, uses, "a device sends itself nothing")
}

// A collective's shares stay within its links' bandwidth: channel packing
// fills links, never beyond. A large all-reduce keeps its busiest link
// nearly full; a small one, latency-bound, barely uses any.
func TestCollectiveLinks(t *testing.T) {
	c, err := topology.Preset("dgx-a100x2")
	require.NoError(t, err)
	m := NewComm(c)
	var node, both []topology.DeviceID
	for i := range 16 {
		if i < 8 {
			node = append(node, topology.DeviceID(i))
		}
		both = append(both, topology.DeviceID(i))
	}
	for _, group := range [][]topology.DeviceID{node, both} {
		for _, op := range []Op{OpAllReduce, OpAllGather, OpReduceScatter, OpAllToAll} {
			for _, algo := range append([]Algo{Auto}, algorithms(op)...) {
				top := map[units.Bytes]float64{}
				for _, size := range []units.Bytes{4 << 10, 1 << 30} {
					e, err := m.Collective(op, group, size, algo)
					if err != nil {
						require.ErrorIs(t, err, ErrUnsupported)
						continue
					}
					require.NotEmpty(t, e.Links, "%v %v", op, algo)
					for _, u := range e.Links {
						require.Greater(t, u.Share, 0.0)
						require.LessOrEqual(t, u.Share, 1+1e-9, "%v %v %v over %d: link %d", op, algo, size, len(group), u.Link)
						top[size] = max(top[size], u.Share)
					}
				}
				if len(top) == 2 {
					require.Greater(t, top[1<<30], 0.5, "%v %v over %d: a large message is bandwidth-bound", op, algo, len(group))
					require.Less(t, top[4<<10], top[1<<30], "%v %v over %d", op, algo, len(group))
				}
			}
		}
	}
}

// Channel packing routes a channel's flows with one widest-path search per
// source: each flow gets the route RouteWith finds for it alone, and one
// that moves nothing (to itself, or weightless) none.
func TestRoutesAreRouteWith(t *testing.T) {
	c, err := topology.Preset("dgx-a100-80gx4")
	require.NoError(t, err)
	m := NewComm(c)
	rapid.Check(t, func(rt *rapid.T) {
		device := rapid.Custom(func(rt *rapid.T) topology.DeviceID {
			return topology.DeviceID(rapid.IntRange(0, len(c.Devices)-1).Draw(rt, "device"))
		})
		flows := make([]flow, rapid.IntRange(1, 12).Draw(rt, "flows"))
		for i := range flows {
			flows[i] = flow{device.Draw(rt, "src"), device.Draw(rt, "dst"), float64(rapid.IntRange(0, 2).Draw(rt, "w"))}
		}
		routes, found := m.routes(flows, m.full())
		for i, f := range flows {
			if f.src == f.dst || f.w == 0 {
				require.False(rt, found[i], "flow %d moves nothing", i)
				continue
			}
			want, ok := c.RouteWith(f.src, f.dst, m.full())
			require.Equal(rt, ok, found[i], "flow %d", i)
			require.Equal(rt, want, routes[i], "flow %d", i)
		}
	})
}

// twoProcs is two one-CPU nodes on a fabric of 1 GB/s each way, without
// latency, whose directions share the given duplex.
func twoProcs(t *testing.T, duplex string) *topology.Cluster {
	t.Helper()
	c, err := topology.Parse("procs.yaml", []byte(`name: procs
nodes:
  - name: proc
    count: 2
    devices: [{name: cpu, type: cpu, cores: 1}]
    switches: [{name: nic, kind: nic}]
    links: [{from: cpu, to: nic, kind: membus}]
fabric: {kind: ethernet, ports: nic, bandwidth: 1GB/s, latency: 0s, efficiency: 1, duplex: `+duplex+`}
`))
	require.NoError(t, err)
	return c
}

// On a fabric whose directions share its bandwidth, a transfer alone
// takes what it takes on a full-duplex one, but a two-member ring, whose
// steps send both ways at once, moves its bytes at (1 + duplex)/2 of the
// rate; the uses name both directions of each shared link, within it.
func TestDuplexSharesBothDirections(t *testing.T) {
	group := []topology.DeviceID{0, 1}
	const size = 64 << 20
	full := NewComm(twoProcs(t, "1"))
	p2p, uses, err := full.PointToPointUse(0, 1, size)
	require.NoError(t, err)
	for _, u := range uses {
		require.False(t, u.Both, "a full-duplex link has no shared resource")
	}
	bandwidthTime := func(m *Comm) float64 { // the all-reduce's time, less its latency
		big, err := m.Collective(OpAllReduce, group, 2*size, Ring)
		require.NoError(t, err)
		small, err := m.Collective(OpAllReduce, group, size, Ring)
		require.NoError(t, err)
		return (big.Time - small.Time).Seconds()
	}
	want := bandwidthTime(full)
	require.InEpsilon(t, float64(size)/1e9, want, 1e-3, "a ring of two moves size bytes each way at 1 GB/s")
	for _, duplex := range []float64{0, 0.25, 0.5} {
		m := NewComm(twoProcs(t, fmt.Sprint(duplex)))
		d, uses, err := m.PointToPointUse(0, 1, size)
		require.NoError(t, err)
		require.Equal(t, p2p, d, "duplex %v: one direction alone", duplex)
		n := 0
		for _, u := range uses {
			if u.Both {
				n++
				require.InEpsilon(t, 1/(1+duplex), u.Share, 1e-5, "duplex %v: one direction's worth of both", duplex)
				require.Equal(t, topology.LinkKind("ethernet"), m.Cluster().Links[u.Link].Kind)
			}
		}
		require.Equal(t, 2, n, "duplex %v: the two fabric ports", duplex)
		require.InEpsilon(t, want*2/(1+duplex), bandwidthTime(m), 1e-3, "duplex %v", duplex)
		e, err := m.Collective(OpAllReduce, group, size, Auto)
		require.NoError(t, err)
		for _, u := range e.Links {
			require.LessOrEqual(t, u.Share, 1+1e-9, "duplex %v: %+v", duplex, u)
		}
		require.True(t, slices.ContainsFunc(e.Links, func(u LinkUse) bool { return u.Both && u.Share > 0.9 }), "duplex %v: a large all-reduce fills both directions together: %+v", duplex, e.Links)
	}
}
