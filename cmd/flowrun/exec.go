package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
)

type execFlags struct {
	iters, warmup, runs, top int
	calib, device, cluster   string
	compare, json, eager     bool
	breakdown, memory        bool
	gemm                     string
	tracePath, pprofDir      string
	procs                    procFlags
}

func newExecCmd() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec PLAN",
		Short: "Execute a plan file on this machine's CPUs and GPUs; with --compare, against the simulator",
		Long: `Execute a compiled plan (written by 'flowsim plan') unchanged: every CPU plan
device becomes a CPU device of this process with the plan's worker count,
every GPU plan device a CUDA device (the first GPU of the plan on cuda:0, and
so on), every stream a goroutine firing its tasks in the plan's order as their
dependency edges allow — on a GPU, enqueueing them on a CUDA stream with
events for the edges between streams. A plan whose devices are all GPUs is
captured once as a CUDA graph and replayed every iteration (--eager: enqueue
every iteration instead). Inputs are synthetic (random samples of the plan's
shapes; on a GPU gathered from a pool resident in its memory; for a language
model, random token ids, each position labeled with the next).

With --procs N the plan runs in N processes of this host (this one and N−1
'flowrun worker' processes it starts), each running the streams of its
devices (--ranks; by default devices are split in contiguous blocks), as
under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(this process is then rank 0; see 'flowrun worker --help'). The processes
tell each other over gRPC streams when a firing another one waits for has
finished, send transfers' data, and exchange all-reduce parts; each rank's
trace is merged into one on rank 0's clock, which --compare checks against
the plan's rules and compares with the simulator.

The measured step time is the median over --runs runs of the mean step time
after --warmup iterations. With --compare the plan is also simulated with the
cost model (calibrated by --calib, else the device catalog's defaults), and
predicted and measured step times and per-task times are compared (and, where
the calibration holds a CPU's probe, the speed of its reference kernels,
probed before the runs and after each, against the calibrated one: a machine
slower than when calibrated makes the prediction run low for its own sake);
then (--breakdown, on by default) where the step goes on each device,
predicted / measured: its time computing, communicating with no compute
running on the device (exposed), and idle, which add up to the step; and the
critical path of the same iterations in each trace (from the last task back
through whatever released each task): its time computing, communicating and waiting,
and the streams, ops and tasks it runs on most. Last (--memory, by default as
--breakdown with --compare) what fills each device's memory: the planned
arena beside the most bytes the measured run (and the simulation) held live
at once, by category, and the largest registers then. See 'flowsim simulate
--help'.`,
		Example: `  flowsim plan --model mnist-cnn --cluster local --strategy dp=2 --batch 64 -o plan.json
  flowrun calibrate -o calib.json
  flowrun exec plan.json --compare --calib calib.json
  flowrun exec plan.json --compare --calib calib.json --procs 2
  flowsim plan --model gpt2s-blocks --dtype bf16 --batch 8 --cluster h200-host -o gpt.json
  flowrun exec gpt.json --device cuda`,
		Args: cliargs.One("a plan file (from 'flowsim plan' or 'flowsim sweep -o')"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("memory") {
				f.memory = f.breakdown && f.compare
			}
			return runExec(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.iters, "iters", 20, "iterations per run")
	fl.IntVar(&f.warmup, "warmup", 3, "iterations left out of the step time")
	fl.IntVar(&f.runs, "runs", 1, "runs; the measured step time is their median")
	fl.StringVar(&f.calib, "calib", "", "calibration file for the simulator (from 'flowrun calibrate')")
	fl.StringVar(&f.cluster, "cluster", "", "with --compare: the cluster the plan was compiled for (preset or YAML file), whose routes price communication between GPUs and between hosts; default: the plan's cluster, if it is a preset")
	fl.BoolVar(&f.compare, "compare", false, "also simulate the plan and compare predicted with measured")
	fl.BoolVar(&f.breakdown, "breakdown", true, "with --compare: print where the step goes per device and the critical path, predicted and measured (in JSON: breakdown and critical_path)")
	fl.BoolVar(&f.memory, "memory", false, "print what fills each device's memory at its live peak in the measured run (and with --compare the predicted one; default: as --breakdown with --compare; in JSON: memory)")
	fl.IntVar(&f.top, "top", 15, "tasks shown in the comparison table (worst first; 0: all)")
	fl.StringVar(&f.tracePath, "trace", "", "write the measured trace as Chrome JSON here (and the predicted one beside it, .sim.json), with each device's live memory as a counter track")
	fl.StringVar(&f.pprofDir, "pprof", "", "write measured.pb.gz (and, with --compare, predicted.pb.gz) to this folder: go tool pprof -diff_base predicted.pb.gz measured.pb.gz")
	fl.BoolVar(&f.json, "json", false, "print the result as one JSON object on stdout")
	fl.StringVar(&f.device, "device", "", "check where the plan runs: cpu (no GPU devices) or cuda (at least one); empty: wherever the plan says")
	fl.BoolVar(&f.eager, "eager", false, "GPU plans: enqueue every firing every iteration instead of replaying a captured CUDA graph")
	f.procs.register(fl, 1)
	fl.StringVar(&f.gemm, "gemm", "tuned", "GPU plans: how dense layers and matrix products run: tuned (each shape's fastest of cuBLASLt's candidate algorithms with the epilogue fused and cuBLAS with a kernel, timed on its first run), fused (cuBLASLt's first algorithm) or unfused (cuBLAS and kernels)")
	return cmd
}

// checkDevice checks a plan against --device.
func checkDevice(p *plans.Plan, device string) error {
	gpus := gpuCount(p)
	switch device {
	case "":
	case "cpu":
		if gpus > 0 {
			return fmt.Errorf("--device cpu: the plan places work on %d GPU(s)", gpus)
		}
	case "cuda", "gpu":
		if gpus == 0 {
			return fmt.Errorf("--device %s: the plan has no GPU device (compile it with a GPU cluster, e.g. flowsim plan --cluster h200-host)", device)
		}
	default:
		return fmt.Errorf("--device %q: want cpu or cuda", device)
	}
	return nil
}

// gpuCount is the number of p's GPU devices.
func gpuCount(p *plans.Plan) int {
	gpus := 0
	for _, d := range p.Devices {
		if spec, ok := topology.Lookup(d.Type); ok && spec.Class == topology.GPU {
			gpus++
		}
	}
	return gpus
}

// hasGPU says whether p places work on a GPU.
func hasGPU(p *plans.Plan) bool { return gpuCount(p) > 0 }

func runExec(cmd *cobra.Command, path string, f execFlags) error {
	if err := cliargs.Output("--trace", f.tracePath); err != nil { // before the runs
		return err
	}
	if err := cliargs.OutputDir("--pprof", f.pprofDir); err != nil { // made after the runs
		return err
	}
	switch {
	case f.iters < 1:
		return fmt.Errorf("--iters must be ≥ 1, got %d", f.iters)
	case f.warmup < 0 || f.warmup >= f.iters:
		return fmt.Errorf("--warmup must be in [0, --iters), got %d", f.warmup)
	case f.runs < 1:
		return fmt.Errorf("--runs must be ≥ 1, got %d", f.runs)
	case f.top < 0:
		return fmt.Errorf("--top must be ≥ 0 (0: all), got %d", f.top)
	case !f.compare && f.calib != "":
		return fmt.Errorf("--calib %s prices the simulator's prediction, which only --compare makes: give --compare", f.calib)
	case !f.compare && f.cluster != "":
		return fmt.Errorf("--cluster %s prices the simulator's prediction, which only --compare makes: give --compare", f.cluster)
	case f.procs.check() != nil:
		return f.procs.check()
	}
	p, err := plans.ReadFile(path)
	if err != nil {
		return err
	}
	if err := checkDevice(p, f.device); err != nil {
		return err
	}
	if !hasGPU(p) && (f.eager || cmd.Flags().Changed("gemm")) {
		return fmt.Errorf("--eager and --gemm are for plans with GPU devices; %s has none", path)
	}
	var (
		model  *cost.ComputeModel
		comm   *cost.Comm
		speeds []*runtime.SpeedCheck
	)
	if f.compare { // before the runs, which a bad --calib or --cluster would waste
		var calib *cost.Calibration
		if model, calib, err = loadModel(f.calib, path, p); err != nil {
			return err
		}
		if speeds, err = runtime.SpeedChecks(calib, p.Devices); err != nil {
			return err
		}
		unprobed, err := runtime.Unprobed(calib, p.Devices)
		if err != nil {
			return err
		}
		if len(unprobed) > 0 {
			fmt.Fprintf(os.Stderr, "flowrun: note: --calib %s calibrates %s without a probe of the machine's speed (a file of before probes were taken): whether this machine runs as fast as the one calibrated is not checked; `flowrun calibrate` here to check it\n", f.calib, strings.Join(unprobed, ", "))
		}
		if comm, err = planComm(p, f.cluster); err != nil {
			return err
		}
	}
	policy, err := runtime.ParseGEMMPolicy(f.gemm)
	if err != nil {
		return fmt.Errorf("--gemm: %w", err)
	}
	// Runs continue from one another (the weights keep training); each is
	// timed on its own.
	const classes, pool = 10, 1024
	var (
		runner *runtime.PlanRunner // this process's devices
		run    func(context.Context, int, runtime.Feeder) (*runtime.RunResult, error)
	)
	if f.procs.multi() {
		pr, err := newProcRunner(cmd.Context(), p, f.procs, time.Minute, feedSpec{Classes: classes, Pool: pool})
		if err != nil {
			return err
		}
		defer pr.Close()
		runner, run = pr.PlanRunner, pr.Run
		if f.compare && f.cluster == "" {
			if note := sharedHostNote(p, pr.ranks); note != "" {
				fmt.Fprintln(os.Stderr, note)
			}
		}
	} else {
		if runner, err = runtime.NewPlanRunner(p); err != nil {
			return err
		}
		defer runner.Close()
		run = runner.Run
		if note := oversubscribedNote(p, goruntime.NumCPU()); note != "" {
			fmt.Fprintln(os.Stderr, note)
		}
	}
	runner.Eager = f.eager
	runner.GEMM = policy
	feed := runtime.NewSyntheticFeeder(p.Images, classes, pool, p.Seed)
	// Each trace is validated once, when it is checked against the plan;
	// what follows (comparing it, breaking its step down, writing it out)
	// takes it checked and does not validate it again.
	type timedRun struct {
		res   *runtime.RunResult
		trace trace.Checked // of a run with events
		step  time.Duration
	}
	var runs []timedRun
	for _, s := range speeds {
		s.Probe()
	}
	var interrupted error // the runs stopped by an interrupt, reported as far as they got
	for i := range f.runs {
		res, err := run(cmd.Context(), f.iters, feed)
		if err != nil && cmd.Context().Err() != nil {
			if len(runs) == 0 {
				return fmt.Errorf("interrupted before the first of %d runs finished: nothing measured", f.runs)
			}
			interrupted = fmt.Errorf("interrupted after %d of %d runs: their median reported, without what needs another run", len(runs), f.runs)
			break
		}
		if err != nil {
			return err
		}
		var checked trace.Checked
		if len(res.Trace.Events) > 0 {
			if checked, err = p.CheckedTrace(res.Trace); err != nil {
				return fmt.Errorf("run %d broke the plan's rules: %w", i, err)
			}
		}
		step, err := res.StepTime(f.warmup)
		if err != nil {
			return err
		}
		runs = append(runs, timedRun{res, checked, step})
		for _, s := range speeds {
			s.Probe()
		}
		if !f.json {
			fmt.Fprintf(os.Stderr, "run %d: step %.3f ms\n", i+1, ms(step))
		}
	}
	for _, s := range speeds {
		s.Finish()
	}
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(runs[a].step - runs[b].step) })
	med := runs[order[len(order)/2]]

	out := map[string]any{
		"plan": path, "model": p.Model, "strategy": p.Strategy, "batch": p.Batch,
		"devices": len(p.Devices), "iters": f.iters, "warmup": f.warmup, "runs": len(runs),
		"measured_step_s": med.step.Seconds(), "samples_per_s": float64(p.Batch) / med.step.Seconds(),
	}
	stepsS := make([]float64, len(runs))
	for i, r := range runs {
		stepsS[i] = r.step.Seconds()
	}
	out["measured_steps_s"] = stepsS
	out["loss"] = med.res.Loss
	if notes := runner.Notes(); len(notes) > 0 {
		out["notes"] = notes
		for _, n := range notes {
			fmt.Fprintln(os.Stderr, "flowrun: note:", n)
		}
	}
	if tunings := runner.Tunings(); len(tunings) > 0 {
		out["gemm"] = f.gemm
		out["tunings"] = tunings
		for _, t := range tunings {
			fmt.Fprintln(os.Stderr, "flowrun: tuned:", t)
		}
	}
	if interrupted != nil {
		out["interrupted"] = true
		if f.json {
			return errors.Join(printJSON(out), interrupted)
		}
		fmt.Printf("%s %s batch %d on %d device(s): step %.3f ms (median of %d), %.0f samples/s\n",
			p.Model, p.Strategy, p.Batch, len(p.Devices), ms(med.step), len(runs), float64(p.Batch)/med.step.Seconds())
		return interrupted
	}
	measured := med.trace
	if len(med.res.Trace.Events) == 0 && (f.compare || f.tracePath != "" || f.pprofDir != "" || f.memory) {
		// A graph replay timed whole iterations: one more run, with events
		// around every task, gives the per-task times (its step, longer by
		// the events' cost, is reported but not compared).
		runner.TaskTimes = true
		res, err := runner.Run(cmd.Context(), f.iters, feed)
		if err != nil {
			return err
		}
		if measured, err = p.CheckedTrace(res.Trace); err != nil {
			return fmt.Errorf("the timed run broke the plan's rules: %w", err)
		}
		step, err := res.StepTime(f.warmup)
		if err != nil {
			return err
		}
		out["timed_tasks_step_s"] = step.Seconds()
	}
	if f.tracePath != "" {
		if err := writeChrome(f.tracePath, p, measured); err != nil {
			return err
		}
	}
	if err := writeProfile(f.pprofDir, "measured.pb.gz", measured, f.warmup); err != nil {
		return err
	}
	var measLive *plans.LiveMemory
	if f.memory {
		if measLive, err = p.LiveMemoryChecked(measured, liveTop); err != nil {
			return err
		}
		out["memory"] = map[string]any{"measured": measLive}
	}
	if !f.compare {
		if f.json {
			return printJSON(out)
		}
		fmt.Printf("%s %s batch %d on %d device(s): step %.3f ms (median of %d), %.0f samples/s\n",
			p.Model, p.Strategy, p.Batch, len(p.Devices), ms(med.step), f.runs, float64(p.Batch)/med.step.Seconds())
		if measLive == nil {
			return nil
		}
		fmt.Println()
		return measLive.Write(os.Stdout, "this run")
	}
	simulated, err := sim.Simulate(p, sim.CostModel{Compute: model, Comm: comm}, f.iters)
	if err != nil {
		return err
	}
	pred, err := trace.Check(simulated)
	if err != nil {
		return fmt.Errorf("predicted: %w", err)
	}
	cmp, err := trace.CompareChecked(pred, measured, f.warmup)
	if err != nil {
		return err
	}
	if f.tracePath != "" {
		if err := writeChrome(strings.TrimSuffix(f.tracePath, filepath.Ext(f.tracePath))+".sim.json", p, pred); err != nil {
			return err
		}
	}
	if err := writeProfile(f.pprofDir, "predicted.pb.gz", pred, f.warmup); err != nil {
		return err
	}
	var predReport, measReport *trace.StepReport
	if f.breakdown {
		if predReport, measReport, err = stepReports(p, pred, measured, f.warmup); err != nil {
			return err
		}
	}
	var predLive *plans.LiveMemory
	if f.memory {
		if predLive, err = p.LiveMemoryChecked(pred, liveTop); err != nil {
			return fmt.Errorf("predicted: %w", err)
		}
		out["memory"] = map[string]any{"measured": measLive, "predicted": predLive}
	}
	relErr := (cmp.PredStep.Seconds() - med.step.Seconds()) / med.step.Seconds()
	if f.json {
		out["predicted_step_s"] = cmp.PredStep.Seconds()
		out["rel_error"] = relErr
		if len(speeds) > 0 {
			out["speed"] = speeds
		}
		out["tasks"] = cmp.Tasks
		if f.breakdown {
			out["breakdown"] = map[string]any{"predicted": predReport.Breakdown, "measured": measReport.Breakdown}
			out["critical_path"] = map[string]any{"predicted": predReport.Path, "measured": measReport.Path}
		}
		return printJSON(out)
	}
	fmt.Printf("%s %s batch %d on %d device(s)\n", p.Model, p.Strategy, p.Batch, len(p.Devices))
	fmt.Printf("predicted step %.3f ms, measured %.3f ms (median of %d runs): error %+.1f%%\n\n",
		ms(cmp.PredStep), ms(med.step), f.runs, 100*relErr)
	for _, s := range speeds {
		fmt.Printf("speed: %s\n", s)
	}
	if len(speeds) > 0 {
		fmt.Println()
	}
	if err := cmp.WriteTable(os.Stdout, f.top); err != nil {
		return err
	}
	if f.breakdown {
		fmt.Println()
		if err := trace.WriteStepReports(os.Stdout, predReport, measReport, 3); err != nil {
			return err
		}
	}
	if !f.memory {
		return nil
	}
	fmt.Println()
	if err := predLive.Write(os.Stdout, "the simulation"); err != nil {
		return err
	}
	fmt.Println()
	return measLive.Write(os.Stdout, "this run")
}

// liveTop is the registers exec lists at a device's live peak.
const liveTop = 3

// stepReports returns where the step goes in a predicted and a measured
// trace of p.
func stepReports(p *plans.Plan, pred, meas trace.Checked, warmup int) (*trace.StepReport, *trace.StepReport, error) {
	deps, err := p.TraceDeps()
	if err != nil {
		return nil, nil, err
	}
	pr, err := pred.StepReport(deps, warmup)
	if err != nil {
		return nil, nil, fmt.Errorf("predicted: %w", err)
	}
	mr, err := meas.StepReport(deps, warmup)
	if err != nil {
		return nil, nil, fmt.Errorf("measured: %w", err)
	}
	return pr, mr, nil
}

// planComm returns the communication model of the cluster p was compiled
// for: the named one, else the plan's if it is a preset. Without one, a
// plan whose devices span hosts is priced as if they shared one, and says
// so.
func planComm(p *plans.Plan, cluster string) (*cost.Comm, error) {
	name := cmp.Or(cluster, p.Cluster)
	c, err := topology.Resolve(name)
	switch {
	case err == nil && cluster != "":
		comm := cost.NewComm(c)
		if err := (sim.CostModel{Comm: comm}).CheckCluster(p); err != nil {
			return nil, fmt.Errorf("--cluster %s: %w", cluster, err)
		}
		return comm, nil
	case err == nil:
		return cost.NewComm(c), nil
	case cluster != "":
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	for _, d := range p.Devices[1:] {
		if d.Host != p.Devices[0].Host {
			fmt.Fprintf(os.Stderr, "flowrun: note: the plan's cluster %q is not a preset: communication between its hosts is priced as copies within one (give --cluster)\n", p.Cluster)
			break
		}
	}
	return nil, nil
}

// oversubscribedNote says, if p's CPU devices take more cores than this
// machine's cores, that they will contend: each device's worker
// goroutines are its cores in the plan and in the cost model.
func oversubscribedNote(p *plans.Plan, cores int) string {
	byHost, devices := p.CPUCores()
	workers := 0
	for _, n := range byHost {
		workers += n
	}
	if workers <= cores {
		return ""
	}
	return fmt.Sprintf("flowrun: note: the plan's %d CPU devices take %d cores, this machine has %d: they share them, and each runs slower than the plan (and --compare's prediction) takes it to", devices, workers, cores)
}

// sharedHostNote says, for a multi-process run compared with its
// prediction, where devices of two ranks share a host in the plan's
// cluster: the simulator prices what passes between them as copies within
// a process, which in the run cross processes over gRPC (the prediction
// is then short by the transport's time). Empty where no host is shared.
func sharedHostNote(p *plans.Plan, ranks []int) string {
	first := map[string]int{} // host → its first device
	for d, dev := range p.Devices {
		o, ok := first[dev.Host]
		if !ok {
			first[dev.Host] = d
			continue
		}
		if ranks[o] == ranks[d] {
			continue
		}
		return fmt.Sprintf("flowrun: note: devices %s (rank %d) and %s (rank %d) share host %s in the plan's cluster %q, "+
			"so the prediction prices what passes between them as copies within one process; here it crosses processes over gRPC. "+
			"To predict that, time the transport and compile the plan for it: 'flowrun calibrate link --procs %d -o procs.yaml', "+
			"'flowsim plan --cluster procs.yaml …', then --cluster procs.yaml here",
			p.Devices[o].Name, ranks[o], dev.Name, ranks[d], dev.Host, p.Cluster, slices.Max(ranks)+1)
	}
	return ""
}

// loadModel returns the compute model of a calibration file and the
// calibration, or the catalog defaults' model (and no calibration) when
// path is empty; the calibration must hold some of p's devices, the plan
// read from planPath.
func loadModel(path, planPath string, p *plans.Plan) (*cost.ComputeModel, *cost.Calibration, error) {
	if path == "" {
		fmt.Fprintln(os.Stderr, "flowrun: no --calib: predicting from the device catalog's default efficiencies (run 'flowrun calibrate' for real figures)")
		return cost.NewComputeModel(nil), nil, nil
	}
	c, err := cost.LoadCalibration(path)
	if err != nil {
		return nil, nil, err
	}
	lacking, err := sim.CheckCalibration(p, c)
	if err != nil {
		return nil, nil, fmt.Errorf("--calib %s: %w", path, err)
	}
	if len(lacking) > 0 {
		fmt.Fprintf(os.Stderr, "flowrun: note: --calib %s holds no calibration of %s: predicted from the catalog's efficiencies\n", path, strings.Join(lacking, ", "))
	}
	ops, err := sim.UncalibratedOps(p, c)
	if err != nil {
		return nil, nil, err
	}
	if len(ops) > 0 {
		fmt.Fprintf(os.Stderr, "flowrun: note: --calib %s has no fit of some of the plan's kernels (%s), which are predicted from the catalog's efficiencies; %s\n",
			path, strings.Join(ops, "; "), calibrateAdvice(ops, planPath, p))
	}
	return cost.NewComputeModel(c), c, nil
}

// calibrateAdvice says how to calibrate the kernels ops (sim.UncalibratedOps's
// lines, "KEY: kinds") of p, read from planPath: a CPU's with the plan's
// model among the models 'flowrun calibrate' runs, at the plan's
// micro-batch where a kind was measured at other shapes only; a GPU's by
// timing the plan's own tasks.
func calibrateAdvice(ops []string, planPath string, p *plans.Plan) string {
	var cpu, gpu, otherShapes bool
	for _, line := range ops {
		typ, _, _ := strings.Cut(line, ":")
		typ, _, _ = strings.Cut(typ, "/")
		if spec, err := topology.Spec(typ, 1); err == nil && spec.Class != topology.CPU {
			gpu = true
			continue
		}
		cpu = true
		otherShapes = otherShapes || strings.Contains(line, "(other shapes only)")
	}
	var advice []string
	if cpu {
		models := zoo.SplitNames(defaultCalibModels)
		if !slices.Contains(models, p.Model) {
			models = append(models, p.Model)
		}
		a := fmt.Sprintf("calibrate the CPU with the plan's model among others ('flowrun calibrate --models %s')", strings.Join(models, ","))
		if otherShapes {
			a += fmt.Sprintf(", for the kinds measured at other shapes only at the plan's micro-batch (%d) among others (--batches)", p.MicroBatch)
		}
		advice = append(advice, a)
	}
	if gpu {
		advice = append(advice, fmt.Sprintf("calibrate the GPU on the plan's own tasks ('flowrun calibrate --device cuda --plans %s')", planPath))
	}
	return strings.Join(advice, "; ")
}

// writeChrome writes tr, a trace of p, to path as Chrome JSON, with live
// memory tracks (plans.Plan.WriteChromeChecked).
func writeChrome(path string, p *plans.Plan, tr trace.Checked) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := p.WriteChromeChecked(f, tr); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeProfile writes a trace as a pprof profile into dir (nothing if dir
// is empty).
func writeProfile(dir, name string, tr trace.Checked, warmup int) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := tr.WritePprof(f, warmup); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
