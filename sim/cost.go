package sim

import (
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// CostModel prices every task with the compute model on its home device:
// kernels by op kind and shape, and the in-process transfers, gradient
// accumulations and all-reduces between CPU devices as the memory-bound
// kinds "transfer", "accumulate" and "allreduce" (calibrated like kernels).
// Devices of one host slow each other down by the calibrated contention.
type CostModel struct {
	Compute *cost.ComputeModel
}

var (
	_ Durations  = CostModel{}
	_ Contention = CostModel{}
)

// Duration implements Durations.
func (m CostModel) Duration(p *plans.Plan, t int) (time.Duration, error) {
	spec, err := deviceSpec(p, p.Streams[p.Tasks[t].Streams[0]].Device)
	if err != nil {
		return 0, err
	}
	return m.Compute.Time(spec, p.Work(t))
}

// Slowdown implements Contention with the calibrated contention of the
// device's type.
func (m CostModel) Slowdown(p *plans.Plan, device int) float64 {
	spec, err := deviceSpec(p, device)
	if err != nil {
		return 0
	}
	return m.Compute.Slowdown(spec)
}

func deviceSpec(p *plans.Plan, device int) (topology.DeviceSpec, error) {
	d := p.Devices[device]
	return topology.Spec(d.Type, d.Workers)
}
