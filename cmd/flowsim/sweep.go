package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/internal/jsonerr"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/plans/search"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

type sweepFlags struct {
	planFlags
	devices, maxMB, top int
	maxTP               int
	uneven, place       string
	recompute           bool
	buckets             []string
	shard               string
	plot                string
}

func newSweepCmd() *cobra.Command {
	var f sweepFlags
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Rank the parallel strategies of a model on a cluster by simulated step time",
		Long: `Enumerate the strategies that use --devices devices of the cluster (its
first ones; default all; on a cluster of CPUs, such as local, --devices N
divides the cores into N devices): every tensor-parallel degree tp = 1, 2,
4 … up to --max-tp for models that have a tensor-parallel layout (by
default, as many as one machine of the sweep holds: Megatron-LM keeps a
group on one machine's fast links), and for the GPTs, LLaMAs and BERTs each tp > 1 also with
sequence parallelism (sp=on), every dp × tp × pp = devices,
micro-batches per replica 1, 2, 4 … up to --max-mb (and pp, 2·pp … for
pipelines) that divide the batch, both schedules for pipelines, and 1F1B
pipelines whose micro-batches are a multiple of their stages also
interleaved (vpp=2) where the model has two layers per stage, and data-parallel strategies (with tp or not) also with
each ZeRO stage (zero=1, 2, 3). With --uneven (on by default when
the devices differ), each data-parallel strategy is also tried with
mb=auto (with each ZeRO stage too) and each pipeline with layers=auto,
resolved by their own searches
(see 'flowsim plan --help'); with --place (on by default when the
cluster's devices differ), each pipeline also with each placement of its
stages on the cluster's device types, in blocks of neighbouring stages
(place=v100:a100, place=a100:a100:v100 …; see 'flowsim plan --help'),
choosing among all of the cluster's devices, not only the first
--devices; with --recompute, each also with
recompute=full and, for models whose attention keeps its probabilities
(not attention=flash), recompute=selective; with
--buckets 25MiB,…, each data-parallel strategy without ZeRO or with its
stage 1 also with each gradient bucket size (bucket=25MiB …; see 'flowsim
plan --help'). Every
strategy is compiled (which rejects those
that overflow a device's memory or can deadlock) and simulated with the
cost model (--calib, else the catalog's efficiencies); the table ranks them
by step time, then peak memory, and -o writes the best plan. Where it
ranks a strategy exactly as its whole plan, which is wherever the cost
model prices no dispatch latency or contention and prices every peer's
transfers alike (NVSwitch machines with the catalog's efficiencies), a
strategy is compiled with one rank standing for each tensor-parallel
group and one replica for all (as --shared-tp and --shared-dp ask
everywhere, approximately where not exact): tp·dp times less work, the
same table. Under the
table, the memory–time front: the strategies no other beats on both, each
the fastest within its memory (in --json, "front", by index); --plot draws
them all.

--shard i/N sweeps every N-th strategy from the i-th (a job array's task i
of N); run each with --json into a file and 'flowsim sweep merge' them into
the one table the whole sweep would print.`,
		Example: `  flowsim sweep --model mnist-cnn --cluster mixed-t4-cpu --batch 64 -o best.json
  flowsim sweep --model gpt2s-blocks:layers=4 --cluster dgx-a100 --batch 32 --devices 8 --top 5
  flowsim sweep --model gpt3-1.3b --dtype bf16 --cluster dgx-a100-80gx2 --batch 64 --plot sweep.svg
  for i in 0 1 2 3; do flowsim sweep --model mnist-cnn --cluster dgx-a100 --shard $i/4 --json > s$i.json; done
  flowsim sweep merge s0.json s1.json s2.json s3.json -o best.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSweep(cmd.OutOrStdout(), f) },
	}
	fl := cmd.Flags()
	f.register(fl, "the strategies")
	fl.IntVar(&f.devices, "devices", 0, "devices every strategy uses (default: all of the cluster's)")
	fl.IntVar(&f.maxMB, "max-mb", 8, "the most micro-batches per replica tried")
	fl.IntVar(&f.maxTP, "max-tp", -1, "tensor-parallel degrees tried: the powers of two up to this (-1: the devices of one machine, for models with a tensor-parallel layout; 1: none)")
	fl.StringVar(&f.uneven, "uneven", "auto", "also try mb=auto and layers=auto: on, off, or auto (on when the devices differ)")
	fl.StringVar(&f.place, "place", "auto", "also try each pipeline with its stages placed on the cluster's device types (place=…): on, off, or auto (on when the cluster's devices differ)")
	fl.BoolVar(&f.recompute, "recompute", false, "also try each strategy with recompute=full, and recompute=selective for models whose attention keeps its probabilities (slower; may fit where it does not)")
	fl.StringSliceVar(&f.buckets, "buckets", nil, "also try each data-parallel strategy without ZeRO or with zero=1 with each of these gradient bucket sizes (bucket=…), as 1MiB,25MiB")
	fl.IntVar(&f.top, "top", 10, "strategies shown (0: all)")
	fl.StringVar(&f.shard, "shard", "", "sweep only shard i of N, as i/N (0 ≤ i < N)")
	fl.StringVarP(&f.out, "output", "o", "", "write the best strategy's plan here")
	fl.BoolVar(&f.json, "json", false, "print every entry as one JSON object (the input of 'flowsim sweep merge')")
	fl.StringVar(&f.plot, "plot", "", "draw every feasible strategy's peak memory against its step time, with the memory–time front, into this image (.svg, .png, .pdf …)")
	cmd.AddCommand(newSweepMergeCmd())
	return cmd
}

// sweepFile is what a sweep prints with --json: its settings, enough to
// merge shards and recompile the best plan, and its entries, ranked.
type sweepFile struct {
	sweepSettings
	Shard   int          `json:"shard"`
	Entries []sweepEntry `json:"entries"`
	// Front is the enumeration indices of the entries on the memory–time
	// front, fastest first (see sweepFront): of the shard's entries in a
	// shard's file; a merge finds the whole sweep's.
	Front []int `json:"front,omitempty"`
}

// sweepSettings are what the shards of one sweep share.
type sweepSettings struct {
	Model         string  `json:"model"`
	DType         string  `json:"dtype"`
	Cluster       string  `json:"cluster"`
	Batch         int     `json:"batch"`
	Optimizer     string  `json:"optimizer"`
	LR            float64 `json:"lr"`
	Momentum      float64 `json:"momentum"`
	Seed          uint64  `json:"seed"`
	Oversubscribe bool    `json:"oversubscribe,omitempty"`
	// SharedTP and SharedDP are the sweep's --shared-tp and --shared-dp:
	// its plans list one rank of a group and one replica where they run
	// alike (plans.CompileSharing), and so does the best plan, recompiled.
	// Without them it shares plans only where they simulate to their
	// whole plans' steps (search.compile).
	SharedTP bool `json:"shared_tp,omitempty"`
	SharedDP bool `json:"shared_dp,omitempty"`
	// WeightDecay is the weight decay the plans were compiled with (adamw's
	// default made explicit), Schedule the --lr-schedule ("" for constant).
	WeightDecay float64 `json:"weight_decay,omitempty"`
	Schedule    string  `json:"lr_schedule,omitempty"`
	// MaxMemory is --max-memory in bytes (0 for none): every device's
	// memory capped at it.
	MaxMemory  int64  `json:"max_memory_bytes,omitempty"`
	Calib      string `json:"calib,omitempty"`
	Devices    int    `json:"devices"`
	MaxMB      int    `json:"max_mb"`
	MaxTP      int    `json:"max_tp,omitempty"`
	Uneven     bool   `json:"uneven"`
	Place      bool   `json:"place,omitempty"`
	Recompute  bool   `json:"recompute,omitempty"`
	Buckets    string `json:"buckets,omitempty"` // bytes, comma-separated
	Strategies int    `json:"strategies"`        // in the whole sweep, over all shards
	Shards     int    `json:"shards"`
}

type sweepEntry struct {
	Index    int     `json:"index"`
	Asked    string  `json:"asked"`
	Strategy string  `json:"strategy,omitempty"`
	StepNs   int64   `json:"step_ns,omitempty"`
	Samples  float64 `json:"samples_per_s,omitempty"`
	Peak     int64   `json:"peak_mem_bytes,omitempty"`
	Error    string  `json:"error,omitempty"`
}

func runSweep(w io.Writer, f sweepFlags) error {
	if err := checkSweepOutputs(f.out, f.plot); err != nil { // before the sweep
		return err
	}
	shard, shards, err := parseShard(f.shard)
	if err != nil {
		return err
	}
	if f.model, err = zoo.Resolve(f.model); err != nil { // a config.json: the shards record the zoo model it maps to
		return err
	}
	switch {
	case f.maxMB < 1:
		return fmt.Errorf("--max-mb must be ≥ 1, got %d", f.maxMB)
	case f.top < 0:
		return fmt.Errorf("--top must be ≥ 0 (0: all), got %d", f.top)
	case f.devices < 0:
		return fmt.Errorf("--devices must be ≥ 0 (0: all of the cluster's), got %d", f.devices)
	case f.maxTP < -1 || f.maxTP == 0:
		return fmt.Errorf("--max-tp must be -1 (one machine's devices) or ≥ 1, got %d", f.maxTP)
	}
	// The flags are checked by making the config of single; the sweep's
	// config is that on n devices.
	cfg, cluster, err := f.config(plans.Strategy{DP: 1, PP: 1, MB: 1, Sched: plans.OneFOneB})
	if err != nil {
		return err
	}
	n := f.devices
	if n == 0 {
		n = len(cluster.Devices)
	}
	limit, err := f.memoryCap()
	if err != nil {
		return err
	}
	if cfg.Devices, err = plans.DevicesFromCluster(cluster, n, f.oversubscribe); err != nil {
		if f.devices > 0 {
			return fmt.Errorf("--devices %d: %w", f.devices, err)
		}
		return err
	}
	cfg.Devices = capMemory(cfg.Devices, limit)
	// With placements, pipelines choose their devices among all of the
	// cluster's (plans.DevicesFor), which come after the first n.
	all, err := plans.DevicesFromCluster(cluster, max(n, len(cluster.Devices)), f.oversubscribe)
	if err != nil {
		return err
	}
	all = capMemory(all, limit)
	place, err := onOffAuto("--place", f.place, differ(all))
	if err != nil {
		return err
	}
	var pool []plans.Device
	if place {
		pool, cfg.Devices = all, all
	}
	uneven, err := onOffAuto("--uneven", f.uneven, differ(cfg.Devices))
	if err != nil {
		return err
	}
	var recompute []plans.Recompute
	if f.recompute {
		if recompute, err = recomputeModes(f.model); err != nil {
			return err
		}
	}
	maxTP := f.maxTP
	if maxTP < 0 {
		maxTP = 1
		if zoo.HasTP(f.model) {
			perHost := map[string]int{}
			for _, d := range cfg.Devices {
				perHost[d.Host]++
				maxTP = max(maxTP, perHost[d.Host])
			}
		}
	}
	layers, err := plans.Layers(f.model)
	if err != nil {
		return err
	}
	var buckets []units.Bytes
	var bucketBytes []string
	for _, s := range f.buckets {
		b, err := topology.ParseSize(strings.TrimSpace(s))
		if err != nil || b < 1 {
			return fmt.Errorf("--buckets %q: want gradient bucket sizes, as 1MiB,25MiB", s)
		}
		if slices.Contains(buckets, b) {
			return fmt.Errorf("--buckets %q: %v is given twice", strings.Join(f.buckets, ","), b)
		}
		buckets, bucketBytes = append(buckets, b), append(bucketBytes, strconv.FormatInt(int64(b), 10))
	}
	strategies, err := search.Strategies(f.batch, search.Space{Devices: n, MaxMB: f.maxMB, MaxTP: maxTP, Uneven: uneven, Recompute: recompute,
		SP: zoo.HasSP(f.model), Layers: layers, Zero: true, Buckets: buckets, Pool: pool})
	if err != nil {
		return err
	}
	model, calib, err := costModel(f.calib, cluster)
	if err != nil {
		return err
	}
	if err := checkSearchCalib(f.calib, calib, cfg.Devices, "the sweep's devices"); err != nil {
		return err
	}
	bar := lazyBar(fmt.Sprintf("sweeping %d strategies", len(strategies)))
	entries, err := search.Sweep(cfg, model, strategies, search.Options{Shard: shard, Shards: shards, Progress: bar.set,
		Workers: runtime.GOMAXPROCS(0)}) // the cost model is safe for concurrent use
	bar.finish()
	if err != nil {
		return err
	}
	file := sweepFile{Shard: shard, sweepSettings: sweepSettings{Model: f.model, DType: f.dtype, Cluster: f.cluster,
		Batch: f.batch, Optimizer: f.optimizer, LR: f.lr, Momentum: f.momentum, Seed: f.seed, Oversubscribe: f.oversubscribe,
		SharedTP: f.sharedTP, SharedDP: f.sharedDP, WeightDecay: f.effectiveWeightDecay(), Schedule: scheduleSetting(f.schedule),
		MaxMemory: int64(limit), Calib: f.calib, Devices: n, MaxMB: f.maxMB, MaxTP: maxTP, Uneven: uneven, Place: place, Recompute: f.recompute, Buckets: strings.Join(bucketBytes, ","), Strategies: len(strategies), Shards: shards}}
	for _, e := range entries {
		file.Entries = append(file.Entries, toSweepEntry(e, f.batch))
	}
	return finishSweep(w, &file, calib, sweepOutputs{top: f.top, out: f.out, plot: f.plot, json: f.json})
}

// checkSweepOutputs checks a sweep's -o and --plot paths.
func checkSweepOutputs(out, plot string) error {
	if err := cliargs.Output("-o", out); err != nil {
		return err
	}
	if plot == "" {
		return nil
	}
	if out != "" && filepath.Clean(out) == filepath.Clean(plot) {
		return fmt.Errorf("-o and --plot are both %s: the plan and the image want a file each", plot)
	}
	if err := checkPlotPath("--plot", plot); err != nil {
		return err
	}
	return cliargs.Output("--plot", plot)
}

// scheduleSetting is a sweep's record of --lr-schedule: "" for constant.
func scheduleSetting(s string) string {
	if strings.TrimSpace(s) == "constant" {
		return ""
	}
	return s
}

// onOffAuto reads a flag of on, off or auto; auto is def.
func onOffAuto(flag, v string, def bool) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "auto":
		return def, nil
	}
	return false, fmt.Errorf("%s %q: want on, off or auto", flag, v)
}

// differ reports whether devs are of more than one type.
func differ(devs []plans.Device) bool {
	for _, d := range devs {
		if d.Type != devs[0].Type {
			return true
		}
	}
	return false
}

// recomputeModes are the recompute modes a sweep tries for a model:
// selective where its attention keeps probabilities (elsewhere it drops
// nothing), and full.
func recomputeModes(model string) ([]plans.Recompute, error) {
	if err := zoo.Check(model); err != nil {
		return nil, err
	}
	if zoo.KeepsAttentionProbs(model) {
		return []plans.Recompute{plans.RecomputeSelective, plans.RecomputeFull}, nil
	}
	return []plans.Recompute{plans.RecomputeFull}, nil
}

// sweepOutputs are what a sweep, or a merge, prints and writes.
type sweepOutputs struct {
	top       int
	out, plot string // the best plan, the image of the front
	json      bool
}

// finishSweep prints a sweep's (or merged shards') ranked entries, as a
// table or JSON, with their memory–time front, writes the best plan and
// draws the front.
func finishSweep(w io.Writer, file *sweepFile, calib *cost.Calibration, o sweepOutputs) error {
	top, out, asJSON := o.top, o.out, o.json
	var best *plans.Plan
	feasible := len(file.Entries) > 0 && file.Entries[0].Error == ""
	if out != "" && !feasible {
		return fmt.Errorf("no strategy is feasible: no plan to write to %s", out)
	}
	if feasible && (out != "" || calib != nil) {
		p, err := file.compile(file.Entries[0].Strategy)
		if err != nil {
			return fmt.Errorf("recompiling the best strategy %s: %w", file.Entries[0].Strategy, err)
		}
		best = p
	}
	if out != "" {
		if err := writePlan(out, best); err != nil {
			return err
		}
	}
	// A calibration that has no fit of the best plan's kernels ranked it
	// by the catalog's efficiencies.
	if calib != nil && best != nil {
		note, err := uncalibratedNote(file.Calib, calib, best, "the best plan's")
		if err != nil {
			return err
		}
		fmt.Fprint(os.Stderr, note)
	}
	// The ranking is printed before the image is drawn, which fails
	// where nothing is feasible: the ranking says why.
	front := sweepFront(dropFoundAgain(file.Entries, file.Batch))
	if asJSON {
		file.Front = frontIndices(front)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(file); err != nil {
			return err
		}
		if o.plot != "" {
			return plotSweep(o.plot, file, front)
		}
		return nil
	}
	printSweep(w, file, top)
	printFront(w, front)
	if o.plot != "" {
		if err := plotSweep(o.plot, file, front); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s\n", o.plot)
	}
	if out != "" {
		fmt.Fprintf(w, "wrote %s (%s)\n", out, best.Strategy)
		if best.SharedTP || best.SharedDP {
			fmt.Fprintf(os.Stderr, "flowsim: note: %s lists one rank of each tensor-parallel group or one replica for all (--shared-tp, --shared-dp), as the sweep simulated it: flowrun refuses it; 'flowsim plan --strategy %s' without those flags compiles the plan to run\n", out, best.Strategy)
		}
	}
	return nil
}

func toSweepEntry(e search.Entry, batch int) sweepEntry {
	se := sweepEntry{Index: e.Index, Asked: e.Asked.String()}
	if e.Err != nil {
		se.Error = e.Err.Error()
		return se
	}
	se.Strategy = e.Strategy.String()
	se.StepNs = int64(e.Step)
	if e.Step > 0 {
		se.Samples = float64(batch) / e.Step.Seconds()
	}
	se.Peak = int64(e.Peak)
	return se
}

// printSweep prints the ranking as a table. A searched strategy (mb=auto,
// layers=auto) that found the plan of an enumerated one, the same step,
// memory and parallelism, is left out of it (not out of --json, which
// shards merge by).
func printSweep(w io.Writer, file *sweepFile, top int) {
	feasible := 0
	for _, e := range file.Entries {
		if e.Error == "" {
			feasible++
		}
	}
	entries := dropFoundAgain(file.Entries, file.Batch)
	dropped := len(file.Entries) - len(entries)
	of := ""
	if file.Shards > 1 {
		of = fmt.Sprintf(" (shard %d/%d of %d)", file.Shard, file.Shards, file.Strategies)
	}
	capped := ""
	if file.MaxMemory > 0 {
		capped = fmt.Sprintf(" (their memory capped by --max-memory at %v)", units.Bytes(file.MaxMemory))
	}
	fmt.Fprintf(w, "sweep: %s (%s), batch %d, %d device(s) of %s%s: %d strategies simulated%s, %d feasible\n",
		file.Model, file.DType, file.Batch, file.Devices, file.Cluster, capped, len(file.Entries), of, feasible)
	if dropped > 0 {
		fmt.Fprintf(w, "(not shown: %d found by mb=auto or layers=auto that repeat the plan of a strategy above them)\n", dropped)
	}
	shown := entries[:feasible-dropped]
	if top > 0 && len(shown) > top {
		shown = shown[:top]
	}
	width := nameWidth(shown)
	if feasible > 0 {
		fmt.Fprintf(w, "%5s  %-*s %10s %11s %12s\n", "rank", width, "strategy", "step ms", "samples/s", "peak memory")
	}
	for i, e := range entries[:feasible-dropped] {
		if top > 0 && i == top {
			fmt.Fprintf(w, "  … %d more (--top 0 shows all)\n", feasible-dropped-top)
			break
		}
		fmt.Fprintf(w, "%5d  %-*s %10.3f %11.0f %12v\n", i+1, width, shownName(e), float64(e.StepNs)/1e6, e.Samples, units.Bytes(e.Peak))
	}
	if rejected := entries[feasible-dropped:]; len(rejected) > 0 {
		fmt.Fprintf(w, "%d infeasible:\n", len(rejected))
		for i, e := range rejected {
			if top > 0 && i == top {
				fmt.Fprintf(w, "  … %d more\n", len(rejected)-top)
				break
			}
			fmt.Fprintf(w, "  %-40s %s\n", e.Asked, e.Error)
		}
	}
}

// dropFoundAgain returns the entries without the searched ones that have
// the step, memory, replicas, stages, micro-batches and schedule of an
// entry ranked before them: the same plan, found by the search.
func dropFoundAgain(entries []sweepEntry, batch int) []sweepEntry {
	type key struct {
		step, peak int64
		shape      string
	}
	seen := map[key]bool{}
	var out []sweepEntry
	for _, e := range entries {
		if e.Error == "" {
			st, err := plans.ParseStrategy(e.Strategy, batch)
			k := key{e.StepNs, e.Peak, fmt.Sprint(st.DP, st.PP, st.MB, st.Shares, st.Sched, st.Place)}
			if err == nil && seen[k] && strings.Contains(e.Asked, "=auto") {
				continue
			}
			seen[k] = true
		}
		out = append(out, e)
	}
	return out
}

// compile recompiles a strategy of the sweep the file records.
func (file *sweepFile) compile(strategy string) (*plans.Plan, error) {
	f := planFlags{model: file.Model, dtype: file.DType, cluster: file.Cluster, batch: file.Batch,
		optimizer: file.Optimizer, lr: file.LR, momentum: file.Momentum, seed: file.Seed, oversubscribe: file.Oversubscribe,
		sharedTP: file.SharedTP, sharedDP: file.SharedDP, weightDecay: file.WeightDecay, schedule: cmp.Or(file.Schedule, "constant")}
	if file.MaxMemory > 0 {
		f.maxMemory = strconv.FormatInt(file.MaxMemory, 10) + "B"
	}
	st, err := plans.ParseStrategy(strategy, file.Batch)
	if err != nil {
		return nil, err
	}
	cfg, _, err := f.config(st)
	if err != nil {
		return nil, err
	}
	return plans.CompileSharing(cfg)
}

// parseShard parses "i/N"; "" is the whole sweep, 0/1.
func parseShard(s string) (shard, shards int, err error) {
	if s == "" {
		return 0, 1, nil
	}
	if _, err := fmt.Sscanf(s, "%d/%d", &shard, &shards); err != nil || shards < 1 || shard < 0 || shard >= shards ||
		s != fmt.Sprintf("%d/%d", shard, shards) {
		return 0, 0, fmt.Errorf("--shard %q: want i/N with 0 ≤ i < N", s)
	}
	return shard, shards, nil
}

type mergeFlags struct {
	top       int
	out, plot string
	json      bool
}

func newSweepMergeCmd() *cobra.Command {
	var f mergeFlags
	cmd := &cobra.Command{
		Use:   "merge SHARD.json...",
		Short: "Merge the --json outputs of a sweep's shards into one ranking",
		Long: `Read the --json outputs of 'flowsim sweep --shard i/N', check that they are
the N shards of one sweep (the same model, cluster, batch and settings; each
shard once), and print the ranking the whole sweep would print; -o
recompiles the best strategy's plan.`,
		Example: `  flowsim sweep merge s0.json s1.json s2.json s3.json -o best.json`,
		Args:    cliargs.AtLeastOne("the --json outputs of the sweep's shards"),
		RunE:    func(cmd *cobra.Command, args []string) error { return runMerge(cmd.OutOrStdout(), f, args) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.top, "top", 10, "strategies shown (0: all)")
	fl.StringVarP(&f.out, "output", "o", "", "write the best strategy's plan here")
	fl.BoolVar(&f.json, "json", false, "print the merged sweep as one JSON object")
	fl.StringVar(&f.plot, "plot", "", "draw every feasible strategy's peak memory against its step time, with the memory–time front, into this image (.svg, .png, .pdf …)")
	return cmd
}

func runMerge(w io.Writer, f mergeFlags, paths []string) error {
	if err := checkSweepOutputs(f.out, f.plot); err != nil {
		return err
	}
	if f.top < 0 {
		return fmt.Errorf("--top must be ≥ 0 (0: all), got %d", f.top)
	}
	var merged *sweepFile
	seen := map[int]string{}
	for _, path := range paths {
		file, err := readSweep(path)
		if err != nil {
			return err
		}
		// Another sweep's shard (or another division of this sweep) is not
		// this sweep's shard again, even where its number is taken.
		if merged != nil && merged.sweepSettings != file.sweepSettings {
			return fmt.Errorf("%s (shard %d/%d) is a shard of another sweep than %s (shard %d/%d): %s",
				path, file.Shard, file.Shards, paths[0], merged.Shard, merged.Shards, settingsDiff(merged.sweepSettings, file.sweepSettings))
		}
		if prev, ok := seen[file.Shard]; ok {
			return fmt.Errorf("%s: shard %d/%d again (also in %s)", path, file.Shard, file.Shards, prev)
		}
		seen[file.Shard] = path
		if merged == nil {
			merged = file
			continue
		}
		merged.Entries = append(merged.Entries, file.Entries...)
	}
	for i := range merged.Shards {
		if _, ok := seen[i]; !ok {
			return fmt.Errorf("shard %d/%d is missing", i, merged.Shards)
		}
	}
	merged.Shard, merged.Shards = 0, 1
	// Rank as search.Sweep does: by the figures and the place in the
	// enumeration, which the entries keep.
	byIndex := make(map[int]sweepEntry, len(merged.Entries))
	entries := make([]search.Entry, len(merged.Entries))
	for i, se := range merged.Entries {
		if _, dup := byIndex[se.Index]; dup || se.Index < 0 || se.Index >= merged.Strategies {
			return fmt.Errorf("entry %d (%s): index out of range or repeated", se.Index, se.Asked)
		}
		byIndex[se.Index] = se
		entries[i] = search.Entry{Index: se.Index, Step: time.Duration(se.StepNs), Peak: units.Bytes(se.Peak)}
		if se.Error != "" {
			entries[i].Err = errors.New(se.Error)
		}
	}
	search.Rank(entries)
	for i, e := range entries {
		merged.Entries[i] = byIndex[e.Index]
	}
	// Shards merged elsewhere may name a calibration file this machine
	// lacks: then no note of what it does not fit.
	var calib *cost.Calibration
	if merged.Calib != "" {
		calib, _ = cost.LoadCalibration(merged.Calib)
	}
	return finishSweep(w, merged, calib, sweepOutputs(f))
}

func readSweep(path string) (*sweepFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file sweepFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("%s: not the --json output of flowsim sweep: %w", path, jsonerr.Locate(b, err))
	}
	if file.Shards < 1 || file.Shard < 0 || file.Shard >= file.Shards || file.Batch < 1 || len(file.Entries) > file.Strategies {
		return nil, fmt.Errorf("%s: shard %d/%d of %d strategies, batch %d, %d entries: inconsistent",
			path, file.Shard, file.Shards, file.Strategies, file.Batch, len(file.Entries))
	}
	// The shard's entries are its strategies, every Shards-th from the
	// Shard-th, each once.
	want := (file.Strategies - file.Shard + file.Shards - 1) / file.Shards
	seen := make(map[int]bool, len(file.Entries))
	for i, e := range file.Entries {
		if e.Index < 0 || e.Index >= file.Strategies || e.Index%file.Shards != file.Shard || seen[e.Index] {
			return nil, fmt.Errorf("%s: entries[%d] (%s): index %d is not one of shard %d/%d's strategies of %d, or repeats one",
				path, i, e.Asked, e.Index, file.Shard, file.Shards, file.Strategies)
		}
		seen[e.Index] = true
	}
	if len(file.Entries) != want {
		return nil, fmt.Errorf("%s: %d entries, shard %d/%d of %d strategies has %d (a file cut short or edited?)",
			path, len(file.Entries), file.Shard, file.Shards, file.Strategies, want)
	}
	// What merge ranks and recompiles: the model, and each priced entry's
	// strategy and figures.
	if _, err := zoo.InputShape(file.Model); err != nil {
		return nil, fmt.Errorf("%s: model: %w", path, err)
	}
	for i, e := range file.Entries {
		if e.Error != "" {
			continue
		}
		if _, err := plans.ParseStrategy(e.Strategy, file.Batch); err != nil {
			return nil, fmt.Errorf("%s: entries[%d] (%s): strategy: %w", path, i, e.Asked, err)
		}
		if e.StepNs <= 0 || e.Peak < 0 || !(e.Samples > 0) || math.IsInf(e.Samples, 0) {
			return nil, fmt.Errorf("%s: entries[%d] (%s): step %d ns, %g samples/s, peak %d bytes: want a positive step and rate and a peak ≥ 0",
				path, i, e.Asked, e.StepNs, e.Samples, e.Peak)
		}
	}
	return &file, nil
}

// settingsDiff names the settings in which two shards differ, with both
// values, by their JSON keys.
func settingsDiff(a, b sweepSettings) string {
	va, vb, ty := reflect.ValueOf(a), reflect.ValueOf(b), reflect.TypeFor[sweepSettings]()
	var diff []string
	for i := range ty.NumField() {
		if x, y := va.Field(i).Interface(), vb.Field(i).Interface(); x != y {
			key, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
			format := "%s %v, not %v"
			if ty.Field(i).Type.Kind() == reflect.String { // "" shows
				format = "%s %q, not %q"
			}
			diff = append(diff, fmt.Sprintf(format, key, y, x))
		}
	}
	return strings.Join(diff, "; ")
}
