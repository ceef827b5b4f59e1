package topology

import (
	"testing"

	"github.com/flowkit/flowkit/units"
)

// benchCluster is Selene's size in the narayanan2021 experiment: 384 DGX
// A100 nodes on a three-level fat tree.
func benchCluster(b *testing.B) *Cluster {
	c, err := Preset("dgx-a100-80gx384")
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func effective(c *Cluster) Capacity {
	return func(l LinkID, _ bool) units.BytesPerSecond { return c.Links[l].Effective() }
}

// A route between nodes: both searches cross the whole fabric.
func BenchmarkRouteWith_InterNode_DGXA100x384(b *testing.B) {
	c := benchCluster(b)
	capacity := effective(c)
	for b.Loop() {
		if _, ok := c.RouteWith(0, DeviceID(len(c.Devices)-1), capacity); !ok {
			b.Fatal("no route")
		}
	}
}

// A route within a node: the searches stay on its NVSwitch.
func BenchmarkRouteWith_IntraNode_DGXA100x384(b *testing.B) {
	c := benchCluster(b)
	capacity := effective(c)
	for b.Loop() {
		if _, ok := c.RouteWith(0, 5, capacity); !ok {
			b.Fatal("no route")
		}
	}
}

// Routes from one device to four nodes (a tree all-reduce's neighbours):
// one widest-path search for the four.
func BenchmarkRoutesWith_FourNodes_DGXA100x384(b *testing.B) {
	c := benchCluster(b)
	capacity := effective(c)
	to := []DeviceID{8, 16, 800, 3064}
	for b.Loop() {
		c.RoutesWith(0, to, capacity)
	}
}

// The bandwidths from a GPU to its node's others (ring orders).
func BenchmarkWidestTo_Node_DGXA100x384(b *testing.B) {
	c := benchCluster(b)
	capacity := effective(c)
	to := []DeviceID{0, 1, 2, 3, 4, 5, 6, 7}
	for b.Loop() {
		c.WidestTo(0, to, capacity)
	}
}
