package sim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// CostModel prices every task on its home device. Kernels go to the
// compute model, by op kind and shape. Communication between accelerators,
// and between CPU devices of different hosts (processes of a multi-process
// run), goes to the communication model over the cluster's routes, when
// Comm is set and knows the plan's devices by name (across processes it
// takes the runtime's direct collectives, cost.Direct, and a member's
// wake-ups as it waits for the others, see wakes); communication between
// CPU devices of one host (in-process copies and reductions) goes to the
// compute model as the memory-bound kinds "transfer" and "allreduce",
// calibrated like kernels. Devices of one host slow each other down by the
// calibrated contention.
type CostModel struct {
	Compute *cost.ComputeModel
	Comm    *cost.Comm // optional
}

var (
	_ Durations   = CostModel{}
	_ Contention  = CostModel{}
	_ LinkSharing = CostModel{}
	_ Dispatch    = CostModel{}
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
	if !m.communicates(p, t, home) {
		return 0, false, nil
	}
	d, _, ok, err = m.price(p, t, 0)
	if ok && err == nil && home.Class == topology.CPU {
		d += time.Duration(wakes(p.Tasks[t].Kind)) * m.Compute.Dispatch(home)
	}
	return d, ok, err
}

// wakes is the number of times a member of a collective of kind k between
// processes waits for the other ranks' messages (runtime.allReduceRanks
// and its kin): its stream's goroutine sleeps until the goroutine that
// receives them wakes it, at the calibrated dispatch latency each time,
// which a link's ping-pong (flowrun calibrate link), received by the
// goroutine that waits, does not hold. An all-reduce waits twice, for the
// parts it reduces and for the others' reduced chunks; an all-gather or a
// reduce-scatter once. A transfer's receiver is woken through the plan's
// edge, which the simulator already delays by the dispatch latency.
func wakes(k plans.TaskKind) int {
	switch k {
	case plans.AllReduce:
		return 2
	case plans.AllGather, plans.ReduceScatter:
		return 1
	}
	return 0
}

// compiledFor is " (compiled for CLUSTER)" for p's cluster, or nothing for
// a plan that names none.
func compiledFor(p *plans.Plan) string {
	if p.Cluster == "" {
		return ""
	}
	return " (compiled for " + p.Cluster + ")"
}

// CheckCluster says whether m.Comm's cluster knows, by name, every device
// of p that a transfer or collective it prices involves: where it does not,
// the task is priced as an in-process copy instead, as if no cluster had
// been given. The error names the first device missing and its task. A
// cluster that holds none of p's devices, by name or as the one a CPU
// device was split from ("local/cpu" of "local/cpu:1"), is refused too,
// though p may communicate not at all: it is the wrong cluster.
func (m CostModel) CheckCluster(p *plans.Plan) error {
	if m.Comm == nil {
		return nil
	}
	c := m.Comm.Cluster()
	if !slices.ContainsFunc(p.Devices, func(d plans.Device) bool { return holds(c, d.Name) }) {
		others := fmt.Sprintf(", nor any other of the plan's %d", len(p.Devices))
		if len(p.Devices) == 1 {
			others = ", the plan's one device"
		}
		return fmt.Errorf("sim: cluster %s has no device %s%s%s: it is not the plan's cluster", c.Name, p.Devices[0].Name, others, compiledFor(p))
	}
	for t := range p.Tasks {
		task := &p.Tasks[t]
		spec, err := deviceSpec(p, p.Streams[task.Streams[0]].Device)
		if err != nil {
			return err
		}
		if !m.communicates(p, t, spec) {
			continue
		}
		var devs []int
		for _, s := range task.Streams {
			devs = append(devs, p.Streams[s].Device)
		}
		if task.Kind == plans.Transfer {
			devs = append(devs, p.Registers[task.Writes[0]].Device)
		}
		for _, d := range devs {
			id, ok := c.DeviceByName(p.Devices[d].Name)
			if !ok {
				return fmt.Errorf("sim: cluster %s has no device %s, which task %s of the plan%s communicates from or to",
					c.Name, p.Devices[d].Name, task.Name, compiledFor(p))
			}
			if got, want := c.Devices[id].Type, p.Devices[d].Type; got != want {
				return fmt.Errorf("sim: cluster %s's device %s is of type %s, the plan's%s of type %s",
					c.Name, p.Devices[d].Name, got, compiledFor(p), want)
			}
		}
	}
	return nil
}

// CheckCalibration checks calibration c against p's devices: an error if
// it holds none of them, whose fits would then price nothing of the plan
// (the catalog's efficiencies would, as without c); else the calibration
// keys of those it lacks ("T4", "cpu/8"), which the catalog prices.
func CheckCalibration(p *plans.Plan, c *cost.Calibration) (lacking []string, err error) {
	return CheckCalibrationOf(p.Devices, "the plan's devices", c)
}

// CheckCalibrationOf is CheckCalibration for devices devs (whose, for the
// error), e.g. those of the plans a search compiles.
func CheckCalibrationOf(devs []plans.Device, whose string, c *cost.Calibration) (lacking []string, err error) {
	if c == nil {
		return nil, nil
	}
	specs := make([]topology.DeviceSpec, len(devs))
	for i, d := range devs {
		if specs[i], err = topology.Spec(d.Type, d.Workers); err != nil {
			return nil, err
		}
	}
	lacking, held := c.Lacks(specs)
	uncalibrated := 0
	for _, s := range specs {
		if slices.Contains(lacking, cost.CalibrationKey(s)) {
			uncalibrated++
		}
	}
	if uncalibrated == len(specs) {
		holds := strings.Join(held, ", ")
		if holds == "" {
			holds = "nothing"
		}
		return nil, fmt.Errorf("sim: the calibration holds none of %s (%s; it holds %s): it would price nothing",
			whose, strings.Join(lacking, ", "), holds)
	}
	return lacking, nil
}

// UncalibratedOps lists the kernels of p that calibration c prices by the
// catalog's efficiencies although it holds their device: for each
// calibration key, the op kinds of p's compute tasks on such devices that
// c has no fit of ("cpu/2: batch_norm, batch_norm_grad"), and those it
// measured on too few shapes to fit, none of them p's shape or of its
// family ("conv2d_grad_data (other shapes only)"), sorted. A calibration
// made from other models' tasks lacks the ops only p uses; one made at
// other batch sizes, the shapes of p's micro-batches where their families
// do not reach.
func UncalibratedOps(p *plans.Plan, c *cost.Calibration) ([]string, error) {
	if c == nil {
		return nil, nil
	}
	m := cost.NewComputeModel(c)
	kinds := map[string]map[string]bool{} // key → kind lacked → measured at other shapes
	priced := map[string]bool{}           // key and task Key, once
	for t := range p.Tasks {
		task := &p.Tasks[t]
		if task.Op == nil {
			continue
		}
		spec, err := deviceSpec(p, p.Streams[task.Streams[0]].Device)
		if err != nil {
			return nil, err
		}
		dc := c.For(spec)
		if dc == nil {
			continue // CheckCalibration's to report
		}
		key, kind, other := cost.CalibrationKey(spec), task.Op.Type, false
		if !c.LacksOp(spec, kind) {
			k := key + "\x00" + task.Key
			if kinds[key][kind] || priced[k] {
				continue
			}
			priced[k] = true
			pr, err := m.Predict(spec, p.Work(t))
			if err != nil || pr.Source != cost.FromDefault {
				continue
			}
			other = dc.Ops[kind] != nil // else "*"'s, not the kind's
		}
		if kinds[key] == nil {
			kinds[key] = map[string]bool{}
		}
		kinds[key][kind] = kinds[key][kind] || other
	}
	var out []string
	for _, key := range slices.Sorted(maps.Keys(kinds)) {
		var names []string
		for _, kind := range slices.Sorted(maps.Keys(kinds[key])) {
			if kinds[key][kind] {
				kind += " (other shapes only)"
			}
			names = append(names, kind)
		}
		out = append(out, key+": "+strings.Join(names, ", "))
	}
	return out, nil
}

// communicates says whether the communication model prices task t.
func (m CostModel) communicates(p *plans.Plan, t int, home topology.DeviceSpec) bool {
	task := &p.Tasks[t]
	return m.Comm != nil && (task.Kind == plans.Transfer || task.Kind.Collective()) &&
		(home.Class != topology.CPU || !oneHost(p, task))
}

// price prices task t, a transfer or collective, with its devices moved
// by offset (another rank or replica of a plan that lists one for its
// group), and says which links it uses; ok is false if the cluster does
// not know a device.
func (m CostModel) price(p *plans.Plan, t, offset int) (d time.Duration, uses []cost.LinkUse, ok bool, err error) {
	task := &p.Tasks[t]
	id := func(dev int) (topology.DeviceID, bool) {
		if dev+offset >= len(p.Devices) {
			return 0, false
		}
		return m.Comm.Cluster().DeviceByName(p.Devices[dev+offset].Name)
	}
	switch task.Kind {
	case plans.Transfer:
		src, ok1 := id(p.Streams[task.Streams[0]].Device)
		dst, ok2 := id(p.Registers[task.Writes[0]].Device)
		if !ok1 || !ok2 {
			return 0, nil, false, nil
		}
		d, uses, err = m.Comm.PointToPointUse(src, dst, task.Bytes)
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
					return 0, nil, false, nil
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
			d, uses = e.Time, e.Links
		}
	}
	return d, uses, true, err
}

// Links implements LinkSharing: the links a transfer or collective uses,
// from the communication model. In a plan that lists one rank for its
// tensor-parallel group or one replica for its data-parallel group, a
// listed task stands for its peers' too, which run alike and at once: it
// uses the links of all of them, so that they share links with each other
// and with everything else as the whole plan's would.
func (m CostModel) Links(p *plans.Plan, t int) ([]cost.LinkUse, error) {
	offsets, err := m.peerOffsets(p, t)
	if err != nil || offsets == nil {
		return nil, err
	}
	if len(offsets) == 1 {
		_, uses, _, err := m.price(p, t, 0)
		return uses, err
	}
	sum := map[dirLink]float64{}
	var order []dirLink
	for _, o := range offsets {
		_, uses, ok, err := m.price(p, t, o)
		if err != nil || !ok {
			return nil, err
		}
		for _, u := range uses {
			k := dirLink{u.Link, u.Forward, u.Both}
			if _, seen := sum[k]; !seen {
				order = append(order, k)
			}
			sum[k] += u.Share
		}
	}
	out := make([]cost.LinkUse, len(order))
	for i, k := range order {
		out[i] = cost.LinkUse{Link: k.link, Forward: k.fwd, Both: k.both, Share: sum[k]}
	}
	return out, nil
}

// stride returns offsets + k·step for every offset and k < n.
// peerOffsets returns the device offsets of the peers a transfer or
// collective t stands for in a plan listing one rank or replica for its
// group (0 first: itself), or nil if t uses no link.
func (m CostModel) peerOffsets(p *plans.Plan, t int) ([]int, error) {
	spec, err := deviceSpec(p, p.Streams[p.Tasks[t].Streams[0]].Device)
	if err != nil {
		return nil, err
	}
	if !m.communicates(p, t, spec) {
		return nil, nil
	}
	task := &p.Tasks[t]
	offsets := []int{0}
	if p.SharedTP && (task.Kind == plans.Transfer || !task.Sum) {
		offsets = stride(offsets, p.TPDegree(), 1)
	}
	if p.SharedDP && (task.Kind == plans.Transfer || task.Sum) {
		offsets = stride(offsets, p.DP, p.PP*p.TPDegree())
	}
	return offsets, nil
}

func stride(offsets []int, n, step int) []int {
	var out []int
	for k := range n {
		for _, o := range offsets {
			out = append(out, o+k*step)
		}
	}
	return out
}

// Slowdown implements Contention with the calibrated contention of the
// task's device type for its op kind.
func (m CostModel) Slowdown(p *plans.Plan, t int) float64 {
	spec, err := deviceSpec(p, p.Streams[p.Tasks[t].Streams[0]].Device)
	if err != nil {
		return 0
	}
	return m.Compute.Slowdown(spec, p.Work(t).Kind)
}

// Dispatch implements Dispatch with the calibrated dispatch latency of the
// device's type.
func (m CostModel) Dispatch(p *plans.Plan, device int) time.Duration {
	spec, err := deviceSpec(p, device)
	if err != nil {
		return 0
	}
	return m.Compute.Dispatch(spec)
}

// SharesExactly reports whether p, where it lists one rank for a
// tensor-parallel group or one replica for its peers (Plan.SharedTP,
// SharedDP), simulates under d to the step of the plan listing them all:
// where its peers run alike and at once. That takes a cost model that
// prices no dispatch latency and no contention between the devices of a
// host on p's devices (a group's collective is at home on one member: a
// latency wakes the others after it, contention slows them unlike it),
// and every transfer and collective priced alike for each peer it stands
// for, in time and in the shares of the links it uses (on a DGX-1's hybrid
// cube mesh, ranks 0 and 1 of a group reach the next stage over two
// NVLinks, ranks 2 and 3 over one). Durations other than CostModel are
// taken to price a plan alike for every peer unless they model dispatch,
// contention or links.
func SharesExactly(d Durations, p *plans.Plan) bool {
	if !p.SharedTP && !p.SharedDP {
		return true
	}
	m, ok := d.(CostModel)
	if !ok {
		_, dispatch := d.(Dispatch)
		_, contention := d.(Contention)
		_, links := d.(LinkSharing)
		return !dispatch && !contention && !links
	}
	for dev := range p.Devices {
		spec, err := deviceSpec(p, dev)
		if err != nil || m.Compute.Dispatch(spec) > 0 || m.Compute.Contends(spec) {
			return false
		}
	}
	for t := range p.Tasks {
		offsets, err := m.peerOffsets(p, t)
		if err != nil {
			return false
		}
		if len(offsets) < 2 {
			continue
		}
		d0, u0, ok, err := m.price(p, t, 0)
		if err != nil || !ok {
			return false
		}
		for _, o := range offsets[1:] {
			d1, u1, ok, err := m.price(p, t, o)
			if err != nil || !ok || d1 != d0 || !sameShares(u0, u1) {
				return false
			}
		}
	}
	return true
}

// sameShares reports whether two sets of link uses ask the same shares of
// their links, link for link in order of share.
func sameShares(a, b []cost.LinkUse) bool {
	if len(a) != len(b) {
		return false
	}
	sa, sb := make([]float64, len(a)), make([]float64, len(b))
	for i := range a {
		sa[i], sb[i] = a[i].Share, b[i].Share
	}
	slices.Sort(sa)
	slices.Sort(sb)
	return slices.Equal(sa, sb)
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

// holds says whether cluster c has the device named name, or the CPU
// device it was split from (plans.DevicesFromCluster names the parts
// NAME:k).
func holds(c *topology.Cluster, name string) bool {
	if _, ok := c.DeviceByName(name); ok {
		return true
	}
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return false
	}
	if _, err := strconv.ParseUint(name[i+1:], 10, 31); err != nil {
		return false
	}
	id, ok := c.DeviceByName(name[:i])
	return ok && c.Devices[id].Spec.Cores > 0
}
