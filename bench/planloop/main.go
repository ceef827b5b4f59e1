// Command planloop measures the plan loop on this machine's CPU: for each
// model, global batch and strategy it compiles a plan on the local cluster,
// executes it unchanged (runs × iterations), simulates it with a
// calibration, and tabulates predicted against measured step time. It
// writes results/plan-loop-cpu/{table.md,results.json}.
//
//	go run ./bench/planloop --calib calib.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
)

type row struct {
	Model     string    `json:"model"`
	Batch     int       `json:"batch"`
	Strategy  string    `json:"strategy"`
	Devices   int       `json:"devices"`
	PredMs    float64   `json:"predicted_step_ms"`
	MeasMs    float64   `json:"measured_step_ms"` // median of runs
	RunsMs    []float64 `json:"runs_ms"`
	RelErr    float64   `json:"rel_error"`
	PeakBytes []int64   `json:"peak_mem_bytes"`
}

func main() {
	calibPath := flag.String("calib", "", "calibration file (from flowrun calibrate; required)")
	models := flag.String("models", "mnist-cnn", "comma-separated models")
	batches := flag.String("batches", "64,256", "comma-separated global batches")
	strategies := flag.String("strategies", "single;dp=2;pp=2,mb=4,sched=1f1b;pp=2,mb=4,sched=gpipe", "semicolon-separated strategies")
	runs := flag.Int("runs", 5, "runs per plan (median kept)")
	iters := flag.Int("iters", 20, "iterations per run")
	warmup := flag.Int("warmup", 3, "iterations left out of each run's step time")
	out := flag.String("out", "results/plan-loop-cpu", "output folder")
	flag.Parse()
	if err := run(*calibPath, *models, *batches, *strategies, *runs, *iters, *warmup, *out); err != nil {
		fmt.Fprintln(os.Stderr, "planloop:", err)
		os.Exit(1)
	}
}

func run(calibPath, models, batches, strategies string, runs, iters, warmup int, out string) error {
	if calibPath == "" {
		return fmt.Errorf("--calib is required (flowrun calibrate -o calib.json)")
	}
	calib, err := cost.LoadCalibration(calibPath)
	if err != nil {
		return err
	}
	model := sim.CostModel{Compute: cost.NewComputeModel(calib)}
	cluster, err := topology.Resolve("local")
	if err != nil {
		return err
	}
	var cs []*config
	for _, m := range zoo.SplitNames(models) {
		for _, bs := range strings.Split(batches, ",") {
			var batch int
			if _, err := fmt.Sscan(bs, &batch); err != nil {
				return fmt.Errorf("batch %q: %w", bs, err)
			}
			for _, s := range strings.Split(strategies, ";") {
				c, err := prepare(m, batch, s, cluster, model, iters, warmup)
				if err != nil {
					return fmt.Errorf("%s batch %d %s: %w", m, batch, s, err)
				}
				cs = append(cs, c)
			}
		}
	}
	// The machine's speed against the calibration's, probed around the
	// runs (see runtime.SpeedCheck).
	var devs []plans.Device
	for _, c := range cs {
		devs = append(devs, c.p.Devices...)
	}
	speeds, err := runtime.SpeedChecks(calib, devs)
	if err != nil {
		return err
	}
	for _, s := range speeds {
		s.Probe()
	}
	// Runs go round-robin over the plans, so that a slow spell of a shared
	// machine lands on one run of many plans rather than on every run of
	// one plan.
	for run := range runs {
		for _, c := range cs {
			if err := c.run(iters, warmup); err != nil {
				return fmt.Errorf("%s batch %d %s, run %d: %w", c.row.Model, c.row.Batch, c.row.Strategy, run+1, err)
			}
		}
		for _, s := range speeds {
			s.Probe()
		}
	}
	for _, s := range speeds {
		s.Finish()
		fmt.Println("speed:", s)
	}
	rows := make([]row, len(cs))
	for i, c := range cs {
		r := &c.row
		sorted := slices.Clone(r.RunsMs)
		slices.Sort(sorted)
		r.MeasMs = sorted[len(sorted)/2]
		r.RelErr = (r.PredMs - r.MeasMs) / r.MeasMs
		fmt.Printf("%-10s %4d  %-24s predicted %8.2f ms  measured %8.2f ms  error %+6.1f%%\n",
			r.Model, r.Batch, r.Strategy, r.PredMs, r.MeasMs, 100*r.RelErr)
		rows[i] = *r
	}
	return write(out, calibPath, rows, speeds, iters, warmup)
}

// config is one plan under measurement.
type config struct {
	p      *plans.Plan
	runner *runtime.PlanRunner
	feed   runtime.Feeder
	row    row
}

// prepare compiles a plan, simulates it and readies its runner.
func prepare(model string, batch int, strategy string, cluster *topology.Cluster, cm sim.CostModel, iters, warmup int) (*config, error) {
	st, err := plans.ParseStrategy(strategy, batch)
	if err != nil {
		return nil, err
	}
	devs, err := plans.DevicesFor(cluster, st, false)
	if err != nil {
		return nil, err
	}
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 1, Cluster: cluster.Name,
		Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs})
	if err != nil {
		return nil, err
	}
	pred, err := sim.Simulate(p, cm, iters)
	if err != nil {
		return nil, err
	}
	predStep, err := pred.StepTime(warmup)
	if err != nil {
		return nil, err
	}
	c := &config{p: p, feed: runtime.NewSyntheticFeeder(p.Images, 10, 1024, 1),
		row: row{Model: model, Batch: batch, Strategy: p.Strategy, Devices: len(p.Devices), PredMs: ms(predStep)}}
	for _, m := range p.Memory {
		c.row.PeakBytes = append(c.row.PeakBytes, int64(m.Peak))
	}
	if c.runner, err = runtime.NewPlanRunner(p); err != nil {
		return nil, err
	}
	return c, nil
}

// run executes the plan once more and records its step time.
func (c *config) run(iters, warmup int) error {
	res, err := c.runner.Run(context.Background(), iters, c.feed)
	if err != nil {
		return err
	}
	if err := c.p.CheckTrace(res.Trace); err != nil {
		return err
	}
	step, err := res.Trace.StepTime(warmup)
	if err != nil {
		return err
	}
	c.row.RunsMs = append(c.row.RunsMs, ms(step))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func write(dir, calibPath string, rows []row, speeds []*runtime.SpeedCheck, iters, warmup int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	host, _ := os.Hostname()
	meta := map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "host": host, "cpus": goruntime.NumCPU(),
		"go": goruntime.Version(), "calibration": calibPath, "rows": rows,
	}
	if len(speeds) > 0 {
		meta["speed"] = speeds
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# Plan loop on CPU: predicted vs measured step time\n\n")
	fmt.Fprintf(&md, "%s, %s, %d CPUs, %s. Measured: median of %d runs (round-robin over the plans) of %d iterations, %d of them warm-up; predicted: `flowsim` with `%s`.\n\n",
		meta["date"], host, goruntime.NumCPU(), goruntime.Version(), len(rows[0].RunsMs), iters, warmup, filepath.Base(calibPath))
	fmt.Fprintf(&md, "| model | batch | strategy | devices | predicted ms | measured ms | error |\n|---|---:|---|---:|---:|---:|---:|\n")
	worst := 0.0
	for _, r := range rows {
		fmt.Fprintf(&md, "| %s | %d | %s | %d | %.2f | %.2f | %+.1f%% |\n", r.Model, r.Batch, r.Strategy, r.Devices, r.PredMs, r.MeasMs, 100*r.RelErr)
		worst = math.Max(worst, math.Abs(r.RelErr))
	}
	fmt.Fprintf(&md, "\nWorst |error|: %.1f%%.\n", 100*worst)
	if len(speeds) > 0 {
		fmt.Fprintf(&md, "\nThe machine's speed during the runs (reference kernels probed before the runs and after each round, against the calibration's probe):\n\n")
		for _, s := range speeds {
			fmt.Fprintf(&md, "- %s\n", s)
		}
	}
	return os.WriteFile(filepath.Join(dir, "table.md"), []byte(md.String()), 0o644)
}
