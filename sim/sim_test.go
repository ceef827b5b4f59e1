package sim

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func devices(n int) []plans.Device {
	d := make([]plans.Device, n)
	for i := range d {
		d[i] = plans.Device{Name: "cpu" + string(rune('0'+i)), Type: "cpu", Workers: 1}
	}
	return d
}

func compile(t testing.TB, model, strategy string, batch int) *plans.Plan {
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st,
		Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devices(st.Devices())})
	require.NoError(t, err)
	return p
}

// unit prices compute tasks at 1 µs per forward/update op, 2 µs per
// backward op, and everything else at zero.
var unit = DurationFunc(func(p *plans.Plan, t int) (time.Duration, error) {
	task := p.Tasks[t]
	switch {
	case task.Kind != plans.Compute:
		return 0, nil
	case task.Phase == "backward":
		return 2 * time.Microsecond, nil
	}
	return time.Microsecond, nil
})

// On one device a step is the sum of its tasks.
func TestSingleStepIsSumOfTasks(t *testing.T) {
	p := compile(t, "mlp", "single", 8)
	tr, err := Simulate(p, unit, 4)
	require.NoError(t, err)
	var want time.Duration
	for i := range p.Tasks {
		d, _ := unit(p, i)
		want += d
	}
	got, err := tr.StepTime(1)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// GPipe with uniform stages: a step takes (m + p − 1) forward slots and as
// many backward slots of the slowest stage, the textbook bubble.
func TestGPipeBubble(t *testing.T) {
	// Every stage's forward block costs F and backward block B; with free
	// transfers the iteration's makespan is (m+p−1)·(F+B) where F, B are
	// per-stage block times, if stages are equal. mlp at pp=3 cuts one
	// linear layer per stage: equal op counts.
	p := compile(t, "mlp", "pp=3,mb=4,sched=gpipe", 12)
	var fwd, bwd [3]time.Duration
	upd := [3]time.Duration{}
	for i, task := range p.Tasks {
		d, _ := unit(p, i)
		switch {
		case task.Phase == "forward":
			fwd[task.Stage] += d
		case task.Phase == "backward":
			bwd[task.Stage] += d
		case task.Phase == "update":
			upd[task.Stage] += d
		}
	}
	tr, err := Simulate(p, unit, 1)
	require.NoError(t, err)
	end := tr.IterationEnds()[0]
	// Lower bound: stage 0 runs all its blocks and waits for the pipeline
	// to fill and drain.
	maxF, maxB := max(fwd[0], fwd[1], fwd[2]), max(bwd[0], bwd[1], bwd[2])
	const m, stages = 4, 3
	bound := time.Duration(m+stages-1) * (maxF + maxB)
	require.GreaterOrEqual(t, time.Duration(end), time.Duration(m)*(fwd[0]+bwd[0])+upd[0])
	require.LessOrEqual(t, time.Duration(end), bound+upd[0]+upd[1]+upd[2])
}

// Same plan and prices, same trace, byte for byte.
func TestDeterministic(t *testing.T) {
	p := compile(t, "mnist-cnn", "dp=2,pp=2,mb=2", 16)
	out := func() []byte {
		tr, err := Simulate(p, unit, 3)
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, trace.WriteChrome(&b, tr))
		return b.Bytes()
	}
	require.Equal(t, out(), out())
}

// ZeRO stages 2 and 3 over uneven replicas simulate, deterministically: a
// replica with fewer micro-batches joins every round's collectives, each
// priced over all the replicas, and computes less.
func TestZeroUnevenSimulates(t *testing.T) {
	for _, s := range []string{"dp=2,mb=3:1,zero=2", "dp=2,mb=3:1,zero=3", "dp=2,mb=1:3,zero=3,prefetch=1", "dp=3,pp=2,mb=2:1:1,zero=3,prefetch=1"} {
		t.Run(s, func(t *testing.T) {
			p := compile(t, "mlp", s, 8)
			out := func() []byte {
				tr, err := Simulate(p, unit, 3)
				require.NoError(t, err)
				require.NoError(t, p.CheckTrace(tr))
				var b bytes.Buffer
				require.NoError(t, trace.WriteChrome(&b, tr))
				return b.Bytes()
			}
			require.Equal(t, out(), out())
			computes := make([]int, len(p.Devices)) // compute firings per device
			rounds := make([]int, len(p.Devices))   // round collectives' firings per device
			for _, st := range p.Streams {
				for _, f := range st.Order {
					switch task := &p.Tasks[p.Firings[f].Task]; {
					case task.Kind == plans.Compute && task.PerMicro:
						computes[st.Device]++
					case task.Rounds && task.Kind.Collective():
						rounds[st.Device]++
					}
				}
			}
			for d := range p.Devices {
				first := p.Stage(d) * p.TPDegree() // replica 0's device of the stage
				require.Equal(t, rounds[first], rounds[d], "%s joins every round", p.Devices[d].Name)
				require.Equal(t, computes[first]*p.Micros(p.Replica(d)), computes[d]*p.Micros(0), "%s computes its micro-batches", p.Devices[d].Name)
			}
		})
	}
}

// Property: for any strategy and any task durations, the simulated trace
// obeys every dependency edge and slot count of the plan, and never has
// two registers that share memory live at once.
func TestSimulatedTracesObeyThePlan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p, tr := randomRun(rt)
		if err := p.CheckTrace(tr); err != nil {
			rt.Fatalf("%s: %v", p.Strategy, err)
		}
	})
}

// randomRun compiles the mlp with a random strategy (replicas, their
// micro-batches even or not, stages, schedule, recompute, ZeRO's stages
// over the micro-batches, stages 2 and 3 in rounds) and simulates it for 3
// iterations with random task durations.
func randomRun(rt *rapid.T) (*plans.Plan, *trace.Trace) {
	dp := rapid.IntRange(1, 3).Draw(rt, "dp")
	pp := rapid.IntRange(1, 3).Draw(rt, "pp")
	shares := rapid.SliceOfN(rapid.IntRange(1, 4), dp, dp).Draw(rt, "mb")
	sched := rapid.SampledFrom([]string{"gpipe", "1f1b"}).Draw(rt, "sched")
	st := plans.Strategy{DP: dp, PP: pp, Sched: plans.Schedule(sched)}.WithShares(shares)
	st.Recompute = rapid.SampledFrom([]plans.Recompute{plans.RecomputeNone, plans.RecomputeFull}).Draw(rt, "recompute")
	if dp > 1 {
		st.Zero = rapid.IntRange(0, 3).Draw(rt, "zero")
	}
	if st.Zero == 3 {
		st.Prefetch = rapid.IntRange(0, 2).Draw(rt, "prefetch")
	}
	batch := st.TotalMicros() * rapid.IntRange(1, 3).Draw(rt, "per")
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: batch, Strategy: st,
		Optimizer: graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Devices: devices(dp * pp)})
	if err != nil {
		rt.Fatalf("compile %v: %v", st, err)
	}
	durs := make([]time.Duration, len(p.Tasks))
	for i := range durs {
		durs[i] = time.Duration(rapid.IntRange(0, 1000).Draw(rt, "d"))
	}
	tr, err := Simulate(p, DurationFunc(func(_ *plans.Plan, t int) (time.Duration, error) { return durs[t], nil }), 3)
	if err != nil {
		rt.Fatal(err)
	}
	return p, tr
}

func TestSimulateErrors(t *testing.T) {
	p := compile(t, "mlp", "single", 4)
	_, err := Simulate(p, unit, 0)
	require.ErrorContains(t, err, "iterations")
	_, err = Simulate(p, unit, 1e12) // would allocate terabytes
	require.ErrorContains(t, err, fmt.Sprintf("1000000000000 iterations of %d firings each are more than the %d events", len(p.Firings), trace.MaxEvents))
	_, err = Simulate(p, DurationFunc(func(*plans.Plan, int) (time.Duration, error) { return -1, nil }), 1)
	require.ErrorContains(t, err, "negative")
}

// contended prices every compute task at 1 ms alone and slows devices of
// one host down by k per other busy device.
type contended struct{ k float64 }

func (c contended) Duration(p *plans.Plan, t int) (time.Duration, error) {
	if p.Tasks[t].Kind == plans.Compute {
		return time.Millisecond, nil
	}
	return 0, nil
}

func (c contended) Slowdown(*plans.Plan, int) float64 { return c.k }

// byKind slows compute tasks of the kind named slow by k, and no other.
type byKind struct {
	contended
	slow string
}

func (c byKind) Slowdown(p *plans.Plan, t int) float64 {
	if p.Tasks[t].Kind == plans.Compute && p.Work(t).Kind == c.slow {
		return c.k
	}
	return 0
}

// Two data-parallel replicas on one host run their kernels side by side;
// with contention k each kernel takes 1+k times as long while the other
// replica is busy, and devices of different hosts do not interfere.
func TestContention(t *testing.T) {
	p := compile(t, "mlp", "dp=2", 8)
	kernels := 0
	for _, task := range p.Tasks {
		if task.Kind == plans.Compute && task.Replica == 0 {
			kernels++
		}
	}
	step := func(hostA, hostB string, k float64) time.Duration {
		p.Devices[0].Host, p.Devices[1].Host = hostA, hostB
		tr, err := Simulate(p, contended{k}, 3)
		require.NoError(t, err)
		require.NoError(t, p.CheckTrace(tr))
		s, err := tr.StepTime(1)
		require.NoError(t, err)
		return s
	}
	alone := time.Duration(kernels) * time.Millisecond
	require.Equal(t, alone, step("", "", 0.5), "no host: no contention")
	require.Equal(t, alone, step("a", "b", 0.5), "different hosts")
	require.Equal(t, alone, step("a", "a", 0), "no slowdown")
	require.Equal(t, alone*3/2, step("a", "a", 0.5), "both replicas always busy: every kernel 1.5×")

	// Contention by op kind: only the kernels of the kind slow down.
	p.Devices[0].Host, p.Devices[1].Host = "a", "a"
	byKindStep := func(slow string) time.Duration {
		tr, err := Simulate(p, byKind{contended{0.5}, slow}, 3)
		require.NoError(t, err)
		s, err := tr.StepTime(1)
		require.NoError(t, err)
		return s
	}
	perKind := map[string]int{}
	for i, task := range p.Tasks {
		if task.Kind == plans.Compute && task.Replica == 0 {
			perKind[p.Work(i).Kind]++
		}
	}
	require.Greater(t, len(perKind), 1)
	for kind, n := range perKind {
		require.Equal(t, alone+time.Duration(n)*time.Millisecond/2, byKindStep(kind), "only %s slows, 1.5×", kind)
	}
	require.Equal(t, alone, byKindStep("none"))
}

// On a GPU cluster, all-reduces are priced by the communication model over
// the cluster's routes.
func TestCommOnGPUCluster(t *testing.T) {
	p, c := compileOnCluster(t, "dgx-a100", "dp=8", 64, 8)
	comm := cost.NewComm(c)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: comm}
	checked := 0
	for i, task := range p.Tasks {
		if task.Kind != plans.AllReduce {
			continue
		}
		got, err := m.Duration(p, i)
		require.NoError(t, err)
		group := make([]topology.DeviceID, 8)
		for k := range group {
			group[k] = topology.DeviceID(k)
		}
		want, err := comm.AllReduce(group, task.Bytes, cost.Auto)
		require.NoError(t, err)
		require.Equal(t, want, got, task.Name)
		checked++
	}
	require.Equal(t, 6, checked, "one all-reduce per weight and bias")
}

// A cluster that lacks devices the plan communicates between would price
// their transfers and all-reduces as in-process copies: CheckCluster says
// so, naming the device; one-host CPU plans need no cluster's devices.
func TestCheckCluster(t *testing.T) {
	gpus, _ := compileOnCluster(t, "dgx-a100", "dp=2", 64, 2)
	cpus, _ := compileOnCluster(t, "local", "single", 64, 1)
	split, _ := compileOnCluster(t, "local", "dp=2", 64, 2)
	moved, _ := compileOnCluster(t, "dgx-a100", "dp=2", 64, 2)
	moved.Devices[1].Name = "elsewhere/gpu1"
	unnamed, _ := compileOnCluster(t, "local", "single", 64, 1) // a plan that names no cluster (written by hand, or by a tool of its own)
	unnamed.Cluster = ""
	for _, tc := range []struct {
		plan    *plans.Plan
		cluster string
		err     string // "" for none
	}{
		{gpus, "dgx-a100", ""},
		{gpus, "dgx-a100x2", "sim: cluster dgx-a100x2 has no device dgx/gpu0, nor any other of the plan's 2 (compiled for dgx-a100)"},
		{moved, "dgx-a100", "sim: cluster dgx-a100 has no device elsewhere/gpu1, which task"},
		{gpus, "p3.8xlarge", "sim: cluster p3.8xlarge has no device dgx/gpu0"},
		{gpus, "local", "has no device dgx/gpu0"},
		{cpus, "dgx-a100", "sim: cluster dgx-a100 has no device local/cpu, the plan's one device (compiled for local): it is not the plan's cluster"},
		{cpus, "local", ""},
		{split, "local", ""}, // local/cpu:0 and :1, parts of local/cpu
		{split, "dgx-a100", "sim: cluster dgx-a100 has no device local/cpu:0, nor any other of the plan's 2 (compiled for local)"},
		{unnamed, "dgx-a100", "sim: cluster dgx-a100 has no device local/cpu, the plan's one device: it is not the plan's cluster"},
	} {
		c, err := topology.Resolve(tc.cluster)
		require.NoError(t, err)
		err = CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}.CheckCluster(tc.plan)
		if tc.err == "" {
			require.NoError(t, err, tc.cluster)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.cluster)
	}
	// A cluster whose device has the plan's name but another type would
	// price its links for the wrong device.
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	c.Devices[1].Type = "V100-SXM2-32GB"
	err = CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}.CheckCluster(gpus)
	require.EqualError(t, err, "sim: cluster dgx-a100's device dgx/gpu1 is of type V100-SXM2-32GB, the plan's (compiled for dgx-a100) of type A100-SXM4-40GB")
}

// A calibration that holds none of a plan's devices would price nothing
// of it: CheckCalibration refuses it, naming both sides; one that holds
// some says which it lacks.
func TestCheckCalibration(t *testing.T) {
	gpus, _ := compileOnCluster(t, "dgx-a100", "dp=2", 64, 2)
	mixed, _ := compileOnCluster(t, "mixed-t4-cpu", "pp=2", 64, 2)
	cal := cost.NewCalibration()
	cal.Devices["cpu-cascadelake/8"] = &cost.DeviceCalibration{}
	_, err := CheckCalibration(gpus, cal)
	require.EqualError(t, err, "sim: the calibration holds none of the plan's devices (A100-SXM4-40GB; it holds cpu-cascadelake/8): it would price nothing")
	lacking, err := CheckCalibration(mixed, cal)
	require.NoError(t, err)
	require.Equal(t, []string{"T4"}, lacking)
	lacking, err = CheckCalibration(gpus, nil)
	require.NoError(t, err)
	require.Empty(t, lacking)
}

// A calibration made from other models' tasks prices a plan's other ops
// by the catalog: UncalibratedOps names them by device, unless a "*" fit
// covers every kind.
func TestUncalibratedOps(t *testing.T) {
	p := compile(t, "mnist-cnn", "dp=2", 8)
	cal := cost.NewCalibration()
	fits := map[string]*cost.OpFit{}
	for _, kind := range []string{"conv2d", "conv2d_grad_data", "conv2d_grad_filter", "bias_act", "bias_act_grad", "bias_grad",
		"dense", "dense_grad", "matmul", "reshape", "softmax_cross_entropy", "softmax_cross_entropy_grad", "fill", "momentum_update"} {
		fits[kind] = &cost.OpFit{}
	}
	cal.Devices["cpu/1"] = &cost.DeviceCalibration{Ops: fits}
	ops, err := UncalibratedOps(p, cal)
	require.NoError(t, err)
	require.Equal(t, []string{"cpu/1: max_pool2d, max_pool2d_grad, relu_grad"}, ops)
	fits["*"] = &cost.OpFit{}
	ops, err = UncalibratedOps(p, cal)
	require.NoError(t, err)
	require.Empty(t, ops)
	ops, err = UncalibratedOps(p, cost.NewCalibration()) // a device it lacks is CheckCalibration's to report
	require.NoError(t, err)
	require.Empty(t, ops)

	// A kind measured on too few shapes to fit (cost.ExactOnly) prices
	// the shapes it did not measure by the catalog too, unless their
	// family interpolates them.
	delete(fits, "*")
	for _, kind := range []string{"max_pool2d", "max_pool2d_grad", "relu_grad"} {
		fits[kind] = &cost.OpFit{}
	}
	var grad int
	for t := range p.Tasks {
		if op := p.Tasks[t].Op; op != nil && op.Type == "conv2d_grad_data" {
			grad = t
		}
	}
	w := p.Work(grad)
	cpu, err := topology.Spec("cpu", 1)
	require.NoError(t, err)
	measured, err := cost.ExactOnly(cpu, []cost.Sample{{Work: cost.Work{Kind: "conv2d_grad_data", FLOPs: 1e6, Bytes: 1e4, DType: "f32", Shape: []int{1, 2, 3}}, Time: time.Millisecond}})
	require.NoError(t, err)
	fits["conv2d_grad_data"] = &measured
	ops, err = UncalibratedOps(p, cal)
	require.NoError(t, err)
	require.Equal(t, []string{"cpu/1: conv2d_grad_data (other shapes only)"}, ops)
	fits["conv2d_grad_data"].Exact = append(fits["conv2d_grad_data"].Exact, cost.Measurement{DType: "f32", Shape: w.Shape, Time: time.Millisecond})
	ops, err = UncalibratedOps(p, cal)
	require.NoError(t, err)
	require.Empty(t, ops, "its shape measured")
	fits["conv2d_grad_data"].Exact = fits["conv2d_grad_data"].Exact[:1]
	fits["conv2d_grad_data"].Families = map[string][]cost.FamilyPoint{w.Family: {{Work: 1e6, Time: time.Millisecond}, {Work: 2e6, Time: 2 * time.Millisecond}}}
	ops, err = UncalibratedOps(p, cal)
	require.NoError(t, err)
	require.Empty(t, ops, "its family measured")
	// A kind left to a "*" measured only elsewhere is not the kind's.
	delete(fits, "relu_grad")
	fits["*"] = &measured
	ops, err = UncalibratedOps(p, cal)
	require.NoError(t, err)
	require.Equal(t, []string{"cpu/1: relu_grad"}, ops)
}

// Between CPU devices, transfers and all-reduces are in-process copies
// priced by the compute model on one host, and network traffic priced by
// the communication model between hosts (the processes of a multi-process
// run).
func TestCommBetweenHosts(t *testing.T) {
	for _, tt := range []struct {
		cluster  string
		strategy string
		n        int
		network  bool
	}{
		{"local", "dp=2", 2, false},
		{"localx2", "dp=2", 2, true},
		{"localx2", "pp=2,mb=2", 2, true},
		{"localx3", "dp=3", 3, true},
	} {
		t.Run(tt.cluster+"/"+tt.strategy, func(t *testing.T) {
			p, c := compileOnCluster(t, tt.cluster, tt.strategy, 24, tt.n)
			comm := cost.NewComm(c)
			m := CostModel{Compute: cost.NewComputeModel(nil), Comm: comm}
			checked := 0
			for i, task := range p.Tasks {
				if task.Kind != plans.AllReduce && task.Kind != plans.Transfer {
					continue
				}
				got, err := m.Duration(p, i)
				require.NoError(t, err)
				spec, err := deviceSpec(p, p.Streams[task.Streams[0]].Device)
				require.NoError(t, err)
				local, err := m.Compute.Time(spec, p.Work(i))
				require.NoError(t, err)
				if !tt.network {
					require.Equal(t, local, got, task.Name)
					checked++
					continue
				}
				var net time.Duration
				if task.Kind == plans.Transfer {
					net, err = comm.PointToPoint(0, 1, task.Bytes)
				} else {
					group := make([]topology.DeviceID, tt.n)
					for i := range group {
						group[i] = topology.DeviceID(i)
					}
					// As the multi-process runtime runs it: direct, 2 latency steps.
					net, err = comm.AllReduce(group, task.Bytes, cost.Direct)
					if tt.n > 2 {
						ring, err := comm.AllReduce(group, task.Bytes, cost.Ring)
						require.NoError(t, err)
						require.Less(t, net, ring, task.Name)
					}
				}
				require.NoError(t, err)
				require.NotEqual(t, local, net)
				require.Equal(t, net, got, task.Name)
				checked++
			}
			require.Positive(t, checked)
		})
	}
}

// A member of an all-reduce between processes waits twice for the other
// ranks' messages, each time woken at the calibrated dispatch latency: its
// price is the network's and two dispatches. A transfer's receiver is
// woken through the plan's edge (TestDispatchLatency), and an all-reduce
// in one process waits for nothing.
func TestCollectiveWakesBetweenHosts(t *testing.T) {
	const dispatch = 70 * time.Microsecond
	for _, tt := range []struct {
		cluster, strategy string
		network           bool
	}{{"localx2", "dp=2", true}, {"localx2", "dp=2,bucket=1GiB", true}, {"local", "dp=2", false}} {
		t.Run(tt.cluster+"/"+tt.strategy, func(t *testing.T) {
			p, c := compileOnCluster(t, tt.cluster, tt.strategy, 24, 2)
			spec, err := deviceSpec(p, 0)
			require.NoError(t, err)
			calib := &cost.Calibration{Version: cost.CalibrationVersion, Devices: map[string]*cost.DeviceCalibration{
				cost.CalibrationKey(spec): {Dispatch: dispatch, Ops: map[string]*cost.OpFit{}}}}
			woken := CostModel{Compute: cost.NewComputeModel(calib), Comm: cost.NewComm(c)}
			plain := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
			checked := 0
			for i, task := range p.Tasks {
				if task.Kind != plans.AllReduce && task.Kind != plans.Transfer && task.Kind != plans.Pack {
					continue
				}
				got, err := woken.Duration(p, i)
				require.NoError(t, err)
				want, err := plain.Duration(p, i)
				require.NoError(t, err)
				if task.Kind == plans.AllReduce && tt.network {
					want += 2 * dispatch
				}
				require.Equal(t, want, got, task.Name)
				checked++
			}
			require.Positive(t, checked)
		})
	}
}

// compileOnCluster compiles mlp with a strategy for n devices of a
// cluster (cores divided among devices where it has fewer).
func compileOnCluster(t *testing.T, cluster, strategy string, batch, n int) (*plans.Plan, *topology.Cluster) {
	t.Helper()
	c, err := topology.Resolve(cluster)
	require.NoError(t, err)
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, n, true)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: batch, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Cluster: c.Name, Devices: devs})
	require.NoError(t, err)
	return p, c
}

// A tensor-parallel group's sums are all-reduces over its GPUs, priced by
// the communication model on the machine's links, and held on the
// members' compute streams; the simulated trace obeys the plan.
func TestTensorParallelComm(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	comm := cost.NewComm(c)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: comm}
	const model = "gpt2s-blocks:layers=2,hidden=256,heads=4,seq=128"
	compile := func(strategy string) *plans.Plan {
		return compileBF16(t, c, model, strategy, 8, graph.SGD{LR: 0.1}, false)
	}
	single, p := compile("single"), compile("tp=4,mb=2")
	sums := 0
	for i, task := range p.Tasks {
		if !task.Sum {
			continue
		}
		sums++
		for j, s := range task.Streams {
			dev := p.Streams[s].Device
			require.Equal(t, "compute", p.Streams[s].Name)
			require.Equal(t, j, p.TPRank(dev))
			require.Equal(t, p.Registers[task.Writes[j]].Device, dev)
			require.Equal(t, p.Registers[task.Reads[j].Reg].Device, dev)
		}
		group := groupOf(t, c, p, &task)
		want, err := comm.AllReduce(group, task.Bytes, cost.Auto)
		require.NoError(t, err)
		got, err := m.Duration(p, i)
		require.NoError(t, err)
		require.Equal(t, want, got, task.Name)
	}
	require.Equal(t, 2*2*2, sums, "two sums per layer forward, two backward")
	tr, err := Simulate(p, m, 3)
	require.NoError(t, err)
	require.NoError(t, p.CheckTrace(tr))
	// Each device holds a quarter of the split weights.
	require.Less(t, p.Memory[0].Persistent, single.Memory[0].Persistent/2)
}

// A one-slot register written once per micro-batch holds each write only
// until its last read, so two such registers (backward temporaries) share
// bytes though each is written through the whole backward pass; the
// simulated trace shows them never live at once (CheckTrace checks every
// version's life against the memory plan).
func TestMemoryReusesPerWrite(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
	for _, strategy := range []string{"pp=2,mb=4,sched=1f1b", "pp=2,mb=4,sched=gpipe", "tp=2,mb=3"} {
		st, err := plans.ParseStrategy(strategy, 12)
		require.NoError(t, err)
		devs, err := plans.DevicesFromCluster(c, st.Devices(), false)
		require.NoError(t, err)
		p, err := plans.Compile(plans.Config{Model: "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128", Batch: 12, Strategy: st,
			Optimizer: graph.SGD{LR: 0.1}, Cluster: c.Name, Devices: devs, DType: graph.BF16})
		require.NoError(t, err)
		shared := 0
		for i := range p.Registers {
			a := &p.Registers[i]
			for j := range i {
				b := &p.Registers[j]
				if a.Device == b.Device && a.Slots == 1 && b.Slots == 1 && p.WritesPerIteration(i) > 1 && p.WritesPerIteration(j) > 1 &&
					a.Offset < b.Offset+b.Bytes() && b.Offset < a.Offset+a.Bytes() {
					shared++
				}
			}
		}
		require.Positive(t, shared, "%s: registers written per micro-batch share bytes", strategy)
		tr, err := Simulate(p, m, 3)
		require.NoError(t, err)
		require.NoError(t, p.CheckTrace(tr), strategy)
	}
}

// Under sequence parallelism a GPT block's sums become reduce-scatters and
// all-gathers of the same whole-tensor size, priced as the communication
// model prices those collectives: each half an all-reduce's volume. The
// activations between them are split, so a device's peak memory falls,
// and the simulated trace obeys the plan.
func TestSequenceParallelComm(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	comm := cost.NewComm(c)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: comm}
	const model = "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1024"
	compile := func(strategy string) *plans.Plan {
		return compileBF16(t, c, model, strategy, 8, graph.SGD{LR: 0.1}, false)
	}
	tp, sp := compile("tp=4,mb=2,recompute=selective"), compile("tp=4,sp=on,mb=2,recompute=selective")
	kinds := map[plans.TaskKind]int{}
	for i, task := range sp.Tasks {
		op := map[plans.TaskKind]cost.Op{plans.AllGather: cost.OpAllGather, plans.ReduceScatter: cost.OpReduceScatter}
		o, ok := op[task.Kind]
		if !ok {
			continue
		}
		kinds[task.Kind]++
		group := groupOf(t, c, sp, &task)
		want, err := comm.Collective(o, group, task.Bytes, cost.Auto)
		require.NoError(t, err)
		got, err := m.Duration(sp, i)
		require.NoError(t, err)
		require.Equal(t, want.Time, got, task.Name)
		whole, err := comm.AllReduce(group, task.Bytes, cost.Auto)
		require.NoError(t, err)
		require.Less(t, got, whole, "%s: half an all-reduce", task.Name)
	}
	// Per layer and direction, 2 of each; the embedding's scatter and the
	// head's gather forward, and their duals backward.
	require.Equal(t, map[plans.TaskKind]int{plans.AllGather: 2*2*2 + 2, plans.ReduceScatter: 2*2*2 + 2}, kinds)
	tr, err := Simulate(sp, m, 3)
	require.NoError(t, err)
	require.NoError(t, sp.CheckTrace(tr))
	require.Less(t, sp.Memory[0].Peak-sp.Memory[0].Persistent, tp.Memory[0].Peak-tp.Memory[0].Persistent, "split activations take less memory")
	t.Logf("activation memory per device: tp %v, tp+sp %v", tp.Memory[0].Peak-tp.Memory[0].Persistent, sp.Memory[0].Peak-sp.Memory[0].Persistent)
}

// An interleaved schedule shrinks the pipeline's bubble by the virtual
// stages per device: with pp stages and m micro-batches of time t each,
// 1F1B takes (m + pp − 1)·t and interleaving v stages (m + (pp−1)/v)·t.
// The simulated steps agree with that ratio within 5% (the interleaved
// plan sends v times the activations), and its trace obeys the plan.
func TestInterleavedBubble(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
	step := func(strategy string) time.Duration {
		return stepOf(t, compileBF16(t, c, "gpt2s-blocks:layers=12", strategy, 32, graph.SGD{LR: 0.1}, false), m)
	}
	const pp, mb = 4, 4
	plain := step("pp=4,mb=4")
	for _, v := range []int{2, 3} {
		got := float64(step(fmt.Sprintf("pp=4,vpp=%d,mb=4", v))) / float64(plain)
		want := (mb + float64(pp-1)/float64(v)) / (mb + pp - 1)
		require.InDelta(t, want, got, 0.05, "vpp=%d: step ratio to 1F1B", v)
		t.Logf("vpp=%d: %.3f of 1F1B's step (bubble model %.3f)", v, got, want)
	}
}

// ZeRO's reduce-scatters and all-gathers run over the replicas, priced as
// the communication model prices those collectives on the cluster's
// routes; together they move what the all-reduce did, so the simulated
// step stays within a few percent while the replicas' persistent memory
// falls.
func TestZeroComm(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	comm := cost.NewComm(c)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: comm}
	compile := func(strategy string) (*plans.Plan, time.Duration) {
		p := compileBF16(t, c, "gpt2s-blocks:layers=2", strategy, 16, graph.Adam{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, false)
		return p, stepOf(t, p, m)
	}
	plain, plainStep := compile("dp=8")
	zero, zeroStep := compile("dp=8,zero=1")
	ops := map[plans.TaskKind]cost.Op{plans.AllGather: cost.OpAllGather, plans.ReduceScatter: cost.OpReduceScatter}
	two, _ := compile("dp=8,mb=2,zero=2")
	three, _ := compile("dp=8,mb=2,zero=3")
	for _, p := range []*plans.Plan{zero, two, three} {
		n := 0
		for i, task := range p.Tasks {
			o, ok := ops[task.Kind]
			if !ok {
				continue
			}
			n++
			require.False(t, task.Sum)
			stream := "coll"
			if task.Kind == plans.AllGather && task.PerMicro { // stage 3's gathers hold the compute back (see plans)
				stream = "compute"
			}
			for _, s := range task.Streams {
				require.Equal(t, stream, p.Streams[s].Name, task.Name)
			}
			group := groupOf(t, c, p, &task)
			require.Len(t, group, 8)
			want, err := comm.Collective(o, group, task.Bytes, cost.Auto)
			require.NoError(t, err)
			got, err := m.Duration(p, i)
			require.NoError(t, err)
			require.Equal(t, want.Time, got, "%s: %s", p.Strategy, task.Name)
		}
		require.Positive(t, n, p.Strategy)
	}
	require.InDelta(t, 1, float64(zeroStep)/float64(plainStep), 0.05, "step %v with ZeRO, %v without", zeroStep, plainStep)
	require.Less(t, zero.Memory[0].Persistent, plain.Memory[0].Persistent*6/10, "Adam's state in eighths")
	t.Logf("step %v → %v; persistent memory %v → %v", plainStep, zeroStep, plain.Memory[0].Persistent, zero.Memory[0].Persistent)
}

// ZeRO's stages trade communication for memory. Per device, with W the
// bytes of the weights (each of which dp=8 divides), S of Adam's state and
// D the replicas, the model states — persistent registers, and the
// gradients accumulated over micro-batches — are, from the plans'
// registers:
//
//	zero=0: W + S        persistent, W accumulated
//	zero=1: W + (W+S)/D  persistent, W accumulated
//	zero=2: W + (W+S)/D  persistent, W/D accumulated
//	zero=3: (W+S)/D      persistent, W/D accumulated
//
// (the (W+S)/D being each replica's master part of the weight and of the
// state). The collectives move, per iteration of mb micro-batches, the
// gradient's bytes G once (the all-reduce), twice (stage 1's
// reduce-scatter and all-gather), mb+1 times (a reduce-scatter per
// micro-batch), and under stage 3 mb times plus the weights gathered for
// each micro-batch's forward and backward passes. The peaks fall with
// the stage, but for stage 2 with one micro-batch, whose peak comes
// before any gradient. The step: stage 1 within a few percent of none;
// stage 2 slower with one micro-batch (its compute waits for each
// reduce-scatter a layer later) but faster with two, where stages 0 and
// 1 accumulate whole gradients on the compute stream and stage 2 only
// parts; stage 3 slowest, the compute waiting for every gather.
func TestZeroStagesMemoryAndComm(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
	const d = 8
	type stage struct {
		persistent, accumulated, comm float64
		peak                          units.Bytes
		step                          time.Duration
	}
	measure := func(strategy string) stage {
		p := compileBF16(t, c, "gpt2s-blocks:layers=2", strategy, 32, graph.Adam{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, false)
		s := stage{persistent: float64(p.Memory[0].Persistent), peak: p.Memory[0].Peak, step: stepOf(t, p, m)}
		for _, r := range p.Registers {
			if r.Device == 0 && len(r.Writers) > 0 && p.Tasks[r.Writers[0]].Kind == plans.Accumulate {
				s.accumulated += float64(r.Bytes())
			}
		}
		for _, task := range p.Tasks {
			if task.Kind.Collective() && slices.ContainsFunc(task.Streams, func(s int) bool { return p.Streams[s].Device == 0 }) {
				require.False(t, p.Zero > 0 && task.Kind == plans.AllReduce, "%s: dp=8 divides every weight", task.Name)
				n := 1
				if task.PerMicro {
					n = p.MB
				}
				s.comm += float64(n) * float64(task.Bytes)
			}
		}
		return s
	}
	for _, mb := range []int{1, 2} {
		var z [4]stage
		for k := range z {
			z[k] = measure(fmt.Sprintf("dp=8,mb=%d,zero=%d", mb, k))
		}
		grad := 0.0 // G: the gradient's bytes, which stage 0's all-reduces move
		for _, task := range compileBF16(t, c, "gpt2s-blocks:layers=2", fmt.Sprintf("dp=8,mb=%d", mb), 32, graph.SGD{LR: 0.1}, false).Tasks {
			if task.Kind == plans.AllReduce {
				grad += float64(task.Bytes)
			}
		}
		w := grad // the weights are the gradients' size
		s := z[0].persistent - w
		require.InDelta(t, 2, s/w, 0.01, "Adam's two moments")
		near := func(want, got float64, what string) {
			t.Helper()
			require.InDelta(t, 1, got/want, 0.005, "mb=%d: %s: got %.0f, want %.0f", mb, what, got, want)
		}
		near(w+(w+s)/d, z[1].persistent, "stage 1 persistent")
		near(w+(w+s)/d, z[2].persistent, "stage 2 persistent")
		near((w+s)/d, z[3].persistent, "stage 3 persistent")
		near(grad, z[0].comm, "stage 0 communication")
		near(2*grad, z[1].comm, "stage 1 communication")
		near(float64(mb+1)*grad, z[2].comm, "stage 2 communication")
		near(w/d, z[2].accumulated, "stage 2 accumulated (a copy of the part with one micro-batch)")
		near(w/d, z[3].accumulated, "stage 3 accumulated")
		require.Greater(t, z[3].comm, float64(2*mb)*grad, "stage 3: a reduce-scatter and a forward gather per micro-batch, and backward gathers")
		if mb > 1 {
			near(w, z[0].accumulated, "stage 0 accumulated")
			near(w, z[1].accumulated, "stage 1 accumulated")
		}
		for k := 1; k < 4; k++ {
			states := func(k int) float64 { return z[k].persistent + z[k].accumulated }
			if mb > 1 { // with one, stages 0 and 1 accumulate nothing: their gradients are the backward pass's registers
				require.Less(t, states(k), states(k-1), "mb=%d: model states of stage %d below stage %d's", mb, k, k-1)
			}
			if mb == 1 && k == 2 { // the peak comes before any gradient is whole: the same, up to placement
				require.InDelta(t, 1, float64(z[k].peak)/float64(z[k-1].peak), 0.001, "mb=%d: peak of stage %d near stage %d's", mb, k, k-1)
			} else {
				require.Less(t, z[k].peak, z[k-1].peak, "mb=%d: peak of stage %d below stage %d's", mb, k, k-1)
			}
			if mb == 1 && k == 2 {
				require.Equal(t, z[k-1].comm, z[k].comm, "one micro-batch: stage 2 scatters once, as stage 1")
			} else {
				require.Greater(t, z[k].comm, z[k-1].comm, "mb=%d: stage %d communicates more than stage %d", mb, k, k-1)
			}
		}
		if mb > 1 {
			// What the peak saves: stage 2 the whole accumulator but its
			// part (the whole gradients it reduce-scatters are bounded to
			// two tasks' at a time), stage 3 the whole weight but its
			// part (each gathered whole lives from its gather to its
			// readers).
			saved := func(k int) float64 { return float64(z[k-1].peak - z[k].peak) }
			require.Greater(t, saved(2), 0.9*w*(1-1.0/d), "stage 2 saves %v of the peak", units.Bytes(saved(2)))
			require.Greater(t, saved(3), 0.9*w*(1-1.0/d), "stage 3 saves %v of the peak", units.Bytes(saved(3)))
		}
		require.InDelta(t, 1, float64(z[1].step)/float64(z[0].step), 0.05)
		if mb == 1 {
			require.Greater(t, z[2].step, z[1].step, "stage 2's compute waits for each reduce-scatter a layer later")
		} else {
			require.Less(t, z[2].step, z[1].step, "stage 2 accumulates parts on the compute stream, stage 1 whole gradients")
		}
		require.Greater(t, z[3].step, z[2].step, "stage 3 waits for its gathers")
		for k, s := range z {
			t.Logf("dp=8,mb=%d,zero=%d: persistent %v, accumulated gradients %v, peak %v; collectives %.1f MiB; step %v",
				mb, k, units.Bytes(s.persistent), units.Bytes(s.accumulated), s.peak, s.comm/(1<<20), s.step)
		}
	}
}

// ZeRO over tensor-parallel groups: with W a device's bytes of weights
// (its rank's parts and the weights every rank holds whole) and S Adam's
// state, its model states are TestZeroStagesMemoryAndComm's (W + S; W +
// (W+S)/D; W + (W+S)/D with W/D accumulated; (W+S)/D), the collectives
// over the replicas move G, 2G and (mb+1)·G of the gradients, each over
// the D devices of one tensor-parallel rank and priced over them alone,
// and the peaks fall with the stage.
func TestZeroWithTensorParallelMemoryAndComm(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	comm := cost.NewComm(c)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: comm}
	const d, mb = 4, 2
	ops := map[plans.TaskKind]cost.Op{plans.AllReduce: cost.OpAllReduce, plans.AllGather: cost.OpAllGather, plans.ReduceScatter: cost.OpReduceScatter}
	type stage struct {
		persistent, accumulated, comm float64
		peak                          units.Bytes
	}
	var z [4]stage
	for k := range z {
		p := compileBF16(t, c, "gpt2s-blocks:layers=2", fmt.Sprintf("dp=%d,tp=2,mb=%d,zero=%d", d, mb, k), 32, graph.Adam{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, false)
		z[k] = stage{persistent: float64(p.Memory[0].Persistent), peak: p.Memory[0].Peak}
		for _, r := range p.Registers {
			if r.Device == 0 && len(r.Writers) > 0 && p.Tasks[r.Writers[0]].Kind == plans.Accumulate {
				z[k].accumulated += float64(r.Bytes())
			}
		}
		for i, task := range p.Tasks {
			if !task.Kind.Collective() || task.Sum { // the tensor-parallel groups' sums, as without ZeRO
				continue
			}
			group := groupOf(t, c, p, &task)
			require.Len(t, group, d, task.Name)
			rank := p.TPRank(p.Streams[task.Streams[0]].Device)
			for j, s := range task.Streams {
				require.Equal(t, 2*j+rank, p.Streams[s].Device, "%s: member %d is replica %d's device of rank %d", task.Name, j, j, rank)
			}
			want, err := comm.Collective(ops[task.Kind], group, task.Bytes, cost.Auto)
			require.NoError(t, err)
			got, err := m.Duration(p, i)
			require.NoError(t, err)
			require.Equal(t, want.Time, got, task.Name)
			if rank == 0 {
				n := 1
				if task.PerMicro {
					n = mb
				}
				z[k].comm += float64(n) * float64(task.Bytes)
			}
		}
	}
	grad := z[0].comm // the all-reduces of every gradient
	w := grad
	s := z[0].persistent - w
	require.InDelta(t, 2, s/w, 0.01, "Adam's two moments")
	near := func(want, got float64, what string) {
		t.Helper()
		require.InDelta(t, 1, got/want, 0.005, "%s: got %.0f, want %.0f", what, got, want)
	}
	near(w+(w+s)/d, z[1].persistent, "stage 1 persistent")
	near(w+(w+s)/d, z[2].persistent, "stage 2 persistent")
	near((w+s)/d, z[3].persistent, "stage 3 persistent")
	near(w, z[1].accumulated, "stage 1 accumulated")
	near(w/d, z[2].accumulated, "stage 2 accumulated")
	near(w/d, z[3].accumulated, "stage 3 accumulated")
	near(2*grad, z[1].comm, "stage 1 communication")
	near(float64(mb+1)*grad, z[2].comm, "stage 2 communication")
	require.Greater(t, z[3].comm, float64(2*mb)*grad, "stage 3: a reduce-scatter and a forward gather per micro-batch, and backward gathers")
	for k := 1; k < 4; k++ {
		require.Less(t, z[k].peak, z[k-1].peak, "peak of stage %d below stage %d's", k, k-1)
	}
	for k, s := range z {
		t.Logf("dp=%d,tp=2,mb=%d,zero=%d: persistent %v, accumulated %v, peak %v; replicas' collectives %.1f MiB", d, mb, k,
			units.Bytes(s.persistent), units.Bytes(s.accumulated), s.peak, s.comm/(1<<20))
	}
}

// A plan that lists tensor-parallel rank 0 only (Config.SharedTP), or
// data-parallel replica 0 only (SharedDP), or both, simulates to the step
// its whole plan does, with every device's memory, for tensor, sequence,
// pipeline and data parallelism and ZeRO, within a machine and across two
// — with tp·dp times fewer firings but for the group collectives.
func TestSharedRanksMatchWholePlan(t *testing.T) {
	for _, c := range []struct{ cluster, strategy string }{
		{"dgx-a100", "tp=4,sp=on,mb=2,recompute=selective"},
		{"dgx-a100", "dp=2,tp=2,pp=2,mb=2"},
		{"dgx-a100x2", "tp=4,sp=on,pp=4,mb=8,recompute=full"},
		{"dgx-a100x2", "dp=2,tp=8,mb=2"},
		{"dgx-a100x2", "dp=4,tp=2,pp=2,mb=4,sched=gpipe"},
		{"dgx-a100x2", "dp=8,pp=2,mb=2,zero=1"},
		{"dgx-a100x2", "dp=8,pp=2,mb=2,zero=2"},
		{"dgx-a100x2", "dp=4,pp=2,mb=4,zero=3,recompute=full"},
		{"dgx-a100", "dp=4,pp=2,vpp=2,mb=2,zero=3"},
		{"dgx-a100", "dp=2,tp=2,pp=2,mb=2,zero=1,recompute=full"},
		{"dgx-a100x2", "dp=4,tp=4,sp=on,mb=2,zero=3"}, // ZeRO's groups across the machines
		{"dgx-a100x2", "dp=8,tp=2,mb=2,zero=2"},
		{"dgx-a100x2", "dp=4,pp=2,mb=4,zero=3,prefetch=1,recompute=full"}, // gathers ahead, on their own streams
		{"dgx-a100", "dp=2,tp=2,sp=on,pp=2,vpp=2,mb=2,zero=3,prefetch=2"},
	} {
		cl, err := topology.Resolve(c.cluster)
		require.NoError(t, err)
		m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(cl)}
		// The devices of a host slowing each other down: a listed device
		// stands for its peers of its host, busy when it is. Not to the
		// nanosecond: in the whole plan a group's collective keeps only
		// the member it is at home on busy, and its peers then run a hair
		// apart (up to 113 ns in 11.8 ms here); sweeps share plans only
		// where no contention is priced (SharesExactly).
		slowed := contendedModel{m, 0.3}
		run := func(tp, dp bool) (*plans.Plan, time.Duration, time.Duration) {
			p := compileOn(t, cl, "gpt:layers=4,hidden=256,heads=8,seq=64,vocab=1024", c.strategy, 16, graph.SGD{LR: 0.1}, tp, dp)
			return p, stepOf(t, p, m), stepOf(t, p, slowed)
		}
		whole, want, wantSlowed := run(false, false)
		require.Greater(t, wantSlowed, want, "contention slows %s", c.strategy)
		for _, shared := range [][2]bool{{true, false}, {false, true}, {true, true}} {
			p, got, gotSlowed := run(shared[0], shared[1])
			require.Equal(t, want, got, "%s on %s, shared tp, dp %v", c.strategy, c.cluster, shared)
			require.InEpsilon(t, float64(wantSlowed), float64(gotSlowed), 1e-4, "%s on %s with contention, shared tp, dp %v", c.strategy, c.cluster, shared)
			require.Equal(t, whole.Memory, p.Memory, "%s, shared %v", c.strategy, shared)
			k := 1
			if p.SharedTP {
				k *= p.TPDegree()
			}
			if p.SharedDP {
				k *= p.DP
			}
			if k > 1 {
				require.Less(t, len(p.Firings), 2*len(whole.Firings)/k, "%s, shared %v", c.strategy, shared)
			}
			require.Equal(t, len(whole.Firings), p.FiringsAs(false, false), "%s, shared %v", c.strategy, shared)
			require.Equal(t, len(p.Firings), p.FiringsAs(p.SharedTP, p.SharedDP))
			require.True(t, SharesExactly(m, p), "%s on %s, shared %v", c.strategy, c.cluster, shared)
			require.Equal(t, !p.SharedTP && !p.SharedDP, SharesExactly(slowed, p), "contention is shared only approximately")
		}
	}
}

// contendedModel is a cost model whose devices of one host slow each
// other down by k per other busy device.
type contendedModel struct {
	CostModel
	k float64
}

func (c contendedModel) Slowdown(*plans.Plan, int) float64 { return c.k }

// Shared plans simulate exactly only where no dispatch latency and no
// contention is priced on their devices, and where every transfer and
// collective is priced alike for each peer it stands for: not over a
// DGX-1's hybrid cube mesh, whose ranks 0, 1 and 2, 3 of a group reach
// the next stage over two NVLinks and one.
func TestSharesExactly(t *testing.T) {
	const model = "gpt:layers=4,hidden=256,heads=8,seq=64,vocab=1024"
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
	p := compileOn(t, c, model, "dp=2,tp=2,pp=2,mb=2", 16, graph.SGD{LR: 0.1}, true, true)
	require.True(t, SharesExactly(m, p), "the catalog's efficiencies on NVSwitch")
	key := p.Devices[0].Type
	calibrated := func(dc cost.DeviceCalibration) CostModel {
		return CostModel{Compute: cost.NewComputeModel(&cost.Calibration{Version: 1, Devices: map[string]*cost.DeviceCalibration{key: &dc}}), Comm: m.Comm}
	}
	require.True(t, SharesExactly(calibrated(cost.DeviceCalibration{}), p))
	require.False(t, SharesExactly(calibrated(cost.DeviceCalibration{Dispatch: time.Microsecond}), p))
	require.False(t, SharesExactly(calibrated(cost.DeviceCalibration{Contention: 0.1}), p))
	require.False(t, SharesExactly(calibrated(cost.DeviceCalibration{OpContention: map[string]float64{"matmul": 0.1}}), p))
	require.False(t, SharesExactly(contended{0.5}, p), "a Durations that models contention")
	require.True(t, SharesExactly(DurationFunc(func(*plans.Plan, int) (time.Duration, error) { return 0, nil }), p))
	whole := compileOn(t, c, model, "dp=2,tp=2,pp=2,mb=2", 16, graph.SGD{LR: 0.1}, false, false)
	require.True(t, SharesExactly(contended{0.5}, whole), "a whole plan is itself")

	v, err := topology.Resolve("dgx-v100")
	require.NoError(t, err)
	mv := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(v)}
	shared := compileOn(t, v, model, "tp=4,pp=2,mb=2", 16, graph.SGD{LR: 0.1}, true, false)
	require.False(t, SharesExactly(mv, shared))
	whole = compileOn(t, v, model, "tp=4,pp=2,mb=2", 16, graph.SGD{LR: 0.1}, false, false)
	require.NotEqual(t, stepOf(t, whole, mv), stepOf(t, shared, mv), "which is why")
}

// compileBF16 compiles model under strategy, in bf16, on the first devices
// of cluster c.
func compileBF16(t *testing.T, c *topology.Cluster, model, strategy string, batch int, opt graph.Optimizer, sharedTP bool) *plans.Plan {
	t.Helper()
	return compileOn(t, c, model, strategy, batch, opt, sharedTP, false)
}

// compileOn is compileBF16 with the choice of listing one replica for all.
func compileOn(t *testing.T, c *topology.Cluster, model, strategy string, batch int, opt graph.Optimizer, sharedTP, sharedDP bool) *plans.Plan {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, st.Devices(), false)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Optimizer: opt, Cluster: c.Name, Devices: devs, DType: graph.BF16, SharedTP: sharedTP, SharedDP: sharedDP})
	require.NoError(t, err, strategy)
	return p
}

// stepOf simulates three iterations of p priced by d, checks the trace
// against the plan and returns the step time after the first.
func stepOf(t *testing.T, p *plans.Plan, d Durations) time.Duration {
	t.Helper()
	tr, err := Simulate(p, d, 3)
	require.NoError(t, err)
	require.NoError(t, p.CheckTrace(tr))
	step, err := tr.StepTime(1)
	require.NoError(t, err)
	return step
}

// Every combination of the strategy options that parses and compiles —
// data, tensor, sequence and pipeline parallelism, interleaving, ZeRO,
// micro-batches (uneven too), both schedules and recompute — simulates without a
// deadlock, and its trace obeys the plan's edges and memory plan.
func TestStrategyCombinations(t *testing.T) {
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
	n := 0
	for _, dp := range []string{"", "dp=2,"} {
		for _, tp := range []string{"", "tp=2,", "tp=2,sp=on,"} {
			for _, pp := range []string{"", "pp=2,", "pp=2,vpp=2,"} {
				for _, zero := range []string{"", "zero=1,", "zero=2,", "zero=3,"} {
					for _, mb := range []string{"mb=2", "mb=4,sched=gpipe", "mb=3:1"} { // 3:1: dp=2 only
						for _, re := range []string{"", ",recompute=selective", ",recompute=full"} {
							s := dp + tp + pp + zero + mb + re
							st, err := plans.ParseStrategy(s, 8)
							if err != nil {
								continue // e.g. zero without dp, or vpp with gpipe
							}
							devs, err := plans.DevicesFromCluster(c, st.Devices(), false)
							require.NoError(t, err)
							p, err := plans.Compile(plans.Config{Model: "gpt:layers=4,hidden=32,heads=4,seq=8,vocab=64", Batch: 8, Strategy: st,
								Optimizer: graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Cluster: c.Name, Devices: devs, DType: graph.BF16})
							require.NoError(t, err, s)
							tr, err := Simulate(p, m, 3)
							require.NoError(t, err, s)
							require.NoError(t, p.CheckTrace(tr), s)
							n++
						}
					}
				}
			}
		}
	}
	t.Logf("%d strategies compiled and simulated", n)
	require.Greater(t, n, 100)
}

// groupOf is the cluster's devices of a collective task's members.
func groupOf(t *testing.T, c *topology.Cluster, p *plans.Plan, task *plans.Task) []topology.DeviceID {
	t.Helper()
	var group []topology.DeviceID
	for _, s := range task.Streams {
		id, ok := c.DeviceByName(p.Devices[p.Streams[s].Device].Name)
		require.True(t, ok)
		group = append(group, id)
	}
	return group
}
