package topology

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/units"
)

func TestPresetsLoad(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			c, err := Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Devices) == 0 || c.Description == "" || c.Source == "" {
				t.Fatalf("got %d devices, description %q, source %q", len(c.Devices), c.Description, c.Source)
			}
			for _, d := range c.Devices[1:] {
				if _, err := c.Route(0, d.ID); err != nil {
					t.Errorf("route %s -> %s: %v", c.Devices[0].Name, d.Name, err)
				}
			}
			for _, k := range []int{2, 3} {
				sized, err := Preset(name + "x" + string(rune('0'+k)))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := len(sized.Devices), k*len(c.Devices); got != want {
					t.Errorf("x%d: got %d devices, want %d", k, got, want)
				}
				if got, want := len(sized.Nodes), k*len(c.Nodes); got != want {
					t.Errorf("x%d: got %d nodes, want %d", k, got, want)
				}
				last := sized.Devices[len(sized.Devices)-1].ID
				if _, err := sized.Route(0, last); err != nil {
					t.Errorf("x%d: %v", k, err)
				}
			}
		})
	}
}

func TestPresetNamesAndSizing(t *testing.T) {
	c, err := Preset("dlperf-v100x32")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Devices) != 32 || len(c.Nodes) != 4 {
		t.Errorf("dlperf-v100x32: got %d devices on %d nodes, want 32 on 4", len(c.Devices), len(c.Nodes))
	}
	c, err = Preset("dgx-a100x4")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "dgx-a100x4" || len(c.Devices) != 32 {
		t.Errorf("dgx-a100x4: got %q with %d devices", c.Name, len(c.Devices))
	}
	// 32 nodes × 8 NDR NICs = 256 ports > radix 64: a leaf–spine fat tree.
	c, err = Preset("dgx-h100x32")
	if err != nil {
		t.Fatal(err)
	}
	leaves, spines := 0, 0
	for _, s := range c.Switches {
		switch {
		case strings.HasPrefix(s.Name, "fabric/leaf"):
			leaves++
		case strings.HasPrefix(s.Name, "fabric/spine"):
			spines++
		}
	}
	if leaves != 8 || spines != 1 {
		t.Errorf("dgx-h100x32 fabric: got %d leaves, %d spines; want 8, 1 (the spines as one)", leaves, spines)
	}
	if got, want := c.Bisection().Bandwidth, 128*50*units.GBps; got != want {
		t.Errorf("dgx-h100x32 bisection: got %v, want %v (non-blocking: 128 NDR ports)", got, want)
	}
	for _, bad := range []struct{ name, want string }{
		{"dgx-a100x0", `dgx-a100 is a preset, but "0" is no size: NAMExK takes K from 1 to 4096`},
		{"dgx-a100x", `dgx-a100 is a preset, but "" is no size`},
		{"dgx-a100x07", `dgx-a100 is a preset, but "07" is no size`},
		{"dgx-a100x4097", `dgx-a100 is a preset, but "4097" is no size`},
		{"nosuch", `unknown cluster "nosuch" (presets: `},
		{"nosuchx4", `unknown cluster "nosuchx4" (presets: `},
	} {
		_, err := Preset(bad.name)
		if !errors.Is(err, ErrUnknownCluster) {
			t.Errorf("Preset(%q): got %v, want ErrUnknownCluster", bad.name, err)
		} else if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Preset(%q): got %q, want it to say %q", bad.name, err, bad.want)
		}
	}
	// A size the preset's file takes but the limits do not is blamed on
	// the size, not on a line of the file.
	_, err = Preset("dgx-a100x4096")
	if want := "topology: cluster dgx-a100x4096 is 4096 times the nodes of dgx-a100, at about 23 devices and switches a node, and a cluster holds at most 65536: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Preset(dgx-a100x4096): got %v, want it to start %q", err, want)
	}
}

func TestHeterogeneousRoutes(t *testing.T) {
	tests := []struct {
		cluster, from, to string
		want              []LinkKind
		bw                units.BytesPerSecond
	}{
		{"mixed-a100-v100", "a100-0/gpu0", "v100-1/gpu5",
			[]LinkKind{PCIe4, PCIe4, IBEDR, IBEDR, PCIe3, PCIe3}, 12.5 * units.GBps},
		{"mixed-a100-v100", "a100-0/gpu0", "a100-0/gpu7",
			[]LinkKind{NVLink3, NVLink3}, 300 * units.GBps},
		{"mixed-a100-v100", "v100-0/gpu0", "v100-0/gpu3",
			[]LinkKind{NVLink2}, 50 * units.GBps},
		// GPUs do not relay: gpu0 and gpu5 share no NVLink, so PCIe.
		{"mixed-a100-v100", "v100-0/gpu0", "v100-0/gpu5",
			[]LinkKind{PCIe3, PCIe3}, 15.75 * units.GBps},
		{"mixed-t4-cpu", "node/gpu0", "node/cpu",
			[]LinkKind{PCIe3, MemBus}, 15.75 * units.GBps},
		{"mixed-t4-cpux2", "node0/cpu", "node1/gpu0",
			[]LinkKind{MemBus, PCIe3, Ethernet, Ethernet, PCIe3, PCIe3}, 25 * units.Gbps},
	}
	for _, tt := range tests {
		t.Run(tt.cluster+":"+tt.from+"-"+tt.to, func(t *testing.T) {
			c, err := Preset(tt.cluster)
			if err != nil {
				t.Fatal(err)
			}
			a, ok1 := c.DeviceByName(tt.from)
			b, ok2 := c.DeviceByName(tt.to)
			if !ok1 || !ok2 {
				t.Fatalf("devices %q, %q not found", tt.from, tt.to)
			}
			r, err := c.Route(a, b)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Kinds(r)
			if strings.Join(kindStrings(got), ",") != strings.Join(kindStrings(tt.want), ",") {
				t.Errorf("got %s, want kinds %v", c.Describe(r), tt.want)
			}
			if r.Bandwidth != tt.bw {
				t.Errorf("got bottleneck %v, want %v", r.Bandwidth, tt.bw)
			}
		})
	}
}

func kindStrings(ks []LinkKind) []string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return s
}

const goodCluster = `name: test
nodes:
  - name: n
    devices:
      - {name: "gpu[0-1]", type: A100-SXM4-80GB}
    switches:
      - {name: sw, kind: nvswitch}
    links:
      - {from: "gpu[0-1]", to: sw, kind: nvlink3, count: 12}
`

// A cluster named like neither a file nor a preset is an unknown preset;
// where a file of that name exists, the error says how to name it.
func TestResolveNamesAFileWithoutSuffix(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("cluster.txt", []byte(goodCluster), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Resolve("cluster.txt")
	if !errors.Is(err, ErrUnknownCluster) || !strings.Contains(err.Error(), "a file cluster.txt exists, but only names ending in .yaml or .yml, or with a slash (./cluster.txt), are read") {
		t.Errorf("Resolve(cluster.txt): got %v", err)
	}
	if _, err := Resolve("./cluster.txt"); err != nil {
		t.Errorf("Resolve(./cluster.txt): %v", err)
	}
	if _, err := Resolve("nosuch"); err == nil || strings.Contains(err.Error(), "a file") {
		t.Errorf("Resolve(nosuch): got %v, want no mention of a file", err)
	}
}

func TestBadClusterFiles(t *testing.T) {
	tests := []struct {
		name, yaml string
		sentinel   error
		want       string
	}{
		{"unknown device type", strings.Replace(goodCluster, "A100-SXM4-80GB", "A200", 1), ErrUnknownDeviceType,
			`topology: bad.yaml:5: nodes[0].devices[0].type: unknown device type "A200" (known: `},
		{"dangling link", strings.Replace(goodCluster, `to: sw`, `to: sw9`, 1), ErrUnknownEndpoint,
			`topology: bad.yaml:9: nodes[0].links[0].to: unknown endpoint "sw9" in node "n"`},
		{"disconnected device", goodCluster + "      - {from: gpu0, to: gpu1, kind: nvlink3}\n" + "  - name: m\n    devices:\n      - {name: gpu, type: T4}\n", ErrDisconnected,
			`topology: bad.yaml:13: nodes[1].devices[0].name: device "m/gpu" is connected to nothing`},
		{"nodes without a fabric", strings.Replace(goodCluster, "  - name: n\n", "  - name: n\n    count: 2\n", 1), ErrDisconnected,
			`topology: bad.yaml:6: nodes[0].devices[0].name: device "n1/gpu0" has no route to "n0/gpu0" (devices do not forward traffic: join them through a switch); the cluster has 2 nodes and no fabric to join them (fabric: {kind: ib-hdr, ports: nic})`},
		{"memory without a unit", strings.Replace(goodCluster, "type: A100-SXM4-80GB}", "type: A100-SXM4-80GB, memory: 80}", 1), ErrBadQuantity,
			`topology: bad.yaml:5: nodes[0].devices[0].memory: size "80": give a unit, as 80MiB or 80GiB (B for bytes)`},
		{"memory auto on a GPU", strings.Replace(goodCluster, "type: A100-SXM4-80GB}", "type: A100-SXM4-80GB, memory: auto}", 1), ErrInvalid,
			`topology: bad.yaml:5: nodes[0].devices[0].memory: auto (this machine's memory) is for CPU devices; A100-SXM4-80GB is a GPU: give its memory, as 80GiB, or leave it to the catalog (80.00 GiB)`},
		{"negative bandwidth", strings.Replace(goodCluster, "count: 12", "bandwidth: -25GB/s", 1), ErrInvalid,
			`topology: bad.yaml:9: nodes[0].links[0].bandwidth: must be positive, got -25GB/s`},
		{"duplicate device", goodCluster + "      - {from: gpu0, to: sw, kind: pcie4}\n", ErrInvalid,
			`topology: bad.yaml:10: nodes[0].links[1]: second link between "n/gpu0" and "n/sw" (first at line 9): bundle links with count`},
		{"duplicate name", strings.Replace(goodCluster, "{name: sw,", "{name: gpu1,", 1), ErrDuplicateName,
			`topology: bad.yaml:7: nodes[0].switches[0].name: duplicate name "gpu1" in node "n"`},
		{"duplicate node", goodCluster + "  - name: n\n    devices: [{name: cpu, type: cpu}]\n", ErrDuplicateName,
			`topology: bad.yaml:10: nodes[1].name: duplicate node name "n"`},
		{"bad bandwidth unit", strings.Replace(goodCluster, "count: 12", "bandwidth: 300GB", 1), ErrBadQuantity,
			`topology: bad.yaml:9: nodes[0].links[0].bandwidth: bandwidth "300GB": unknown unit "GB"`},
		{"bad latency", strings.Replace(goodCluster, "count: 12", "latency: soon", 1), ErrBadQuantity,
			`topology: bad.yaml:9: nodes[0].links[0].latency: latency "soon": want a duration like 2us`},
		{"bad memory", strings.Replace(goodCluster, "type: A100-SXM4-80GB}", "type: A100-SXM4-80GB, memory: 80 gigs}", 1), ErrBadQuantity,
			`topology: bad.yaml:5: nodes[0].devices[0].memory: size "80 gigs": unknown unit "gigs"`},
		{"unknown field", strings.Replace(goodCluster, "kind: nvswitch", "kind: nvswitch, ports: 64", 1), ErrInvalid,
			`topology: bad.yaml:7: nodes[0].switches[0].ports: unknown field (want one of name, kind)`},
		{"unknown link kind", strings.Replace(goodCluster, "nvlink3", "nvlink9", 1), ErrInvalid,
			`topology: bad.yaml:9: nodes[0].links[0].kind: unknown link kind "nvlink9"`},
		{"cores on a GPU", strings.Replace(goodCluster, "type: A100-SXM4-80GB}", "type: A100-SXM4-80GB, cores: 4}", 1), ErrInvalid,
			`topology: bad.yaml:5: nodes[0].devices[0].cores: only CPU devices have cores`},
		{"mismatched ranges", strings.Replace(goodCluster, `to: sw,`, `to: "sw[0-2]",`, 1), ErrInvalid,
			`topology: bad.yaml:9: nodes[0].links[0]: from names 2 endpoints and to names 3`},
		{"yaml syntax", "nodes: [\n  {name: a\n", ErrInvalid, `topology: bad.yaml:`},
		{"no nodes", "name: x\n", ErrInvalid, `topology: bad.yaml:1: nodes: missing`},
		{"no devices", "name: x\nnodes:\n  - name: n\n    devices: []\n", ErrInvalid,
			`topology: bad.yaml:4: nodes[0].devices: empty: a node needs at least one device`},
		{"duplex above 1", strings.Replace(goodCluster, "count: 12", "count: 12, duplex: 1.5", 1), ErrInvalid,
			`topology: bad.yaml:9: nodes[0].links[0].duplex: must be a fraction in [0, 1] (1 full duplex, 0 half), got "1.5"`},
		{"duplex not a number", strings.Replace(goodCluster, "count: 12", "count: 12, duplex: half", 1), ErrInvalid,
			`topology: bad.yaml:9: nodes[0].links[0].duplex: must be a fraction in [0, 1] (1 full duplex, 0 half), got "half"`},
		{"fabric port missing", goodCluster + "    count: 2\nfabric: {kind: ib-hdr, ports: nic}\n", ErrUnknownEndpoint,
			`topology: bad.yaml:11: fabric.ports: node "n0" has no element "nic" to attach`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got  %q\nwant %q…", err.Error(), tt.want)
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("got %v, want it to wrap %v", err, tt.sentinel)
			}
			var fe *Error
			if !errors.As(err, &fe) || fe.File != "bad.yaml" || fe.Line == 0 {
				t.Errorf("got %#v, want an *Error with file and line", err)
			}
		})
	}
}

func TestGoodClusterFile(t *testing.T) {
	c, err := Parse("good.yaml", []byte(goodCluster))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Devices) != 2 || len(c.Switches) != 1 || len(c.Links) != 2 {
		t.Fatalf("got %d devices, %d switches, %d links; want 2, 1, 2", len(c.Devices), len(c.Switches), len(c.Links))
	}
	if got, want := c.Links[0].Bandwidth, 300*units.GBps; got != want {
		t.Errorf("12 NVLink3 links: got %v, want %v", got, want)
	}
	if got, want := c.Bisection().Bandwidth, 300*units.GBps; got != want {
		t.Errorf("bisection: got %v, want %v", got, want)
	}
}

// A link is full duplex unless its file says how much of a second
// direction it carries, for a node's links and the fabric's alike.
func TestDuplex(t *testing.T) {
	c, err := Parse("good.yaml", []byte(goodCluster))
	require.NoError(t, err)
	for _, l := range c.Links {
		require.Equal(t, 1.0, l.Duplex)
		require.False(t, l.HalfShared())
		require.Equal(t, 2*l.Effective(), l.Both())
	}
	half := strings.Replace(goodCluster, "count: 12", "count: 12, duplex: 0", 1) +
		"    count: 2\n" + "fabric: {kind: ib-hdr, ports: sw, duplex: 0.25}\n"
	c, err = Parse("half.yaml", []byte(half))
	require.NoError(t, err)
	for _, l := range c.Links {
		if l.Kind == IBHDR {
			require.Equal(t, 0.25, l.Duplex, "the fabric's")
			require.Equal(t, l.Effective()*1.25, l.Both())
		} else {
			require.Equal(t, 0.0, l.Duplex, "the node's")
			require.Equal(t, l.Effective(), l.Both())
		}
		require.True(t, l.HalfShared())
	}
}

func TestDevicesDoNotRelay(t *testing.T) {
	// a–b–c in a chain of direct links: a cannot reach c through b.
	const chain = `nodes:
  - name: n
    devices: [{name: "g[0-2]", type: T4}]
    links:
      - {from: g0, to: g1, kind: nvlink2}
      - {from: g1, to: g2, kind: nvlink2}
`
	_, err := Parse("chain.yaml", []byte(chain))
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), `device "n/g2" has no route to "n/g0"`) {
		t.Errorf("got %v, want n/g2 unreachable from n/g0", err)
	}
}

func FuzzLoadCluster(f *testing.F) {
	for _, name := range PresetNames() {
		data, err := PresetSource(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(goodCluster))
	f.Add([]byte(strings.Replace(goodCluster, "count: 12", "count: 12, duplex: 0.25", 1) + "    count: 2\nfabric: {kind: ethernet, ports: sw, duplex: 0}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseLimited("fuzz.yaml", data, 1, 512)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if len(c.Devices) > 1 {
			if _, err := c.Route(0, DeviceID(len(c.Devices)-1)); err != nil {
				t.Fatalf("loaded cluster has no route: %v", err)
			}
		}
		for _, l := range c.Links {
			if !(l.Duplex >= 0 && l.Duplex <= 1) {
				t.Fatalf("link %d: duplex %v outside [0, 1]", l.ID, l.Duplex)
			}
		}
	})
}

// Beyond radix²/2 ports the fabric is a three-level fat tree (Selene's
// 3072 HDR ports on radix-40 switches), still non-blocking, and a fourth
// level is refused.
func TestThreeLevelFatTree(t *testing.T) {
	c, err := Preset("dgx-a100-80gx384")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range c.Switches {
		switch {
		case strings.HasPrefix(s.Name, "fabric/leaf"):
			count["leaf"]++
		case strings.HasPrefix(s.Name, "fabric/pod"):
			count["agg"]++
		case strings.HasPrefix(s.Name, "fabric/core"):
			count["core"]++
		}
	}
	// 3072 ports, 20 per leaf: 154 leaves in 8 pods of up to 20 (each
	// pod's aggregation switches as one), and the core.
	if want := map[string]int{"leaf": 154, "agg": 8, "core": 1}; !maps.Equal(count, want) {
		t.Errorf("dgx-a100-80gx384 fabric: got %v, want %v", count, want)
	}
	// Between the first and the last node, a GPU's NIC is the bottleneck.
	first, _ := c.DeviceByName("dgx0/gpu0")
	last, _ := c.DeviceByName("dgx383/gpu7")
	r, err := c.Route(first, last)
	if err != nil {
		t.Fatal(err)
	}
	if want := 25 * units.GBps; r.Bandwidth != want {
		t.Errorf("route bandwidth %v, want %v (one HDR port)", r.Bandwidth, want)
	}
	// Non-blocking: a small three-level tree (12 ports on radix-4
	// switches: 6 leaves in 3 pods), small enough for every balanced cut
	// to be tried, carries half its ports across any of them.
	small := `name: small
nodes:
  - name: n
    count: 6
    devices:
      - {name: "gpu[0-1]", type: A100-SXM4-80GB}
    switches:
      - {name: sw, kind: nvswitch}
      - {name: "nic[0-1]", kind: nic}
    links:
      - {from: "gpu[0-1]", to: sw, kind: nvlink3, count: 12}
      - {from: "gpu[0-1]", to: "nic[0-1]", kind: pcie4}
fabric: {kind: ib-hdr, ports: "nic[0-1]", radix: 4}
`
	tree, err := Parse("small.yaml", []byte(small))
	if err != nil {
		t.Fatal(err)
	}
	pods := 0
	for _, s := range tree.Switches {
		if strings.HasPrefix(s.Name, "fabric/pod") {
			pods++
		}
	}
	if pods != 3 {
		t.Errorf("12 ports on radix 4: %d pods, want 3", pods)
	}
	if got, want := tree.Bisection().Bandwidth, 6*25*units.GBps; got != want {
		t.Errorf("bisection %v, want %v (non-blocking: half the ports)", got, want)
	}
	if _, err := Preset("dgx-a100-80gx2001"); err == nil || !strings.Contains(err.Error(), "more than three fat-tree levels") {
		t.Errorf("16008 ports on radix-40 switches: got %v, want a refusal", err)
	}
}

// A GPU leaves and enters its node through its own NIC (NCCL's pairing),
// where paths through the node's other NICs are as short: GPU i of a DGX
// A100 through NIC i, though two GPUs share each PCIe switch with two
// NICs; and the GPUs of a node with one NIC share it.
func TestRoutesUseTheDevicesPorts(t *testing.T) {
	c, err := Preset("dgx-a100-80gx2")
	if err != nil {
		t.Fatal(err)
	}
	vertices := func(r Route) []string {
		var out []string
		for _, h := range r.Hops {
			l := c.Links[h.Link]
			a, b := l.A, l.B
			if !h.Forward {
				a, b = b, a
			}
			if len(out) == 0 {
				out = append(out, c.VertexName(a))
			}
			out = append(out, c.VertexName(b))
		}
		return out
	}
	for i := range 8 {
		for _, j := range []int{(i + 3) % 8, i} {
			a, _ := c.DeviceByName(fmt.Sprintf("dgx0/gpu%d", i))
			b, _ := c.DeviceByName(fmt.Sprintf("dgx1/gpu%d", j))
			r, err := c.Route(a, b)
			if err != nil {
				t.Fatal(err)
			}
			got := vertices(r)
			if !slices.Contains(got, fmt.Sprintf("dgx0/nic%d", i)) || !slices.Contains(got, fmt.Sprintf("dgx1/nic%d", j)) {
				t.Errorf("gpu%d to the other node's gpu%d: %v, want through nic%d and nic%d", i, j, got, i, j)
			}
			if p, ok := c.Port(a); !ok || c.VertexName(p) != fmt.Sprintf("dgx0/nic%d", i) {
				t.Errorf("Port(dgx0/gpu%d) = %v, %v", i, c.VertexName(p), ok)
			}
		}
	}
	m, err := Preset("mixed-a100-v100")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a100-0/gpu0", "a100-0/gpu7"} {
		d, _ := m.DeviceByName(name)
		if p, ok := m.Port(d); !ok || m.VertexName(p) != "a100-0/nic" {
			t.Errorf("Port(%s) = %v, %v; want a100-0/nic, shared", name, m.VertexName(p), ok)
		}
	}
	one, err := Preset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := one.Port(0); ok {
		t.Error("one node has no fabric: no ports")
	}
}
