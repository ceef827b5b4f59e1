package topology_test

import (
	"fmt"

	"github.com/flowkit/flowkit/topology"
)

// Loading a cluster file and asking for a route.
func ExampleParse() {
	c, err := topology.Parse("pair.yaml", []byte(`
name: pair
nodes:
  - name: box
    count: 2
    devices:
      - {name: "gpu[0-1]", type: A100-80}
    switches:
      - {name: nvswitch, kind: nvswitch}
      - {name: nic, kind: nic}
    links:
      - {from: "gpu[0-1]", to: nvswitch, kind: nvlink3, count: 12}
      - {from: nic, to: nvswitch, kind: pcie4}
fabric: {kind: ib-hdr, ports: nic}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := c.DeviceByName("box0/gpu1")
	b, _ := c.DeviceByName("box1/gpu0")
	r, _ := c.Route(a, b)
	fmt.Println(len(c.Devices), "devices;", c.Describe(r))
	fmt.Println("bottleneck", r.Bandwidth, "latency", r.Latency)
	// Output:
	// 4 devices; box0/gpu1 -nvlink3-> box0/nvswitch -pcie4-> box0/nic -ib-hdr-> fabric/switch -ib-hdr-> box1/nic -pcie4-> box1/nvswitch -nvlink3-> box1/gpu0
	// bottleneck 25 GB/s latency 6µs
}

// Presets are sized by suffix: four DGX A100 nodes.
func ExamplePreset() {
	c, err := topology.Preset("dgx-a100x4")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(c.Nodes), "nodes,", len(c.Devices), "GPUs, bisection", c.Bisection().Bandwidth)
	// Output:
	// 4 nodes, 32 GPUs, bisection 400 GB/s
}
