package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
)

type simFlags struct {
	plan, calib, tracePath, cluster string
	iters, warmup, top              int
	json, breakdown, memory         bool
}

func newSimulateCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "simulate [PLAN]",
		Short: "Simulate a plan file with the cost model and print its step time",
		Long: `Simulate a plan with the discrete-event simulator: every firing starts as soon
as its dependency edges allow and lasts what the cost model says (from
--calib, a file written by 'flowrun calibrate', else the device catalog's
default efficiencies); transfers and all-reduces between accelerators are
priced over the cluster's routes by the communication model. The same input
gives the same output, byte for byte.

After the step time and each device's peak memory it prints where the step
goes (--breakdown, on by default): per device, the time per step after
--warmup spent computing, communicating (transfers, input copies,
collectives), communicating with no compute running on the device (exposed),
and idle (a pipeline's bubble, waiting for a peer), each the length of a
union of the device's streams' intervals, so that compute + exposed comm +
idle = step. Then the critical path of the same iterations: from the task
that ended the last one back, through whichever of its dependency edges'
sources ended last (what released it), to the end of the warm-up; its time
computing, communicating and waiting, the streams, ops and tasks (--top) it
runs on most, and how many of its steps each kind of edge released (data,
slot, stream, update, after).

Last (--memory, by default as --breakdown) what fills each device's memory:
the planned arena (the memory the device needs) beside the most bytes the
simulated iterations held live at once, when, and what they were: weights,
optimizer state (ZeRO's master parts included), gradients of the weights and
their accumulators, activations (forward outputs kept for the backward pass,
and recomputations), and temporaries (inputs, ZeRO-3's gathered weights, the
backward pass's gradients of activations); then the largest registers live
at the fullest device's peak (--top). A register's slot is live from the
start of the firing that writes it to the end of the last firing that reads
that write; persistent registers always. The arena is never smaller than the
live peak: it holds every execution the plan's edges allow, not only the
simulated one, and what does not pack tightly.`,
		Example: `  flowsim simulate --plan plan.json --calib calib.json --trace sim.json`,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("memory") {
				f.memory = f.breakdown
			}
			// The plan as flowrun exec takes it, or by --plan.
			switch {
			case len(args) == 1 && f.plan != "":
				return fmt.Errorf("give the plan once: %s or --plan %s", args[0], f.plan)
			case len(args) == 1:
				f.plan = args[0]
			case f.plan == "":
				return fmt.Errorf("give a plan file (from 'flowsim plan -o'): flowsim simulate PLAN")
			}
			return runSimulate(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.plan, "plan", "", "plan file (from 'flowsim plan'), as the argument PLAN")
	fl.StringVar(&f.calib, "calib", "", "calibration file")
	fl.StringVar(&f.cluster, "cluster", "", "cluster whose routes price communication between accelerators, holding the plan's devices by name (default: the plan's, if it is a preset)")
	fl.IntVar(&f.iters, "iters", 10, "iterations to simulate")
	fl.IntVar(&f.warmup, "warmup", 2, "iterations left out of the step time")
	fl.StringVar(&f.tracePath, "trace", "", "write the simulated trace as Chrome JSON (opens in Perfetto), with each device's live memory as a counter track")
	fl.BoolVar(&f.json, "json", false, "print the result as one JSON object")
	fl.BoolVar(&f.breakdown, "breakdown", true, "print where the step goes per device and the critical path (in JSON: breakdown and critical_path)")
	fl.BoolVar(&f.memory, "memory", false, "print what fills each device's memory at its live peak (default: as --breakdown; in JSON: memory)")
	fl.IntVar(&f.top, "top", 3, "streams, ops and tasks of the critical path, and registers at the fullest device's memory peak, shown (0: all)")
	return cmd
}

func runSimulate(w io.Writer, f simFlags) error {
	if err := cliargs.Output("--trace", f.tracePath); err != nil {
		return err
	}
	if f.iters < 1 || f.warmup < 0 || f.warmup >= f.iters {
		return fmt.Errorf("want --iters ≥ 1 and 0 ≤ --warmup < --iters, got %d and %d", f.iters, f.warmup)
	}
	if f.top < 0 {
		return fmt.Errorf("--top must be ≥ 0 (0: all), got %d", f.top)
	}
	p, err := plans.ReadFile(f.plan)
	if err != nil {
		return err
	}
	var calib *cost.Calibration
	if f.calib != "" {
		if calib, err = cost.LoadCalibration(f.calib); err != nil {
			return err
		}
		lacking, err := sim.CheckCalibration(p, calib)
		if err != nil {
			return fmt.Errorf("--calib %s: %w", f.calib, err)
		}
		if len(lacking) > 0 {
			fmt.Fprintf(os.Stderr, "flowsim: note: --calib %s holds no calibration of %s: priced from the catalog's efficiencies\n", f.calib, strings.Join(lacking, ", "))
		}
		note, err := uncalibratedNote(f.calib, calib, p, "the plan's")
		if err != nil {
			return err
		}
		fmt.Fprint(os.Stderr, note)
	}
	model := sim.CostModel{Compute: cost.NewComputeModel(calib)}
	switch {
	case f.cluster != "":
		c, err := topology.Resolve(f.cluster)
		if err != nil {
			return err
		}
		model.Comm = cost.NewComm(c)
		if err := model.CheckCluster(p); err != nil {
			return fmt.Errorf("--cluster %s: %w", f.cluster, err)
		}
	case p.Cluster != "":
		c, err := topology.Resolve(p.Cluster)
		if err != nil && len(p.Devices) > 1 {
			// A plan compiled for a cluster file records the file's
			// cluster name, not its path.
			fmt.Fprintf(os.Stderr, "flowsim: note: the plan's cluster %s is not a preset (%v): its transfers and collectives are priced as in-process copies; give --cluster FILE to price them over its routes\n", p.Cluster, err)
		}
		if err != nil {
			break
		}
		model.Comm = cost.NewComm(c)
		if err := model.CheckCluster(p); err != nil {
			return fmt.Errorf("the plan's cluster: %w (give --cluster FILE)", err)
		}
	}
	if model.Comm != nil {
		fmt.Fprint(os.Stderr, coresNote(p, model.Comm.Cluster()))
	}
	tr, err := sim.Simulate(p, model, f.iters)
	if err != nil {
		return err
	}
	step, err := tr.StepTime(f.warmup)
	if err != nil {
		return err
	}
	// The trace is validated once; live memory, the Chrome file and the
	// step report take it checked.
	checked, err := trace.Check(tr)
	if err != nil {
		return err
	}
	// Live memory once, for the table and the trace's counter tracks.
	var live *plans.LiveMemory
	if f.memory || f.tracePath != "" {
		if live, err = p.LiveMemoryChecked(checked, f.top); err != nil {
			return err
		}
	}
	if f.tracePath != "" {
		if err := writeTrace(f.tracePath, checked, live); err != nil {
			return err
		}
	}
	if !f.memory {
		live = nil
	}
	var report *trace.StepReport
	if f.breakdown {
		deps, err := p.TraceDeps()
		if err != nil {
			return err
		}
		if report, err = checked.StepReport(deps, f.warmup); err != nil {
			return err
		}
	}
	peak := make(map[string]int64, len(p.Memory))
	for _, m := range p.Memory {
		peak[p.Devices[m.Device].Name] = int64(m.Peak)
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		out := map[string]any{
			"plan": f.plan, "model": p.Model, "strategy": p.Strategy, "batch": p.Batch,
			"step_time_s": step.Seconds(), "samples_per_s": float64(p.Batch) / step.Seconds(),
			"peak_mem_bytes": peak, "iters": f.iters, "warmup": f.warmup,
		}
		if report != nil {
			out["breakdown"], out["critical_path"] = report.Breakdown, report.Path
		}
		if live != nil {
			out["memory"] = live
		}
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "%s %s batch %d: step %.3f ms, %.0f samples/s\n", p.Model, p.Strategy, p.Batch,
		float64(step)/1e6, float64(p.Batch)/step.Seconds())
	rows := make([]trace.Row, len(p.Memory))
	for i, m := range p.Memory {
		rows[i] = trace.Row{Device: p.Devices[m.Device].Name, Cells: fmt.Sprintf("peak memory %v", m.Peak)}
	}
	for _, r := range trace.Alike(rows) {
		fmt.Fprintf(w, "  %s: %s\n", r.Device, r.Cells)
	}
	if report != nil {
		fmt.Fprintln(w)
		if err := report.Write(w, f.top); err != nil {
			return err
		}
	}
	if live == nil {
		return nil
	}
	fmt.Fprintln(w)
	return live.Write(w, "this simulation")
}

// writeTrace writes tr to path as Chrome JSON with live's counter tracks.
func writeTrace(path string, tr trace.Checked, live *plans.LiveMemory) error {
	counters, err := live.Counters(tr.Trace())
	if err != nil {
		return err
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tr.WriteChrome(file, counters...); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// uncalibratedNote is the note that calibration calib (read from path)
// has no fit of some of p's kernels, which the simulator then prices by
// the catalog's efficiencies (see sim.UncalibratedOps); "" when it fits
// them all. whose names the plan ("the plan's", "the best plan's").
func uncalibratedNote(path string, calib *cost.Calibration, p *plans.Plan, whose string) (string, error) {
	ops, err := sim.UncalibratedOps(p, calib)
	if err != nil || len(ops) == 0 {
		return "", err
	}
	return fmt.Sprintf("flowsim: note: --calib %s has no fit of some of %s kernels (%s): priced from the catalog's efficiencies\n",
		path, whose, strings.Join(ops, "; ")), nil
}

// coresNote says, for each host of cluster c whose CPU cores p's CPU
// devices there take more of than it has, that the simulation prices them
// as if it had them (a plan compiled with --oversubscribe, or for a larger
// machine of the same name).
func coresNote(p *plans.Plan, c *topology.Cluster) string {
	has := map[string]int{}
	for _, d := range c.Devices {
		if d.Spec.Class == topology.CPU {
			has[c.Nodes[d.Node].Name] += d.Spec.Cores
		}
	}
	take, _ := p.CPUCores()
	var b strings.Builder
	for _, host := range slices.Sorted(maps.Keys(take)) {
		if n, ok := has[host]; ok && take[host] > n {
			fmt.Fprintf(&b, "flowsim: note: the plan's CPU devices on %s take %d cores, cluster %s's have %d: each is priced with its cores, as if they were there\n", host, take[host], c.Name, n)
		}
	}
	return b.String()
}
