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
type CostModel struct {
	Compute *cost.ComputeModel
}

var _ Durations = CostModel{}

// Duration implements Durations.
func (m CostModel) Duration(p *plans.Plan, t int) (time.Duration, error) {
	d := p.Devices[p.Streams[p.Tasks[t].Streams[0]].Device]
	spec, err := topology.Spec(d.Type, d.Workers)
	if err != nil {
		return 0, err
	}
	return m.Compute.Time(spec, p.Work(t))
}
