package cost

import (
	"testing"

	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// An all-reduce of 64 MiB over the 32 GPUs of four DGX A100s (ring, tree
// and hierarchical priced, the fastest taken), as a data-parallel plan's
// gradient all-reduce asks for it every iteration: cached after the first
// call.
func BenchmarkCollective_AllReduce_DGXA100x4_32(b *testing.B) {
	benchCollective(b, (*Comm).Collective)
}

// The same, priced afresh each time.
func BenchmarkCollectiveUncached_AllReduce_DGXA100x4_32(b *testing.B) {
	benchCollective(b, (*Comm).collective)
}

func benchCollective(b *testing.B, price func(*Comm, Op, []topology.DeviceID, units.Bytes, Algo) (Estimate, error)) {
	c, err := topology.Preset("dgx-a100x4")
	if err != nil {
		b.Fatal(err)
	}
	m := NewComm(c)
	group := ids(0, len(c.Devices))
	for b.Loop() {
		if _, err := price(m, OpAllReduce, group, 64<<20, Auto); err != nil {
			b.Fatal(err)
		}
	}
}
