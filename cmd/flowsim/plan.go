package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cliargs"
	"github.com/flowkit/flowkit/internal/progress"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/plans/search"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/flowkit/flowkit/units"
)

type planFlags struct {
	model, cluster, strategy, optimizer, out string
	dtype, calib, schedule                   string
	maxMemory                                string // --max-memory, as given
	batch                                    int
	lr, momentum, weightDecay                float64
	seed                                     uint64
	oversubscribe, sharedTP, sharedDP        bool
	json                                     bool
	flags                                    *pflag.FlagSet // where register put them, to tell defaults from choices
}

func newPlanCmd() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Compile a model, a cluster and a strategy into a plan file",
		Long: `Compile one training iteration of a zoo model into a static plan: every op
placed on a device, transfers, gradient accumulation and all-reduces
inserted, every stream's order fixed by the schedule, every register given
slots and an offset in its device's arena. The plan is rejected if it can
deadlock (register slots too few for the schedule) or overflows a device's
memory, with the tasks or the device named.

Strategies: single | dp=D | tp=T[,sp=on] | pp=P[,vpp=V][,mb=M|mbs=S][,sched=1f1b|gpipe][,place=T0:…] and
their combinations (dp=2,tp=2,pp=2). tp=T is tensor parallelism after
Megatron-LM, for the models with such a layout (mlp, mlp3x4096,
gpt2s-blocks, the GPTs): each stage of each replica runs on T devices, which split its
layers' weight matrices (column- then row-parallel pairs; attention by heads)
and sum their partial results, an all-reduce per pair going forward and
another going backward; device (replica·pp + stage)·tp + rank. sp=on adds
sequence parallelism to tp (the GPTs): the activations between those pairs
are split along the sequence, each all-reduce becoming a reduce-scatter and
an all-gather. vpp=V interleaves pipeline stages (Megatron-LM's interleaved
1F1B): the model is cut into pp·V stages, device rank s running stages s,
s+pp, …, which shrinks the bubble by V for V times the transfers; mb must
be a multiple of pp. zero=1|2|3 (ZeRO, with dp ≥ 2) splits over
the replicas the optimizer state (1; the gradient is reduce-scattered and
the updated weight all-gathered), also the gradients (2; each micro-batch's
gradient reduce-scattered as it is produced) and also the weights (3;
all-gathered before each micro-batch's forward and backward use); stages 2
and 3 run these collectives in rounds, as many as a replica's most
micro-batches, so with uneven ones (mb=7:1, mb=auto) a replica with fewer
joins the last rounds without computing; weights the replicas do not divide
are all-reduced whole. With tp, a device splits its rank's parts with the
devices of the same stage and rank in the other replicas. zero=3,prefetch=N
gathers each layer's weights N layers ahead of their use, on a stream of
their own beside the compute (FSDP's prefetch; N=1 is FSDP's), with at most
N+1 layers' weights whole at once: faster, for that memory. recompute=full recomputes each layer's forward
pass before its backward pass instead of keeping its activations, and
recompute=selective only its attention; slots=N caps every register's slot
count. bucket=SIZE (with dp ≥ 2) all-reduces the gradients in buckets of up
to SIZE (25MiB, as PyTorch DDP's default), as they become ready: each
replica copies a bucket's gradients into one flat buffer, all-reduces it
once and copies the result out for the updates, which pays one collective's
latency for many small gradients (under zero=1 the gradients it
reduce-scatters fill buckets too); without it each gradient is reduced
alone.
Work over unequal devices may be split unevenly. Data parallelism: mb=3:1
gives each replica's micro-batches (the micro-batch size is the batch over
their sum). Pipelines: layers=3:1 gives each stage's layers (a transformer
block, or, in the other models, each op reading a weight matrix or filter;
by default stages balance forward FLOPs). mb=auto (with mbs=S; or mb=auto:N for N micro-batches) or
layers=auto lets the simulator
choose: every split of the batch's micro-batches of S samples over the
replicas (replicas on the same device types sharing equally), or every cut
of the layers into stages, each getting at least one, is compiled and
simulated with the cost model (--calib, else the catalog's efficiencies),
and the fastest is written; over 128 candidates, a local search from the
even split. The candidates are printed.
Placement: by default the plan takes the cluster's first devices, in
order (device (replica·pp + stage)·tp + rank). place=T0:T1:… (one device
type per stage) places each stage on its type instead, each replica's
stage taking the next devices of that type in the cluster's order: on
mixed-a100-v100, dp=2,pp=2,place=v100:a100 runs each replica's first stage
on V100s and its second on A100s. A type may be named by a part of its
name only it contains (a100, v100, cpu); place=cpu with no pipeline runs a
single-device plan on h200-host's CPU.
On a CPU cluster with fewer devices than the strategy needs, the cores are
divided among devices (local with 2 cores: dp=2 gets two 1-core devices).
devices=A+B+… names every device instead, in the plan's order.

A strategy file (--strategy FILE.yaml) says the same in YAML, with the
grammar's keys, lists where the grammar joins counts or names, and the
devices stage by stage:

  dp: 2
  pp: 2
  mb: [3, 1]         # replica 0 runs 3 micro-batches, replica 1 one
  stages:            # per stage: layers, place (a type) or devices
    - layers: 3
      devices: [a100-0/gpu0, a100-1/gpu0]   # replica 0's, replica 1's
    - layers: 1
      devices: [v100-0/gpu0, v100-1/gpu0]

A stage's devices are its dp·tp places, replica by replica (tensor-parallel
ranks within a replica). The plan records the strategy as a string.

A model name may carry size options (see graph/zoo), e.g.
gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16; the transformers take
attention=flash (each softmax row's log-normalizer kept for the backward
pass instead of its probabilities: memory linear in seq). --dtype sets the
dtype of every float tensor of the model; memory is planned at its size.`,
		Example: `  flowsim plan --model mnist-cnn --cluster local --strategy pp=2,mb=4,sched=1f1b --batch 64 -o plan.json
  flowsim plan --model gpt2s-blocks --dtype bf16 --cluster dgx-a100 --strategy dp=2,tp=4,mb=2 --batch 16 -o plan.json
  flowsim plan --model mnist-cnn --cluster h200-host --strategy dp=2,mbs=8,mb=auto --batch 64 -o plan.json
  flowsim plan --model mnist-cnn --cluster h200-host --strategy pp=2,mb=2,layers=auto -o plan.json
  flowsim plan --model gpt2s-blocks:layers=8 --cluster mixed-a100-v100 --strategy dp=4,tp=4,pp=2,mb=4,place=v100:a100,layers=auto --batch 64
  flowsim plan --model gpt2s-blocks --dtype bf16 --batch 8 --cluster dgx-h100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlan(cmd.OutOrStdout(), f) },
	}
	fl := cmd.Flags()
	f.register(fl, "the candidates of mb=auto or layers=auto")
	fl.StringVar(&f.strategy, "strategy", "single", "parallel strategy: the grammar above, or a strategy file (*.yaml)")
	fl.StringVarP(&f.out, "output", "o", "", "write the plan here (default: a summary only)")
	fl.BoolVar(&f.json, "json", false, "print the summary as one JSON object")
	return cmd
}

func runPlan(w io.Writer, f planFlags) error {
	if err := cliargs.Output("-o", f.out); err != nil {
		return err
	}
	var err error
	if f.model, err = zoo.Resolve(f.model); err != nil { // a config.json: the plan names the zoo model it maps to
		return err
	}
	if strings.TrimSpace(f.strategy) == "" { // an unset variable in a script, more likely than a wish for single
		return errors.New("--strategy is empty: give single, a strategy such as dp=2,pp=2, or a strategy file")
	}
	st, err := plans.LoadStrategy(f.strategy, f.batch)
	if err != nil {
		if _, merr := zoo.InputShape(f.model); merr != nil { // an unknown model or bad size options, said first
			return merr
		}
		return err
	}
	cfg, cluster, err := f.config(st)
	if err != nil {
		return err
	}
	var found *search.Result
	var p *plans.Plan
	if f.calib != "" && !st.AutoShares && !st.AutoLayers {
		return fmt.Errorf("--calib %s prices the candidates of mb=auto or layers=auto, which strategy %s does not search; 'flowsim simulate --calib' prices a plan", f.calib, f.strategy)
	}
	if st.AutoShares || st.AutoLayers {
		model, calib, err := costModel(f.calib, cluster)
		if err != nil {
			return err
		}
		if err := checkSearchCalib(f.calib, calib, cfg.Devices, "the search's devices"); err != nil {
			return err
		}
		bar := lazyBar("simulating candidates")
		found, err = search.Resolve(cfg, model, search.Options{Progress: bar.set})
		bar.finish()
		if err != nil {
			return capHint(sharedHint(err, cfg), f.maxMemory)
		}
		p = found.Plan
		if calib != nil {
			note, err := uncalibratedNote(f.calib, calib, p, "the chosen plan's")
			if err != nil {
				return err
			}
			fmt.Fprint(os.Stderr, note)
		}
	} else if p, err = plans.Compile(cfg); err != nil {
		return capHint(sharedHint(err, cfg), f.maxMemory)
	}
	if f.out != "" {
		if err := writePlan(f.out, p); err != nil {
			return err
		}
	}
	if f.json {
		return planJSON(w, p, f.out, found)
	}
	if found != nil {
		printSearch(w, found)
	}
	summarizePlan(w, p)
	if f.out != "" {
		fmt.Fprintf(w, "wrote %s\n", f.out)
	}
	return nil
}

// register adds the flags that say what to compile, and --calib, which
// prices what.
func (f *planFlags) register(fl *pflag.FlagSet, what string) {
	f.flags = fl
	fl.StringVar(&f.model, "model", "mnist-cnn", "model: "+strings.Join(zoo.Names(), ", ")+" (with size options: name:key=value,…), or a Hugging Face config.json of a llama, mistral, gpt2 or bert model (path/config.json[:key=value,…])")
	fl.StringVar(&f.dtype, "dtype", "f32", "dtype of the model's float tensors: f32 or bf16")
	fl.StringVar(&f.cluster, "cluster", "local", "cluster: a preset (see 'flowsim topo show --help') or a YAML file")
	fl.IntVar(&f.batch, "batch", 64, "global batch size")
	fl.StringVar(&f.optimizer, "optimizer", "sgd", "optimizer: sgd, adam or adamw (Adam with decoupled weight decay, --weight-decay 0.01 unless given)")
	fl.Float64Var(&f.lr, "lr", 0.01, "learning rate")
	fl.Float64Var(&f.momentum, "momentum", 0.9, "SGD momentum")
	fl.Float64Var(&f.weightDecay, "weight-decay", 0, "weight decay: sgd and adam add it to the gradient (L2), as PyTorch's; adamw decouples it (default 0.01 for adamw)")
	fl.StringVar(&f.schedule, "lr-schedule", "constant", "learning-rate schedule the plan's updates follow: constant, cosine or linear, with options warmup=N, steps=N (where a decay ends) and min=R (a fraction of --lr), e.g. cosine:warmup=100,steps=2000,min=0.1")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the initial weights")
	fl.BoolVar(&f.oversubscribe, "oversubscribe", false, "allow more CPU devices than cores")
	fl.BoolVar(&f.sharedTP, "shared-tp", false, "compile tensor-parallel rank 0 only, which every rank runs alike: a plan tp times smaller for the simulator (flowrun refuses it)")
	fl.BoolVar(&f.sharedDP, "shared-dp", false, "compile data-parallel replica 0 only, which every replica runs alike (even micro-batches, same devices): a plan dp times smaller for the simulator (flowrun refuses it)")
	fl.StringVar(&f.calib, "calib", "", "calibration file pricing "+what+" (from 'flowrun calibrate'; default: the catalog's efficiencies)")
	fl.StringVar(&f.maxMemory, "max-memory", "", "plan for at most this much memory on each device, as 70GiB (room for a framework's context and fragmentation; default: each device's own)")
}

// effectiveWeightDecay is --weight-decay, or adamw's default where the
// flag was not given on the command line (flags read from a sweep's file,
// with no flag set, are taken as they are).
func (f planFlags) effectiveWeightDecay() float64 {
	if f.optimizer == "adamw" && f.flags != nil && !f.flags.Changed("weight-decay") {
		return adamWDecay
	}
	return f.weightDecay
}

// memoryCap is --max-memory in bytes: 0 if not given.
func (f planFlags) memoryCap() (units.Bytes, error) {
	if f.maxMemory == "" {
		return 0, nil
	}
	b, err := topology.ParseSize(strings.TrimSpace(f.maxMemory))
	if err != nil || b < 1 {
		return 0, fmt.Errorf("--max-memory %q: want a size per device, as 70GiB", f.maxMemory)
	}
	return b, nil
}

// capMemory returns devs with their memory at most limit (0: as they are):
// the compiler then refuses a plan that needs more, naming the limit.
func capMemory(devs []plans.Device, limit units.Bytes) []plans.Device {
	if limit > 0 {
		for i := range devs {
			if devs[i].Memory == 0 || devs[i].Memory > limit { // 0: not known, no check
				devs[i].Memory = limit
			}
		}
	}
	return devs
}

// checkSearchCalib refuses a calibration (read from path) that holds none
// of a search's devices devs, as simulate refuses one that holds none of
// a plan's, and notes those it lacks.
func checkSearchCalib(path string, calib *cost.Calibration, devs []plans.Device, whose string) error {
	lacking, err := sim.CheckCalibrationOf(devs, whose, calib)
	if err != nil {
		return fmt.Errorf("--calib %s: %w", path, err)
	}
	if len(lacking) > 0 {
		fmt.Fprintf(os.Stderr, "flowsim: note: --calib %s holds no calibration of %s: priced from the catalog's efficiencies\n", path, strings.Join(lacking, ", "))
	}
	return nil
}

// adamWDecay is AdamW's weight decay unless --weight-decay says
// otherwise: PyTorch's default.
const adamWDecay = 0.01

// config checks the flags and returns the compile configuration of
// strategy st on the cluster, and the cluster.
func (f planFlags) config(st plans.Strategy) (plans.Config, *topology.Cluster, error) {
	if _, err := zoo.InputShape(f.model); err != nil { // an unknown model or bad size options, said first
		return plans.Config{}, nil, err
	}
	dtype, err := zoo.ParseDType(f.dtype)
	if err != nil {
		return plans.Config{}, nil, fmt.Errorf("--dtype: %w", err)
	}
	sched, err := graph.ParseSchedule(f.schedule, 0)
	if err != nil {
		return plans.Config{}, nil, fmt.Errorf("--lr-schedule: %w", err)
	}
	opt, err := graph.NewOptimizer(graph.OptimizerSpec{Name: f.optimizer, LR: f.lr, Momentum: f.momentum, WeightDecay: f.effectiveWeightDecay(), Schedule: sched})
	if err != nil {
		return plans.Config{}, nil, err
	}
	cluster, err := topology.Resolve(f.cluster)
	if err != nil {
		return plans.Config{}, nil, err
	}
	limit, err := f.memoryCap()
	if err != nil {
		return plans.Config{}, nil, err
	}
	devs, err := plans.DevicesFor(cluster, st, f.oversubscribe)
	if errors.Is(err, plans.ErrFewerCores) {
		err = fmt.Errorf("%w (--oversubscribe runs more devices than cores)", err)
	}
	if err != nil {
		return plans.Config{}, nil, err
	}
	devs = capMemory(devs, limit)
	return plans.Config{Model: f.model, Batch: f.batch, Strategy: st, Optimizer: opt,
		Seed: f.seed, DType: dtype, Cluster: cluster.Name, Devices: devs, SharedTP: f.sharedTP, SharedDP: f.sharedDP}, cluster, nil
}

// costModel prices tasks for searches: the calibration file if given,
// else the catalog's efficiencies, and the cluster's routes. A calibration
// must hold one of the cluster's device types (at some core count: a
// search may divide a CPU's cores), else it would price nothing. It
// returns the calibration too (nil without one).
func costModel(calibPath string, cluster *topology.Cluster) (sim.CostModel, *cost.Calibration, error) {
	var calib *cost.Calibration
	if calibPath != "" {
		var err error
		if calib, err = cost.LoadCalibration(calibPath); err != nil {
			return sim.CostModel{}, nil, fmt.Errorf("--calib: %w", err)
		}
		var types, held []string
		for _, d := range cluster.Devices {
			if !slices.Contains(types, d.Spec.Type) {
				types = append(types, d.Spec.Type)
			}
		}
		for key := range calib.Devices {
			if typ, _, _ := strings.Cut(key, "/"); slices.Contains(types, typ) {
				held = nil
				break
			}
			held = append(held, key)
		}
		if held != nil || len(calib.Devices) == 0 {
			slices.Sort(held)
			return sim.CostModel{}, nil, fmt.Errorf("--calib %s holds none of cluster %s's device types (%s; it holds %s): it would price nothing",
				calibPath, cluster.Name, strings.Join(types, ", "), cmp.Or(strings.Join(held, ", "), "nothing"))
		}
	}
	return sim.CostModel{Compute: cost.NewComputeModel(calib), Comm: cost.NewComm(cluster)}, calib, nil
}

// bar is a progress bar made on the first report, when the total is known.
type bar struct {
	desc string
	b    *progress.Bar
}

func lazyBar(desc string) *bar { return &bar{desc: desc} }

func (b *bar) set(done, total int) {
	if b.b == nil {
		b.b = progress.New(total, b.desc)
	}
	b.b.Set(done)
}

func (b *bar) finish() {
	if b.b != nil {
		b.b.Finish()
	}
}

func writePlan(path string, p *plans.Plan) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := plans.Encode(file, p); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// printSearch shows the candidates of mb=auto or layers=auto that were
// simulated, fastest first: for mb=auto per replica, or for many replicas
// per group of equal devices.
func printSearch(w io.Writer, res *search.Result) {
	how := "all of them"
	if !res.Exhaustive {
		how = "a local search from the even split"
	}
	fmt.Fprintf(w, "%s=auto: %d candidate(s) simulated (%s)", res.Key, len(res.Candidates), how)
	dp := 0
	if res.Key == "mb" {
		var groups []string
		for _, g := range res.Groups {
			groups = append(groups, fmt.Sprintf("%s ×%d", g.Devices, len(g.Replicas)))
			dp += len(g.Replicas)
		}
		fmt.Fprintf(w, "; replicas by device: %s", strings.Join(groups, ", "))
	}
	fmt.Fprintln(w)
	for i, c := range res.Candidates {
		if i == 8 && len(res.Candidates) > 9 {
			fmt.Fprintf(w, "  … %d more\n", len(res.Candidates)-i)
			break
		}
		mark := " "
		if i == 0 {
			mark = "*"
		}
		point := res.Key + "=" + plans.FormatCounts(c.Counts)
		switch {
		case res.Key == "mb" && dp > 8:
			point = "mb by device " + plans.FormatCounts(c.Counts)
		case res.Key == "mb":
			point = "mb=" + plans.FormatCounts(shares(c.Strategy))
		}
		if c.Err != nil {
			fmt.Fprintf(w, "  %s %-16s rejected: %v\n", mark, point, c.Err)
			continue
		}
		fmt.Fprintf(w, "  %s %-16s step %9.3f ms  (%.2f× the fastest)\n", mark, point,
			float64(c.Step)/1e6, float64(c.Step)/float64(res.Best().Step))
	}
}

// shares are a strategy's micro-batches per replica.
func shares(st plans.Strategy) []int {
	s := make([]int, st.DP)
	for r := range s {
		s[r] = st.Micros(r)
	}
	return s
}

func planJSON(w io.Writer, p *plans.Plan, path string, found *search.Result) error {
	edges, _ := p.Deps()
	peak := make(map[string]int64, len(p.Memory))
	for _, m := range p.Memory {
		peak[p.Devices[m.Device].Name] = int64(m.Peak)
	}
	out := map[string]any{
		"plan": path, "model": p.Model, "dtype": p.DType().String(), "strategy": p.Strategy, "batch": p.Batch, "micro_batch": p.MicroBatch,
		"micro_batches": p.MB, "replica_micro_batches": p.Shares, "devices": len(p.Devices), "tasks": len(p.Tasks), "firings": len(p.Firings),
		"registers": len(p.Registers), "streams": len(p.Streams), "edges": len(edges), "peak_mem_bytes": peak,
	}
	if found != nil {
		var cands []map[string]any
		for _, c := range found.Candidates {
			m := map[string]any{"strategy": c.Strategy.String(), "counts": c.Counts}
			if c.Err != nil {
				m["error"] = c.Err.Error()
			} else {
				m["step_time_s"] = c.Step.Seconds()
			}
			cands = append(cands, m)
		}
		out["search"] = map[string]any{"key": found.Key, "exhaustive": found.Exhaustive, "groups": found.Groups, "candidates": cands}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func summarizePlan(w io.Writer, p *plans.Plan) {
	edges, _ := p.Deps()
	split := fmt.Sprintf("%d micro-batch(es) of %d", p.MB, p.MicroBatch)
	if p.Shares != nil {
		split = fmt.Sprintf("%d micro-batches of %d, %s per replica", p.TotalMicros(), p.MicroBatch, plans.FormatCounts(p.Shares))
	}
	fmt.Fprintf(w, "plan: %s (%s), %s, batch %d (%s), %s on %s\n",
		p.Model, p.DType(), p.Strategy, p.Batch, split, p.Optimizer, p.Cluster)
	fmt.Fprintf(w, "  %d tasks, %d firings per iteration, %d registers, %d streams, %d dependency edges\n",
		len(p.Tasks), len(p.Firings), len(p.Registers), len(p.Streams), len(edges))
	rows := make([]trace.Row, len(p.Memory))
	for i, m := range p.Memory {
		d := p.Devices[m.Device]
		rows[i] = trace.Row{Device: d.Name, Cells: fmt.Sprintf("%-4s %d worker(s)  peak memory %v (%v persistent; %v without reuse)",
			d.Type, d.Workers, m.Peak, m.Persistent, m.Unshared)}
	}
	for _, r := range trace.Alike(rows) {
		fmt.Fprintf(w, "  %-14s %s\n", r.Device, r.Cells)
	}
}

// capHint says, of an out-of-memory error under --max-memory, that the
// capacity it names is the cap.
func capHint(err error, maxMemory string) error {
	if maxMemory == "" || !errors.Is(err, plans.ErrOutOfMemory) {
		return err
	}
	return fmt.Errorf("%w (each device's memory capped by --max-memory %s)", err, maxMemory)
}

// sharedHint adds to a plan too large to compile the flags that would
// make it smaller, where they apply and are not given.
func sharedHint(err error, cfg plans.Config) error {
	var fe *plans.FiringsError
	if !errors.As(err, &fe) {
		return err
	}
	var flags []string
	if cfg.Strategy.TP > 1 && !cfg.SharedTP {
		flags = append(flags, fmt.Sprintf("--shared-tp (one rank for each tensor-parallel group: %d× fewer)", cfg.Strategy.TP))
	}
	if cfg.Strategy.DP > 1 && !cfg.SharedDP && cfg.Strategy.Shares == nil && !cfg.Strategy.AutoShares {
		flags = append(flags, fmt.Sprintf("--shared-dp (one replica for all: %d× fewer)", cfg.Strategy.DP))
	}
	if len(flags) == 0 {
		return err
	}
	return fmt.Errorf("%w; for the simulator, %s", err, strings.Join(flags, " and "))
}
