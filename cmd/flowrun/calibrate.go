package main

import (
	"errors"
	"fmt"
	"os"
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
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/topology"
)

type calibFlags struct {
	device, out string
	workers     []int
	models      []string
	batches     []int
	iters       int
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
dp=2 and pp=2 plans on this machine and taking each task's median time in
place (with the cache state and neighbours it has in a real run), then
fit the cost model per op kind: launch overhead + max(FLOPs / (peak·eff_c),
bytes / (bandwidth·eff_m)) with efficiencies that saturate with the size of
the work. Every fit is tested on a quarter of the shapes held out of it, and
its error is printed. Every measured shape is also kept: an exact measured
shape wins over the fit. The calibration is keyed by device type and core
count ("cpu/2"), and loads on any machine.`,
		Example: `  flowrun calibrate -o calib.json
  flowrun calibrate --workers 1,2 --models mnist-cnn --batches 8,16,32,64,128 -o calib.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCalibrate(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.device, "device", "cpu", "device to calibrate: cpu")
	fl.IntSliceVar(&f.workers, "workers", nil, "worker counts (cores per device) to calibrate (default: 1 and all cores)")
	fl.StringSliceVar(&f.models, "models", []string{"mnist-cnn", "mlp"}, "zoo models whose tasks are measured")
	fl.IntSliceVar(&f.batches, "batches", []int{4, 8, 16, 32, 64, 128, 256}, "micro-batch sizes measured")
	fl.IntVar(&f.iters, "iters", 8, "iterations each calibration plan runs (the first two untimed; the median is kept)")
	fl.StringVarP(&f.out, "output", "o", "calib.json", "calibration file to write")
	fl.BoolVar(&f.json, "json", false, "print the fit reports as JSON")
	return cmd
}

func runCalibrate(cmd *cobra.Command, f calibFlags) error {
	if f.device != "cpu" {
		return fmt.Errorf("--device %s: not available: this build calibrates cpu only", f.device)
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
	}
	for _, m := range f.models {
		if !zoo.Known(m) {
			return fmt.Errorf("--models: unknown model %q (known: %s)", m, strings.Join(zoo.Names(), ", "))
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
	calib := cost.NewCalibration()
	bench := runtime.Microbench{Iters: f.iters}
	var reports []calibReport
	for _, w := range f.workers {
		spec, err := topology.Spec("cpu", w)
		if err != nil {
			return err
		}
		start := time.Now()
		samples, err := measure(cmd, bench, f, w)
		if err != nil {
			return err
		}
		dc, reps, err := fitKinds(spec, samples)
		if err != nil {
			return err
		}
		host, _ := os.Hostname()
		dc.Note = fmt.Sprintf("flowrun calibrate on %s, %d worker(s), %s, %d samples in %.0fs",
			host, w, time.Now().UTC().Format("2006-01-02"), len(samples), time.Since(start).Seconds())
		calib.Devices[cost.CalibrationKey(spec)] = dc
		for _, r := range reps {
			reports = append(reports, calibReport{Key: cost.CalibrationKey(spec), FitReport: r})
		}
	}
	if err := calib.WriteFile(f.out); err != nil {
		return err
	}
	if f.json {
		return printJSON(map[string]any{"output": f.out, "fits": reports, "held_out_median_rel_err": heldOutMedian(reports)})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "device\top\tshapes\theld out\tmedian err\tmax err\t")
	for _, r := range reports {
		if r.HeldOut == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t-\t(exact only)\t\t\n", r.Key, r.Kind, r.Shapes)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f%%\t%.1f%%\t\n", r.Key, r.Kind, r.Shapes, r.HeldOut, 100*r.MedianRelErr, 100*r.MaxRelErr)
	}
	tw.Flush()
	fmt.Printf("held-out shapes, all ops: median error %.1f%%\nwrote %s\n", 100*heldOutMedian(reports), f.out)
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

// measure times every task of the calibration plans on devices of w
// workers: single plans for the kernels (one and two micro-batches, for
// accumulation), and where two devices fit the cores, dp=2 for all-reduces
// and pp=2 for transfers.
func measure(cmd *cobra.Command, bench runtime.Microbench, f calibFlags, w int) ([]cost.Sample, error) {
	dev := plans.Device{Type: "cpu", Workers: w}
	var ps []*plans.Plan
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
				ps = append(ps, p)
			}
		}
	}
	progress := newProgressBar(len(ps), fmt.Sprintf("calibrating %d worker(s)", w))
	var samples []cost.Sample
	for i, p := range ps {
		got, err := bench.Measure(cmd.Context(), p)
		if err != nil {
			return nil, err
		}
		for _, s := range got {
			samples = append(samples, s.Sample)
		}
		progress(i + 1)
	}
	return samples, nil
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
