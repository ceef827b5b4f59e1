package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/experiments"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
)

type reproduceFlags struct {
	out, calib    string
	rows, columns []string
	iters, warmup int
	json          bool
}

func newReproduceCmd() *cobra.Command {
	var f reproduceFlags
	cmd := &cobra.Command{
		Use:   "reproduce EXPERIMENT|FILE.yaml",
		Short: "Simulate each row of a published table and compare with the paper",
		Long: `Simulate each row of a published table on the paper's hardware model and
print paper against simulated, with the error. Each row is compiled into a
plan (its model, batch and strategy, the column's options added) on the
experiment's cluster preset sized to the row's devices, and simulated.

Writes, under --out: table.md (paper vs simulated), plot.svg (the same as
bars) and summary.json. A file whose optimizer, dtype, cluster, models or
strategies (a row's, with each column's options) no cell could take is
refused when read, naming its line. A cell that cannot be simulated (a
strategy option not built yet, a plan too large) is reported with its
reason, and the command then exits non-zero; --rows and --columns choose
the cells.

Each cell is compiled with one rank of every tensor-parallel group standing
for all, and one replica for even replicas (see 'flowsim plan --shared-tp'
and '--shared-dp'): the ranks run alike, so the plan is tp·dp times smaller
and simulates to the same step.

Experiments (folders under experiments/, built in): ` + strings.Join(experiments.Names(), ", ") + `;
or a YAML file of one's own in their format (experiments/*/experiment.yaml).`,
		Example: `  flowsim reproduce korthikanti2022 --rows 22B,175B --columns "full recompute"
  flowsim reproduce korthikanti2022 --out /tmp/k22 --json`,
		Args: cliargs.One("an experiment: a name (" + strings.Join(experiments.Names(), ", ") + ") or a YAML file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReproduce(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "folder for table.md, plot.svg and summary.json (default results/EXPERIMENT)")
	fl.StringVar(&f.calib, "calib", "", "calibration file (default: the catalog's efficiencies)")
	fl.StringSliceVar(&f.rows, "rows", nil, "rows to simulate, by name (default all)")
	fl.StringSliceVar(&f.columns, "columns", nil, "columns to simulate, by name (default all)")
	fl.IntVar(&f.iters, "iters", 3, "iterations to simulate per cell")
	fl.IntVar(&f.warmup, "warmup", 1, "iterations left out of the step time")
	fl.BoolVar(&f.json, "json", false, "print the summary as JSON instead of the table")
	return cmd
}

// cell is one row of a published table in one column, simulated.
type cell struct {
	Row        string  `json:"row"`
	Column     string  `json:"column"`
	Model      string  `json:"model"`
	Strategy   string  `json:"strategy"`
	Batch      int     `json:"batch"`
	Devices    int     `json:"devices"`
	Cluster    string  `json:"cluster"`
	Paper      float64 `json:"paper_s"`
	PaperMFU   float64 `json:"paper_mfu,omitempty"`
	Simulated  float64 `json:"simulated_s,omitempty"`
	MFU        float64 `json:"simulated_mfu,omitempty"`
	Error      float64 `json:"error,omitempty"` // (simulated − paper) / paper
	PeakMemory int64   `json:"peak_memory_bytes,omitempty"`
	Firings    int     `json:"firings,omitempty"`
	CompileS   float64 `json:"compile_s,omitempty"`
	SimulateS  float64 `json:"simulate_s,omitempty"`
	Skipped    string  `json:"not_simulated,omitempty"` // why not
}

type reproduction struct {
	Experiment string  `json:"experiment"`
	Title      string  `json:"title"`
	Source     string  `json:"source"`
	Metric     string  `json:"metric"`
	Cluster    string  `json:"cluster"`
	Calib      string  `json:"calib,omitempty"`
	Cells      []cell  `json:"cells"`
	MeanAbsErr float64 `json:"mean_abs_error"`
	MaxAbsErr  float64 `json:"max_abs_error"`
}

func runReproduce(w, log io.Writer, name string, f reproduceFlags) error {
	if f.iters < 1 || f.warmup < 0 || f.warmup >= f.iters {
		return fmt.Errorf("want --iters ≥ 1 and 0 ≤ --warmup < --iters, got %d and %d", f.iters, f.warmup)
	}
	var e *experiments.Experiment
	var err error
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
		e, err = experiments.LoadFile(name)
	} else {
		e, err = experiments.Load(name)
	}
	if err != nil {
		return err
	}
	name = e.Name
	rows, err := choose(e.Rows, f.rows, "row", func(r experiments.Row) string { return r.Name })
	if err != nil {
		return err
	}
	cols, err := choose(e.Columns, f.columns, "column", func(c experiments.Column) string { return c.Name })
	if err != nil {
		return err
	}
	base, err := topology.Preset(e.Cluster)
	if err != nil {
		return fmt.Errorf("experiment %s: %w", name, err)
	}
	if f.calib != "" { // before any cell compiles (minutes, for the large ones): each would fail on it
		if _, _, err := costModel(f.calib, base); err != nil {
			return err
		}
	}
	if f.out == "" {
		f.out = filepath.Join("results", name)
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	rep := reproduction{Experiment: name, Title: e.Title, Source: e.Source, Metric: e.Metric, Cluster: e.Cluster, Calib: f.calib}
	for _, r := range rows {
		for _, c := range cols {
			p, ok := r.Paper[c.Name]
			if !ok {
				continue
			}
			res := cell{Row: r.Name, Column: c.Name, Model: r.Model, Strategy: r.StrategyIn(c), Batch: r.Batch, Paper: p.Seconds, PaperMFU: p.MFU}
			if err := simulateCell(&res, e, base, f); err != nil {
				res.Skipped = err.Error()
				fmt.Fprintf(log, "%s, %s: not simulated: %v\n", r.Name, c.Name, err)
			} else {
				fmt.Fprintf(log, "%s, %s: %d firings compiled in %.1f s, simulated in %.1f s: %.3f s (paper %.3g s, %+.1f%%)\n",
					r.Name, c.Name, res.Firings, res.CompileS, res.SimulateS, res.Simulated, res.Paper, 100*res.Error)
			}
			rep.Cells = append(rep.Cells, res)
		}
	}
	var n int
	for _, c := range rep.Cells {
		if c.Skipped == "" {
			n++
			rep.MeanAbsErr += math.Abs(c.Error)
			rep.MaxAbsErr = max(rep.MaxAbsErr, math.Abs(c.Error))
		}
	}
	if n > 0 {
		rep.MeanAbsErr /= float64(n)
	}
	if err := writeReproduction(f.out, e, &rep); err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprint(w, reproductionTable(e, &rep))
		fmt.Fprintf(w, "\nwrote %s\n", strings.Join([]string{filepath.Join(f.out, "table.md"), filepath.Join(f.out, "plot.svg"), filepath.Join(f.out, "summary.json")}, ", "))
	}
	if n < len(rep.Cells) {
		return fmt.Errorf("%d of %d cells not simulated (see the table; --rows and --columns choose cells)", len(rep.Cells)-n, len(rep.Cells))
	}
	return nil
}

// choose returns the items named (all if none), in the experiment's order.
func choose[T any](items []T, names []string, what string, name func(T) string) ([]T, error) {
	if len(names) == 0 {
		return items, nil
	}
	var all []string
	for _, it := range items {
		all = append(all, name(it))
	}
	for _, n := range names {
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("no %s %q (%ss: %s)", what, n, what, strings.Join(all, ", "))
		}
	}
	var out []T
	for _, it := range items {
		if slices.Contains(names, name(it)) {
			out = append(out, it)
		}
	}
	return out, nil
}

// simulateCell compiles and simulates one cell on the experiment's
// cluster, sized to the strategy's devices.
func simulateCell(c *cell, e *experiments.Experiment, base *topology.Cluster, f reproduceFlags) error {
	st, err := plans.ParseStrategy(c.Strategy, c.Batch)
	if err != nil {
		return err
	}
	c.Devices = st.Devices()
	c.Cluster = e.Cluster
	if per := len(base.Devices); c.Devices > per {
		c.Cluster = fmt.Sprintf("%sx%d", e.Cluster, (c.Devices+per-1)/per)
	}
	cluster, err := topology.Preset(c.Cluster)
	if err != nil {
		return err
	}
	dtype, err := zoo.ParseDType(e.DType)
	if err != nil {
		return fmt.Errorf("experiment %s: dtype: %w", e.Name, err)
	}
	opt, err := graph.NewOptimizer(e.OptimizerSpec())
	if err != nil {
		return fmt.Errorf("experiment %s: %w", e.Name, err)
	}
	devs, err := plans.DevicesFromCluster(cluster, c.Devices, false)
	if err != nil {
		return err
	}
	start := time.Now()
	// One rank of each tensor-parallel group stands for all, and one
	// replica for all where they run alike: plans tp·dp times smaller,
	// with the same simulated step where sim.SharesExactly holds (on the
	// NVSwitch presets uncalibrated; elsewhere approximately), and
	// without which the largest cells would not compile.
	p, err := plans.CompileSharing(plans.Config{Model: c.Model, Batch: c.Batch, Strategy: st, Optimizer: opt, DType: dtype, Cluster: cluster.Name, Devices: devs,
		SharedTP: true, SharedDP: true})
	if err != nil {
		return err
	}
	c.CompileS = time.Since(start).Seconds()
	c.Firings = len(p.Firings)
	for _, m := range p.Memory {
		c.PeakMemory = max(c.PeakMemory, int64(m.Peak))
	}
	model, _, err := costModel(f.calib, cluster)
	if err != nil {
		return err
	}
	start = time.Now()
	tr, err := sim.Simulate(p, model, f.iters)
	if err != nil {
		return err
	}
	step, err := tr.StepTime(f.warmup)
	if err != nil {
		return err
	}
	c.SimulateS = time.Since(start).Seconds()
	c.Simulated = step.Seconds()
	c.Error = (c.Simulated - c.Paper) / c.Paper

	// Model FLOPs utilization: the training graph's FLOPs (no recompute)
	// over the time, the devices and their peak.
	m, err := zoo.Build(c.Model, zoo.Config{Batch: c.Batch, Train: true, DType: dtype})
	if err != nil {
		return err
	}
	if err := m.Graph.Minimize(m.Loss, opt); err != nil {
		return err
	}
	if peak, ok := cluster.Devices[0].Spec.Peak.PeakFor(dtype.String()); ok && peak > 0 {
		c.MFU = float64(m.Graph.Cost().FLOPs) / (c.Simulated * float64(c.Devices) * float64(peak))
	}
	return nil
}

func writeReproduction(dir string, e *experiments.Experiment, rep *reproduction) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(reproductionTable(e, rep)), 0o644); err != nil {
		return err
	}
	return plotReproduction(filepath.Join(dir, "plot.svg"), e, rep)
}

// reproductionTable is the Markdown table of paper against simulated.
func reproductionTable(e *experiments.Experiment, rep *reproduction) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", e.Title)
	fmt.Fprintf(&b, "Source: %s\n\n", e.Source)
	if e.Notes != "" {
		fmt.Fprintf(&b, "%s\n\n", e.Notes)
	}
	calib := "the device catalog's default efficiencies (uncalibrated)"
	if rep.Calib != "" {
		calib = "calibration " + rep.Calib
	}
	fmt.Fprintf(&b, "Simulated by `flowsim reproduce %s` on the %s preset, priced with %s.\n\n", e.Name, e.Cluster, calib)
	b.WriteString("| row | column | strategy | GPUs | batch | paper (s) | simulated (s) | error | paper MFU | simulated MFU | peak memory |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	pct := func(x float64) string {
		if x == 0 {
			return ""
		}
		return fmt.Sprintf("%.1f%%", 100*x)
	}
	for _, c := range rep.Cells {
		if c.Skipped != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %.2f | not simulated: %s | | %s | | |\n",
				c.Row, c.Column, c.Strategy, devicesOrBlank(c.Devices), c.Batch, c.Paper, oneLine(c.Skipped), pct(c.PaperMFU))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %.2f | %.2f | %+.1f%% | %s | %s | %.1f GiB |\n",
			c.Row, c.Column, c.Strategy, c.Devices, c.Batch, c.Paper, c.Simulated, 100*c.Error, pct(c.PaperMFU), pct(c.MFU), float64(c.PeakMemory)/(1<<30))
	}
	if rep.MaxAbsErr > 0 {
		fmt.Fprintf(&b, "\nMean |error| %.1f%%, max %.1f%%.\n", 100*rep.MeanAbsErr, 100*rep.MaxAbsErr)
	}
	return b.String()
}

func devicesOrBlank(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

func oneLine(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "/") }
