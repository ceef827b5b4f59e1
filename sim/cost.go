package sim

import (
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// CostModel prices every task on its home device. Kernels go to the
// compute model, by op kind and shape. Communication between accelerators,
// and between CPU devices of different hosts (processes of a multi-process
// run), goes to the communication model over the cluster's routes, when
// Comm is set and knows the plan's devices by name; communication between
// CPU devices of one host (in-process copies and reductions) goes to the
// compute model as the memory-bound kinds "transfer" and "allreduce",
// calibrated like kernels. Devices of one host slow each other down by the
// calibrated contention.
type CostModel struct {
	Compute *cost.ComputeModel
	Comm    *cost.Comm // optional
}

var (
	_ Durations  = CostModel{}
	_ Contention = CostModel{}
)

// Duration implements Durations.
func (m CostModel) Duration(p *plans.Plan, t int) (time.Duration, error) {
	home := p.Streams[p.Tasks[t].Streams[0]].Device
	spec, err := deviceSpec(p, home)
	if err != nil {
		return 0, err
	}
	if d, ok, err := m.comm(p, t, spec); ok || err != nil {
		return d, err
	}
	return m.Compute.Time(spec, p.Work(t))
}

// comm prices a transfer or a collective between accelerators, or between
// hosts, with the communication model; ok is false when that does not
// apply.
func (m CostModel) comm(p *plans.Plan, t int, home topology.DeviceSpec) (d time.Duration, ok bool, err error) {
	task := &p.Tasks[t]
	if m.Comm == nil || (task.Kind != plans.Transfer && !task.Kind.Collective()) ||
		(home.Class == topology.CPU && oneHost(p, task)) {
		return 0, false, nil
	}
	id := func(dev int) (topology.DeviceID, bool) { return m.Comm.Cluster().DeviceByName(p.Devices[dev].Name) }
	switch task.Kind {
	case plans.Transfer:
		src, ok1 := id(p.Streams[task.Streams[0]].Device)
		dst, ok2 := id(p.Registers[task.Writes[0]].Device)
		if !ok1 || !ok2 {
			return 0, false, nil
		}
		d, err = m.Comm.PointToPoint(src, dst, task.Bytes)
	default:
		var group []topology.DeviceID
		for _, s := range task.Streams {
			members := []int{p.Streams[s].Device}
			switch { // a listed device stands for its group: price the collective over all of it
			case p.SharedTP && task.Sum:
				members = members[:0]
				for r := range p.TPDegree() {
					members = append(members, p.Streams[s].Device+r)
				}
			case p.SharedDP && !task.Sum:
				members = members[:0]
				for r := range p.DP {
					members = append(members, p.Streams[s].Device+r*p.PP*p.TPDegree())
				}
			}
			for _, d := range members {
				g, ok := id(d)
				if !ok {
					return 0, false, nil
				}
				group = append(group, g)
			}
		}
		op := cost.OpAllReduce
		switch task.Kind {
		case plans.AllGather:
			op = cost.OpAllGather
		case plans.ReduceScatter:
			op = cost.OpReduceScatter
		}
		var e cost.Estimate
		if e, err = m.Comm.Collective(op, group, task.Bytes, cost.Auto); err == nil {
			d = e.Time
		}
	}
	return d, true, err
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

// oneHost says whether every device a transfer or all-reduce touches is on
// one host (or the plan does not say).
func oneHost(p *plans.Plan, task *plans.Task) bool {
	host := p.Devices[p.Streams[task.Streams[0]].Device].Host
	for _, w := range task.Writes {
		if p.Devices[p.Registers[w].Device].Host != host {
			return false
		}
	}
	return true
}
