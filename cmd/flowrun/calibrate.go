package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// defaultCalibModels are the models calibrate measures by default.
const defaultCalibModels = "mnist-cnn,mlp"

type calibFlags struct {
	device, out string
	plans       []string
	workers     []int
	models      []string
	batches     []int
	iters       int
	rounds      int
	json        bool
}

func newCalibrateCmd() *cobra.Command {
	f := calibFlags{device: "cpu"}
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure this machine's kernels and fit the cost model",
		Long: `Measure every task the plans of the given models run, at each micro-batch
size and worker count — the kernels, and the in-process transfers, gradient
accumulations and all-reduces between CPU devices — by running single,
dp=2 (at the first batch also with bucket=25MiB, for a gradient bucket's
pack and unpack copies) and pp=2 plans on this machine and taking each task's mean time in
place (with the cache state and neighbours it has in a real run). Kernels are
priced from one-device plans (running alone); the data-parallel plans give how
much kernels slow down while another device of the host is busy (shared
caches and memory bandwidth), which the simulator applies, and how long a
task released by another stream (a goroutine, which the releasing one must
wake while it goes on) waits to start: the dispatch latency, taken from the
waits in the traces of those plans (per run, the latency under which the
simulator's waits add up to the measured ones; the median over runs) and
applied by the simulator on the same edges. Models with a
tensor-parallel layout also run tp=2 plans (and tp=2,sp=on for the GPTs, LLaMAs and BERTs):
their sums, all-gathers and reduce-scatters, and their kernels on split
weights (priced at their tp=2 time less that slowdown). Then
fit the cost model per op kind: launch overhead + max(FLOPs / (peak·eff_c),
bytes / (bandwidth·eff_m)) with efficiencies that saturate with the size of
the work (for an all-reduce, the bytes its reduction moves in memory: over
n members of b bytes, (5n−3)·b in place, 2n·b more for a tensor-parallel
sum, which works out of place). Every fit is tested on a quarter of the shapes held out of it, and
its error is printed. Every measured shape is also kept: an exact measured
shape wins over the fit. The calibration is keyed by device type and core
count ("cpu/2"), and loads on any machine.`,
		Example: `  flowrun calibrate -o calib.json
  flowrun calibrate --device cuda:0 --plans 'plans/*.json' -o calib-cuda.json
  flowrun calibrate --workers 1,2 --models mnist-cnn --batches 8,16,32,64,128 -o calib.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCalibrate(cmd, f) },
	}
	cmd.AddCommand(newCalibrateLinkCmd())
	fl := cmd.Flags()
	fl.StringVar(&f.device, "device", "cpu", "device to calibrate: cpu, or cuda[:N] (measures the tasks of the --plans files where they run)")
	fl.StringSliceVar(&f.plans, "plans", nil, "with --device cuda: plan files (globs allowed) whose tasks are measured, on every device they use")
	fl.IntSliceVar(&f.workers, "workers", nil, "worker counts (cores per device) to calibrate (default: 1 and all cores)")
	fl.StringArrayVar(&f.models, "models", []string{defaultCalibModels}, "zoo models whose tasks are measured, comma-separated, with their size options (mlp,gpt2s-blocks:layers=2,seq=64)")
	fl.IntSliceVar(&f.batches, "batches", []int{4, 8, 16, 32, 64, 128, 256}, "micro-batch sizes measured")
	fl.IntVar(&f.iters, "iters", 8, "iterations each calibration plan runs (the first two untimed; the mean is kept)")
	fl.IntVar(&f.rounds, "rounds", 5, "times every calibration plan runs, in rounds (the median of the rounds is kept)")
	fl.StringVarP(&f.out, "output", "o", "calib.json", "calibration file to write")
	fl.BoolVar(&f.json, "json", false, "print the fit reports as JSON")
	return cmd
}

func runCalibrate(cmd *cobra.Command, f calibFlags) error {
	if err := cliargs.Output("-o", f.out); err != nil { // before minutes of measuring
		return err
	}
	if f.device == "cuda" || strings.HasPrefix(f.device, "cuda:") {
		return runCalibrateCUDA(cmd, f)
	}
	if f.device != "cpu" {
		return fmt.Errorf("--device %q: want cpu or cuda[:N]", f.device)
	}
	if len(f.plans) > 0 {
		return errors.New("--plans is for --device cuda; CPU calibration compiles its own plans (--models, --batches)")
	}
	if len(f.workers) == 0 {
		f.workers = []int{1}
		if n := goruntime.NumCPU(); n > 1 {
			f.workers = append(f.workers, n)
		}
	}
	for _, w := range f.workers {
		if w < 1 {
			return fmt.Errorf("--workers: %d is not a positive count", w)
		}
		// More workers than cores would time the goroutines' contention
		// and fit it to a device (cpu/W) this machine does not have.
		if n := goruntime.NumCPU(); w > n {
			return fmt.Errorf("--workers: %d workers, this machine has %d cores: a calibration times a device of W cores on W of them", w, n)
		}
	}
	var models []string
	for _, list := range f.models {
		models = append(models, zoo.SplitNames(list)...)
	}
	f.models = models
	for i, m := range f.models {
		m, err := zoo.Resolve(m) // a config.json: measured as the zoo model it maps to
		if err != nil {
			return fmt.Errorf("--models: %w", err)
		}
		f.models[i] = m
		if err := zoo.Check(m); err != nil {
			return fmt.Errorf("--models: %w", err)
		}
	}
	for _, b := range f.batches {
		if b < 1 {
			return fmt.Errorf("--batches: %d is not a positive batch", b)
		}
	}
	if f.iters < 3 {
		return fmt.Errorf("--iters must be ≥ 3, got %d", f.iters)
	}
	if f.rounds < 1 {
		return fmt.Errorf("--rounds must be ≥ 1, got %d", f.rounds)
	}
	calib := cost.NewCalibration()
	bench := runtime.Microbench{Iters: f.iters}
	var reports []calibReport
	contention := map[string]float64{}
	dispatch := map[string]time.Duration{}
	for _, w := range f.workers {
		spec, err := topology.Spec("cpu", w)
		if err != nil {
			return err
		}
		start := time.Now()
		m, err := measure(cmd, bench, f, w)
		if err != nil {
			return err
		}
		probe := cost.Over(m.probes)
		dc, reps, err := fitKinds(spec, append(m.alone, m.comm...))
		if err != nil {
			return err
		}
		dc.Contention = m.contention
		if len(m.opContention) > 0 {
			dc.OpContention = m.opContention
		}
		dc.Dispatch = m.dispatch()
		dc.Probe = &probe
		host, _ := os.Hostname()
		dc.Note = fmt.Sprintf("flowrun calibrate on %s, %d worker(s), %s, %d samples in %.0fs; contention from %d kernels",
			host, w, time.Now().UTC().Format("2006-01-02"), len(m.alone)+len(m.comm), time.Since(start).Seconds(), len(m.slowdowns))
		contention[cost.CalibrationKey(spec)] = dc.Contention
		dispatch[cost.CalibrationKey(spec)] = dc.Dispatch
		calib.Devices[cost.CalibrationKey(spec)] = dc
		for _, r := range reps {
			reports = append(reports, calibReport{Key: cost.CalibrationKey(spec), FitReport: r})
		}
	}
	if err := calib.WriteFile(f.out); err != nil {
		return err
	}
	if f.json {
		opContention := map[string]map[string]float64{}
		probes := map[string]*cost.Probe{}
		for k, dc := range calib.Devices {
			opContention[k] = dc.OpContention
			probes[k] = dc.Probe
		}
		return printJSON(map[string]any{"output": f.out, "fits": reports, "held_out_median_rel_err": heldOutMedian(reports),
			"contention": contention, "op_contention": opContention, "dispatch_ns": dispatch, "probe": probes})
	}
	for _, k := range slices.Sorted(maps.Keys(contention)) {
		fmt.Printf("%s: kernels run %.1f%% slower per other busy device of the host (median)", k, 100*contention[k])
		if ops := calib.Devices[k].OpContention; len(ops) > 0 {
			fmt.Print("; by op:")
			for _, kind := range slices.Sorted(maps.Keys(ops)) {
				fmt.Printf(" %s %.0f%%", kind, 100*ops[kind])
			}
		}
		fmt.Println()
		if d := dispatch[k]; d > 0 {
			fmt.Printf("%s: a task released by another stream starts %v later\n", k, d)
		}
		p := calib.Devices[k].Probe
		fmt.Printf("%s: reference kernels (which exec --compare times again) GEMM %.3f ms, stream %.3f ms: medians of the probes taken while measuring, spread %.0f%%\n",
			k, ms(p.GEMM), ms(p.Stream), 100*p.Spread)
	}
	return printFits(reports, f.out)
}

// printFits prints the fit reports as a table.
func printFits(reports []calibReport, out string) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "device\top\tshapes\theld out\tmedian err\tmax err\t")
	for _, r := range reports {
		if r.HeldOut == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t-\t(exact only)\t\t\n", r.Key, r.Kind, r.Shapes)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f%%\t%.1f%%\t\n", r.Key, r.Kind, r.Shapes, r.HeldOut, 100*r.MedianRelErr, 100*r.MaxRelErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("held-out shapes, all ops: median error %.1f%%\nwrote %s\n", 100*heldOutMedian(reports), out)
	return nil
}

type calibReport struct {
	Key string `json:"device"`
	cost.FitReport
}

// heldOutMedian is the median of the per-op median errors, weighted by
// held-out shapes.
func heldOutMedian(reps []calibReport) float64 {
	var errs []float64
	for _, r := range reps {
		for range r.HeldOut {
			errs = append(errs, r.MedianRelErr)
		}
	}
	if len(errs) == 0 {
		return 0
	}
	sort.Float64s(errs)
	return errs[len(errs)/2]
}

// measured is what the calibration plans measured on devices of one
// worker count.
type measured struct {
	alone []cost.Sample // kernels of one-device plans: nothing else running
	comm  []cost.Sample // transfers and all-reduces of two-device plans
	// slowdowns are, for kernels of data-parallel plans (two devices
	// running the same kernels at once), time / time alone − 1.
	slowdowns []float64
	// contention is their median (0 without any), and opContention the
	// median of each op kind's.
	contention   float64
	opContention map[string]float64
	// latencies are, for each run of a plan of two devices, the latency
	// of waking a goroutine its wakes give (runtime.DispatchLatency).
	latencies []time.Duration
	// probes are the machine's speed through the measurements.
	probes []cost.Probe
}

// measure runs the calibration plans on devices of w workers: one-device
// plans for the kernels alone (one and two micro-batches, for
// accumulation), and, where two devices fit the cores, dp=2 for all-reduces
// and for the kernels' slowdown when both devices are busy (at the first
// batch also with one gradient bucket, for its pack and unpack copies), pp=2 for
// transfers, and tp=2 for models with a tensor-parallel layout (and
// tp=2,sp=on for those with a sequence-parallel one): its collectives,
// and its kernels on split weights, which never run alone: they are priced
// at their tp=2 time less the contention.
func measure(cmd *cobra.Command, bench runtime.Microbench, f calibFlags, w int) (*measured, error) {
	dev := plans.Device{Type: "cpu", Workers: w}
	type job struct {
		p       *plans.Plan
		devices int
		dp, tp  bool
	}
	var jobs []job
	for _, model := range f.models {
		for _, b := range f.batches {
			strategies := []plans.Strategy{
				{DP: 1, PP: 1, MB: 1, Sched: plans.OneFOneB},
				{DP: 1, PP: 1, MB: 2, Sched: plans.OneFOneB}, // accumulation
			}
			// Two devices only where they fit the cores: oversubscribed
			// cores would time every kernel slow.
			if 2*w <= goruntime.NumCPU() {
				strategies = append(strategies,
					plans.Strategy{DP: 2, PP: 1, MB: 1, Sched: plans.OneFOneB},
					plans.Strategy{DP: 1, PP: 2, MB: 2, Sched: plans.OneFOneB})
				if b == f.batches[0] { // a gradient bucket's copies, whose sizes no batch changes
					strategies = append(strategies, plans.Strategy{DP: 2, PP: 1, MB: 1, Sched: plans.OneFOneB, Bucket: 25 * units.MiB})
				}
				if zoo.HasTP(model) {
					strategies = append(strategies, plans.Strategy{DP: 1, TP: 2, PP: 1, MB: 1, Sched: plans.OneFOneB})
				}
				if zoo.HasSP(model) { // its all-gathers and reduce-scatters, and kernels on split sequences
					strategies = append(strategies, plans.Strategy{DP: 1, TP: 2, SP: true, PP: 1, MB: 1, Sched: plans.OneFOneB})
				}
			}
			for _, s := range strategies {
				devs := make([]plans.Device, s.Devices())
				for i := range devs {
					devs[i] = dev
					devs[i].Name = "cpu" + strconv.Itoa(i)
				}
				p, err := plans.Compile(plans.Config{Model: model, Batch: b * s.DP * s.MB, Strategy: s,
					Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs})
				if errors.Is(err, plans.ErrInfeasible) {
					continue // e.g. a model too shallow for two stages
				}
				if err != nil {
					return nil, err
				}
				jobs = append(jobs, job{p: p, devices: s.Devices(), dp: s.DP > 1, tp: s.TP > 1})
			}
		}
	}
	// Every plan must fit this machine, checked before any is measured.
	for _, j := range jobs {
		if err := runtime.CheckHostMemory(j.p); err != nil {
			return nil, fmt.Errorf("%s at batch %d (%s): %w", j.p.Model, j.p.Batch, j.p.Strategy, err)
		}
	}
	// Every plan runs f.rounds times, the rounds one after the other, so
	// that a slow spell of a shared machine does not skew one shape.
	progress := newProgressBar(f.rounds*len(jobs), fmt.Sprintf("calibrating %d worker(s)", w))
	m := &measured{}
	var corun, split []cost.Sample
	// The machine's speed, probed twice a round and at the end: the
	// calibration's speed is their median (see cost.Probe).
	every := max(1, len(jobs)/2)
	for i := range f.rounds * len(jobs) {
		if i%every == 0 {
			m.probes = append(m.probes, runtime.ProbeCPU(w))
		}
		j := jobs[i%len(jobs)]
		got, err := bench.Measure(cmd.Context(), j.p)
		if err != nil {
			if cmd.Context().Err() != nil {
				return nil, fmt.Errorf("interrupted after measuring %d of %d plans (%d rounds of %d): a calibration fits them all, so nothing is written", i, f.rounds*len(jobs), f.rounds, len(jobs))
			}
			return nil, fmt.Errorf("%s at batch %d (%s): %w", j.p.Model, j.p.Batch, j.p.Strategy, err)
		}
		if wakes := slices.Concat(got.Wakes...); j.devices > 1 && len(wakes) > 0 {
			m.latencies = append(m.latencies, runtime.DispatchLatency(wakes))
		}
		for _, s := range got.Tasks {
			kind := plans.TaskKind(s.Work.Kind)
			comm := kind == plans.Transfer || kind.Collective() || kind == plans.Pack || kind == plans.Unpack // fitted as they ran, beside the other device
			switch {
			case j.devices == 1:
				m.alone = append(m.alone, s.Sample)
			case comm:
				m.comm = append(m.comm, s.Sample)
			case j.dp:
				corun = append(corun, s.Sample)
			case j.tp:
				split = append(split, s.Sample)
			}
		}
		progress(i + 1)
	}
	m.probes = append(m.probes, runtime.ProbeCPU(w))
	m.contend(corun)
	alone := medians(m.alone)
	for _, s := range split {
		if _, ok := alone[fmt.Sprint(s.Work.Kind, s.Work.Shape)]; !ok {
			s.Time = time.Duration(float64(s.Time) / (1 + m.slowdownOf(s.Work.Kind)))
			m.alone = append(m.alone, s)
		}
	}
	return m, nil
}

// contend sets the slowdowns, the contention and the contention by op
// kind from the kernels that ran beside a busy neighbour (corun) and the
// same kernels alone (m.alone): each shape's median time over its median
// time alone, less one.
func (m *measured) contend(corun []cost.Sample) {
	alone, co := medians(m.alone), medians(corun)
	kindOf := map[string]string{}
	for _, s := range corun {
		kindOf[fmt.Sprint(s.Work.Kind, s.Work.Shape)] = s.Work.Kind
	}
	byKind := map[string][]float64{}
	for _, key := range slices.Sorted(maps.Keys(co)) {
		// Kernels of a few microseconds are mostly overhead: they say
		// little about memory-system contention.
		if t, ok := alone[key]; ok && t > 100*time.Microsecond {
			slowdown := float64(co[key])/float64(t) - 1
			m.slowdowns = append(m.slowdowns, slowdown)
			byKind[kindOf[key]] = append(byKind[kindOf[key]], slowdown)
		}
	}
	m.contention = medianSlowdown(slices.Clone(m.slowdowns))
	m.opContention = map[string]float64{}
	for kind, s := range byKind {
		m.opContention[kind] = medianSlowdown(s)
	}
}

// medianSlowdown sorts s and returns its median, or 0 when it is empty or
// negative (a kernel does not run faster beside a busy neighbour: such a
// median is noise).
func medianSlowdown(s []float64) float64 {
	if len(s) == 0 {
		return 0
	}
	sort.Float64s(s)
	return max(0, s[len(s)/2])
}

// slowdownOf is the contention of kernels of kind: their own where
// measured, else the median over all kernels.
func (m *measured) slowdownOf(kind string) float64 {
	if k, ok := m.opContention[kind]; ok {
		return k
	}
	return m.contention
}

// dispatch is the median of the runs' latencies (0 without any), as the
// plan loop takes the median of runs' step times: a run in a slow spell of
// a shared machine does not set it.
func (m *measured) dispatch() time.Duration {
	if len(m.latencies) == 0 {
		return 0
	}
	return medianOf(slices.Clone(m.latencies))
}

// medianOf sorts ts and returns its median (the upper one of an even
// count).
func medianOf(ts []time.Duration) time.Duration {
	slices.Sort(ts)
	return ts[len(ts)/2]
}

// medians returns each shape's median time, by kind and shape.
func medians(samples []cost.Sample) map[string]time.Duration {
	by := map[string][]time.Duration{}
	for _, s := range samples {
		k := fmt.Sprint(s.Work.Kind, s.Work.Shape)
		by[k] = append(by[k], s.Time)
	}
	out := make(map[string]time.Duration, len(by))
	for k, ts := range by {
		out[k] = medianOf(ts)
	}
	return out
}

// fitKinds fits every op kind; kinds seen on fewer than four shapes keep
// their exact measurements over the default curves.
func fitKinds(spec topology.DeviceSpec, samples []cost.Sample) (*cost.DeviceCalibration, []cost.FitReport, error) {
	byKind := map[string][]cost.Sample{}
	for _, s := range samples {
		byKind[s.Work.Kind] = append(byKind[s.Work.Kind], s)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	dc := &cost.DeviceCalibration{Cores: spec.Cores, Ops: map[string]*cost.OpFit{}}
	var reps []cost.FitReport
	for _, k := range kinds {
		of, rep, err := cost.Fit(spec, byKind[k])
		if errors.Is(err, cost.ErrFit) {
			if of, err = cost.ExactOnly(spec, byKind[k]); err != nil {
				return nil, nil, err
			}
			rep = cost.FitReport{Kind: k, Samples: len(byKind[k]), Shapes: len(of.Exact)}
		} else if err != nil {
			return nil, nil, err
		}
		dc.Ops[k] = &of
		reps = append(reps, rep)
	}
	return dc, reps, nil
}

// runCalibrateCUDA measures every task of the given plans where it runs —
// GPU kernels in the plan's CUDA graph, CPU tasks of heterogeneous plans on
// their CPU devices — f.rounds times, and fits each device type's model
// from the medians.
func runCalibrateCUDA(cmd *cobra.Command, f calibFlags) error {
	if n, err := strconv.Atoi(strings.TrimPrefix(f.device, "cuda:")); f.device != "cuda" && (err != nil || n < 0) {
		return fmt.Errorf("--device %q: want cpu or cuda[:N], N a GPU's ordinal", f.device)
	}
	if f.device != "cuda" && f.device != "cuda:0" {
		return fmt.Errorf("--device %s: plans place their first GPU on cuda:0; other ordinals are not supported yet", f.device)
	}
	if len(f.plans) == 0 {
		return errors.New("--device cuda needs --plans: the plan files whose tasks to measure (flowsim plan --cluster h200-host … -o plan.json)")
	}
	if f.iters < 3 {
		return fmt.Errorf("--iters must be ≥ 3, got %d", f.iters)
	}
	if f.rounds < 1 {
		return fmt.Errorf("--rounds must be ≥ 1, got %d", f.rounds)
	}
	var files []string
	for _, pat := range f.plans {
		m, err := filepath.Glob(pat)
		if err != nil {
			return fmt.Errorf("--plans %q: %w", pat, err)
		}
		if len(m) == 0 {
			return fmt.Errorf("--plans %q: no such file", pat)
		}
		files = append(files, m...)
	}
	var ps []*plans.Plan
	for _, path := range files {
		p, err := plans.ReadFile(path)
		if err != nil {
			return err
		}
		if err := checkDevice(p, "cuda"); err != nil { // else nothing of it runs on the GPU being calibrated
			return fmt.Errorf("--plans: %s: %w", path, err)
		}
		ps = append(ps, p)
	}
	bench := runtime.Microbench{Iters: f.iters}
	start := time.Now()
	// By calibration key: the samples of every round.
	samples := map[string][]cost.Sample{}
	specs := map[string]topology.DeviceSpec{}
	progress := newProgressBar(f.rounds*len(ps), "calibrating on the GPU")
	for i := range f.rounds * len(ps) {
		p := ps[i%len(ps)]
		got, err := bench.Measure(cmd.Context(), p)
		if err != nil {
			return fmt.Errorf("%s: %w", files[i%len(ps)], err)
		}
		for _, s := range got.Tasks {
			spec, err := topology.Spec(s.Device, s.Workers)
			if err != nil {
				return err
			}
			key := cost.CalibrationKey(spec)
			specs[key] = spec
			samples[key] = append(samples[key], s.Sample)
		}
		progress(i + 1)
	}
	calib := cost.NewCalibration()
	var reports []calibReport
	host, _ := os.Hostname()
	for _, key := range slices.Sorted(maps.Keys(samples)) {
		// The median of the rounds, per shape.
		med := medians(samples[key])
		var kept []cost.Sample
		seen := map[string]bool{}
		for _, s := range samples[key] {
			k := fmt.Sprint(s.Work.Kind, s.Work.Shape)
			if !seen[k] {
				seen[k] = true
				s.Time = med[k]
				kept = append(kept, s)
			}
		}
		dc, reps, err := fitKinds(specs[key], kept)
		if err != nil {
			return err
		}
		dc.Note = fmt.Sprintf("flowrun calibrate --device %s on %s, %s, %d plans, %d shapes in %.0fs",
			f.device, host, time.Now().UTC().Format("2006-01-02"), len(ps), len(kept), time.Since(start).Seconds())
		calib.Devices[key] = dc
		for _, r := range reps {
			reports = append(reports, calibReport{Key: key, FitReport: r})
		}
	}
	if err := calib.WriteFile(f.out); err != nil {
		return err
	}
	if f.json {
		return printJSON(map[string]any{"output": f.out, "plans": files, "fits": reports, "held_out_median_rel_err": heldOutMedian(reports)})
	}
	return printFits(reports, f.out)
}
