package cost

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

func loadTwoNode(t *testing.T, nodes int) *topology.Cluster {
	t.Helper()
	data, err := os.ReadFile("testdata/two-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(data), "count: 2", "count: "+string(rune('0'+nodes)), 1)
	c, err := topology.Parse("testdata/two-node.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ids(from, to int) []topology.DeviceID {
	var g []topology.DeviceID
	for i := from; i < to; i++ {
		g = append(g, topology.DeviceID(i))
	}
	return g
}

const us = time.Microsecond

// ns rounds seconds to a Duration as the model does.
func sec(s float64) time.Duration { return time.Duration(s*1e9 + 0.5) }

// Hand computation on testdata/two-node.yaml, S = 1 GB. Intra-node routes:
// 300 GB/s, α = 2 µs. Inter-node routes: bottleneck the 12.5 GB/s NIC,
// α = 8 µs. One NIC per node: every inter-node channel saturates it.
func TestCollectivesTwoNodesByHand(t *testing.T) {
	c := loadTwoNode(t, 2)
	m := NewComm(c)
	const S = units.Bytes(1e9)
	const nic, nv = 12.5e9, 300e9
	all, node0 := ids(0, 16), ids(0, 8)
	intraRS := sec(7.0/8*1e9/nv) + 7*2*us // one ring per node, at once
	tests := []struct {
		name  string
		op    Op
		group []topology.DeviceID
		algo  Algo
		want  time.Duration
	}{
		// 2(n−1)/n·S/B + 2(n−1)·α with n = 16, B = the NIC.
		{"ring all-reduce", OpAllReduce, all, Ring, sec(2*15.0/16*1e9/nic) + 30*8*us},
		{"ring reduce-scatter", OpReduceScatter, all, Ring, sec(15.0/16*1e9/nic) + 15*8*us},
		{"ring all-gather", OpAllGather, all, Ring, sec(15.0/16*1e9/nic) + 15*8*us},
		// Two trees, each sending S/2 up and S/2 down through each NIC:
		// S per NIC direction. Deepest leaf: one inter-node hop + a chain of 7.
		{"tree all-reduce", OpAllReduce, all, Tree, sec(1e9/nic) + 2*(8*us+7*2*us)},
		// RS in nodes; 8 rail rings of 2 share the NIC: 2·½·(S/8)/(B/8); AG in nodes.
		{"hierarchical all-reduce", OpAllReduce, all, Hierarchical, 2*intraRS + sec(1e9/nic) + 2*8*us},
		{"hierarchical reduce-scatter", OpReduceScatter, all, Hierarchical, intraRS + sec(0.5*1e9/nic) + 8*us},
		{"hierarchical all-gather", OpAllGather, all, Hierarchical, intraRS + sec(0.5*1e9/nic) + 8*us},
		// Pipelined chain: S/B + 14 intra hops + 1 inter hop.
		{"ring broadcast", OpBroadcast, all, Ring, sec(1e9/nic) + 14*2*us + 8*us},
		// Each GPU sends S/16 to each of 8 remote GPUs: 64·S/16 through a NIC.
		{"direct all-to-all", OpAllToAll, all, Direct, sec(64*(1e9/16)/nic) + 8*us},
		{"auto all-reduce", OpAllReduce, all, Auto, sec(1e9/nic) + 2*(8*us+7*2*us)},
		{"auto reduce-scatter", OpReduceScatter, all, Auto, intraRS + sec(0.5*1e9/nic) + 8*us},
		// One node: rings over the NVSwitch.
		{"ring all-reduce, one node", OpAllReduce, node0, Ring, sec(2*7.0/8*1e9/nv) + 14*2*us},
		{"ring reduce-scatter, one node", OpReduceScatter, node0, Ring, sec(7.0/8*1e9/nv) + 7*2*us},
		// A chain relays up and down at once: 2S/B.
		{"tree all-reduce, one node", OpAllReduce, node0, Tree, sec(2*1e9/nv) + 2*7*2*us},
		{"auto all-reduce, one node", OpAllReduce, node0, Auto, sec(2*7.0/8*1e9/nv) + 14*2*us},
		{"direct all-to-all, one node", OpAllToAll, node0, Direct, sec(7*(1e9/8)/nv) + 2*us},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := m.Collective(tt.op, tt.group, S, tt.algo)
			if err != nil {
				t.Fatal(err)
			}
			if d := e.Time - tt.want; d < -2 || d > 2 {
				t.Errorf("got %v (%v), want %v", e.Time, e.Algo, tt.want)
			}
		})
	}
}

func TestAutoChoice(t *testing.T) {
	c := loadTwoNode(t, 8)
	m := NewComm(c)
	all := ids(0, 64)
	for _, tt := range []struct {
		size units.Bytes
		want Algo
	}{
		{1 << 10, Tree},         // latency: 2·depth hops, not 2(n−1)
		{1 << 30, Hierarchical}, // bandwidth: NVSwitch ≫ NIC
	} {
		e, err := m.Collective(OpAllReduce, all, tt.size, Auto)
		if err != nil {
			t.Fatal(err)
		}
		if e.Algo != tt.want {
			t.Errorf("64 ranks on 8 nodes, %v: got %v, want %v", tt.size, e.Algo, tt.want)
		}
	}
	e, err := m.Collective(OpAllReduce, ids(0, 8), 1<<30, Auto)
	if err != nil || e.Algo != Ring {
		t.Errorf("one node, 1 GiB: got %v, %v; want ring", e.Algo, err)
	}
}

func TestPointToPointByHand(t *testing.T) {
	c := loadTwoNode(t, 2)
	tests := []struct {
		src, dst int
		want     time.Duration
	}{
		{0, 8, 8*us + sec(1e9/12.5e9)},
		{0, 1, 2*us + sec(1e9/300e9)},
		{3, 3, 0},
	}
	for _, tt := range tests {
		got, err := PointToPoint(c, topology.DeviceID(tt.src), topology.DeviceID(tt.dst), 1e9)
		if err != nil || got != tt.want {
			t.Errorf("%d -> %d: got %v, %v; want %v", tt.src, tt.dst, got, err, tt.want)
		}
	}
}

func TestBusBandwidth(t *testing.T) {
	c := loadTwoNode(t, 2)
	e, err := NewComm(c).Collective(OpAllReduce, ids(0, 16), 1e9, Ring)
	if err != nil {
		t.Fatal(err)
	}
	// busBW = S/T · 2(n−1)/n, just under the NIC's 12.5 GB/s (latency).
	if e.BusBW < 12.4e9 || e.BusBW > 12.5e9 {
		t.Errorf("got bus bandwidth %v, want just under 12.5 GB/s", e.BusBW)
	}
	if got := OpAllGather.BusFactor(16); got != 15.0/16 {
		t.Errorf("all-gather bus factor: got %v, want 15/16", got)
	}
}

// Channel packing finds the DGX-1V's four NVLink rings: 2×50 + 2×25 GB/s,
// at 80% efficiency.
func TestHybridCubeMeshChannels(t *testing.T) {
	c, err := topology.Preset("dgx-v100")
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewComm(c).Collective(OpAllReduce, ids(0, 8), 1<<30, Ring)
	if err != nil {
		t.Fatal(err)
	}
	if e.Channels != 4 {
		t.Errorf("got %d channels, want 4", e.Channels)
	}
	if e.BusBW < 115e9 || e.BusBW > 120e9 {
		t.Errorf("got bus bandwidth %v, want just under 0.8 × 150 GB/s", e.BusBW)
	}
}

func TestMultiNICChannels(t *testing.T) {
	c, err := topology.Preset("dgx-a100x2")
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewComm(c).Collective(OpAllReduce, ids(0, 16), 1<<30, Ring)
	if err != nil {
		t.Fatal(err)
	}
	// Eight HDR NICs per node, 25 GB/s × 0.92 each.
	if e.Channels != 8 || e.BusBW < 180e9 || e.BusBW > 184e9 {
		t.Errorf("got %d channels, bus bandwidth %v; want 8 and ~8 × 23 GB/s", e.Channels, e.BusBW)
	}
}

func TestCollectiveErrors(t *testing.T) {
	c := loadTwoNode(t, 2)
	m := NewComm(c)
	tests := []struct {
		name  string
		op    Op
		group []topology.DeviceID
		algo  Algo
		want  error
	}{
		{"empty group", OpAllReduce, nil, Ring, ErrGroup},
		{"duplicate", OpAllReduce, []topology.DeviceID{1, 1}, Ring, ErrGroup},
		{"out of range", OpAllReduce, []topology.DeviceID{0, 99}, Ring, ErrGroup},
		{"tree all-gather", OpAllGather, ids(0, 4), Tree, ErrUnsupported},
		{"uneven hierarchical", OpAllReduce, ids(0, 11), Hierarchical, ErrUnsupported},
	}
	for _, tt := range tests {
		if _, err := m.Collective(tt.op, tt.group, 1024, tt.algo); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if e, err := m.Collective(OpAllReduce, ids(3, 4), 1024, Auto); err != nil || e.Time != 0 {
		t.Errorf("one rank: got %v, %v; want 0", e.Time, err)
	}
}
