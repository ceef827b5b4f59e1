package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
)

// TrainConfig describes a training run.
type TrainConfig struct {
	Model     string
	Epochs    int
	Batch     int
	Optimizer graph.Optimizer
	// Seed seeds the weights, the shuffling and dropout.
	Seed uint64
	// Workers is the CPU device's worker count (≤ 0: one per core).
	Workers int
	// EvalBatch is the batch size of evaluation (default 1000).
	EvalBatch int
	// MaxSteps stops training early after this many steps (0: no limit).
	MaxSteps int
	// DType is the dtype of the model's float tensors (zero: f32). The CPU
	// computes every float dtype in f32, so it changes no result here;
	// evaluation builds the f32 graph.
	DType graph.DType
	// Resume, if set, starts from a checkpoint of the same model (its
	// weights, optimizer state and steps) instead of the seed's weights:
	// the run goes on as the run that wrote it would have.
	Resume *Checkpoint
	// SaveEvery > 0 calls Save with the weights and the steps run (a
	// resumed run's included) every SaveEvery steps of this run, but not
	// after the last: the result has those.
	SaveEvery int
	Save      func(step int, w *Store) error
	// Stop, once closed, ends the run after the step in flight: Save (if
	// set) gets the weights of the steps done, and Train returns
	// ErrStopped.
	Stop <-chan struct{}
}

// Loop says how long a training loop through a plan runs, what it
// reports, and how it saves as it goes (see TrainConfig for the fields
// of the same names).
type Loop struct {
	Epochs   int
	MaxSteps int // > 0: stop after this many steps
	Progress func(StepStats)
	// Progress is reported step by step by a PlanRunner; by other
	// executors, once a Run call (at the end, or every SaveEvery steps).
	SaveEvery int
	Save      func(step int, w *Store) error
	// Stop, once closed, ends the run at a step boundary and saves, as
	// TrainConfig.Stop does. A PlanRunner, or a Stopper (rank 0 of a
	// multi-process run), stops after the steps it has begun; other
	// executors after the Run call in flight, which is SaveEvery steps
	// long if that is set, else the whole run.
	Stop <-chan struct{}
}

// StepStats is reported after every training step.
type StepStats struct {
	Step, Steps int // steps done, steps planned
	Epoch       int
	Loss        float32
	StepTime    time.Duration
}

// TrainResult summarizes a training run.
type TrainResult struct {
	Model        string
	Optimizer    string
	Epochs       int
	Steps        int
	Batch        int
	FinalLoss    float64 // mean training loss over the last epoch's steps
	TestAccuracy float64 // classifiers
	TestLoss     float64 // mean over the test samples; a language model's over its bytes, in nats
	TestBits     float64 // language models: TestLoss in bits a byte
	StepTimes    []time.Duration
	TrainTime    time.Duration // wall time of the training loop
	// Weights holds the trained weights and optimizer state (replica 0's,
	// whole), for a checkpoint; Step is the steps they have taken, a
	// resumed run's included.
	Weights *Store `json:"-"`
	Step    int    `json:"-"`
}

// StepMedian is the median step time.
func (r *TrainResult) StepMedian() time.Duration {
	if len(r.StepTimes) == 0 {
		return 0
	}
	s := slices.Clone(r.StepTimes)
	slices.Sort(s)
	return s[len(s)/2]
}

// SamplesPerSecond is the training throughput over the whole loop.
func (r *TrainResult) SamplesPerSecond() float64 {
	if r.TrainTime <= 0 {
		return 0
	}
	return float64(r.Steps*r.Batch) / r.TrainTime.Seconds()
}

// ErrDiverged is returned when the training loss stops being finite.
var ErrDiverged = errors.New("runtime: training diverged")

// ErrStopped is returned by a training run that its Stop channel ended
// early.
var ErrStopped = errors.New("runtime: training stopped")

// closed says whether channel c is closed (never, for nil).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// stopped ends a run stopped after done of its steps steps, its weights
// w those after step step (a resumed run's steps included): it saves them
// unless they are already saved (saved is the step of the last save, or
// where the run started) and returns ErrStopped.
func stopped(save func(int, *Store) error, saved, step int, w *Store, done, steps int) error {
	err := fmt.Errorf("%w after %d of %d steps", ErrStopped, done, steps)
	if save == nil || step == saved {
		return err
	}
	return errors.Join(err, save(step, w))
}

// Train trains cfg.Model on train and evaluates it on test. progress, if
// not nil, is called after every step.
func Train(ctx context.Context, cfg TrainConfig, train, test *data.Dataset, progress func(StepStats)) (*TrainResult, error) {
	if cfg.Epochs < 1 {
		return nil, fmt.Errorf("runtime: epochs must be ≥ 1, got %d", cfg.Epochs)
	}
	if cfg.Batch < 1 || cfg.Batch > train.N {
		return nil, fmt.Errorf("runtime: batch must be between 1 and the %d training samples, got %d", train.N, cfg.Batch)
	}
	if cfg.Optimizer == nil {
		return nil, errors.New("runtime: no optimizer")
	}
	if err := checkInput(cfg.Model, train); err != nil {
		return nil, err
	}
	m, err := zoo.Build(cfg.Model, zoo.Config{Batch: cfg.Batch, Train: true, Seed: cfg.Seed, DType: cfg.DType})
	if err != nil {
		return nil, err
	}
	if err := m.Graph.Minimize(m.Loss, cfg.Optimizer); err != nil {
		return nil, err
	}
	dev := NewCPU(cfg.Workers)
	store, first := NewStore(cfg.Seed), 0
	if c := cfg.Resume; c != nil {
		if err := c.check(cfg.Model, cfg.Batch, m.Graph); err != nil {
			return nil, err
		}
		store, first = c.Weights, c.Step
	}
	ex, err := NewExecutor(m.Graph, dev, store)
	if err != nil {
		return nil, err
	}

	loader := data.NewLoader(train, cfg.Batch, true, cfg.Seed)
	loader.DropLast = true
	if first > 0 { // where the checkpoint's run was: its epoch, its batch
		loader.Reset(first / loader.Steps())
		loader.Skip(first % loader.Steps())
	}
	steps := cfg.Epochs * loader.Steps()
	if cfg.MaxSteps > 0 {
		steps = min(steps, cfg.MaxSteps)
	}
	res := &TrainResult{Model: cfg.Model, Optimizer: cfg.Optimizer.Name(), Batch: cfg.Batch, StepTimes: make([]time.Duration, 0, steps)}
	x, y := ex.Buffer(m.Images).F, ex.Buffer(m.Labels).I
	saved := first // the step of the last checkpoint
	start := time.Now()
	var epochLoss float64
	var epochSteps int
	for res.Steps < steps {
		if _, ok := loader.Next(x, y); !ok {
			loader.Reset(loader.Epoch() + 1)
			epochLoss, epochSteps = 0, 0
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("runtime: training stopped after %d of %d steps: %w", res.Steps, steps, err)
		}
		if closed(cfg.Stop) {
			return nil, stopped(cfg.Save, saved, first+res.Steps, store, res.Steps, steps)
		}
		t0 := time.Now()
		if err := ex.Run(first + res.Steps); err != nil {
			return nil, err
		}
		dt := time.Since(t0)
		loss := ex.Buffer(m.Loss).F[0]
		if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
			return nil, fmt.Errorf("%w at step %d: loss is %g (try a smaller learning rate)", ErrDiverged, res.Steps, loss)
		}
		res.Steps++
		res.StepTimes = append(res.StepTimes, dt)
		if cfg.SaveEvery > 0 && res.Steps%cfg.SaveEvery == 0 && res.Steps < steps {
			if err := cfg.Save(first+res.Steps, store); err != nil {
				return nil, err
			}
			saved = first + res.Steps
		}
		epochLoss += float64(loss)
		epochSteps++
		if progress != nil {
			progress(StepStats{Step: res.Steps, Steps: steps, Epoch: loader.Epoch(), Loss: loss, StepTime: dt})
		}
	}
	res.TrainTime = time.Since(start)
	res.Epochs = loader.Epoch() + 1 - first/loader.Steps()
	res.Weights, res.Step = store, first+res.Steps
	if epochSteps > 0 {
		res.FinalLoss = epochLoss / float64(epochSteps)
	}
	res.TestAccuracy, res.TestLoss, err = Evaluate(cfg.Model, store, dev, test, cfg.EvalBatch)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// checkInput checks that a model is a classifier whose input a data set's
// images fit: MNIST training and evaluation, and the MNISTFeeder, serve
// nothing else.
func checkInput(model string, ds *data.Dataset) error {
	in, err := zoo.InputShape(model)
	if err != nil {
		return err
	}
	if classes, _ := zoo.Classes(model); classes == 0 {
		return fmt.Errorf("runtime: model %s has no labels (its loss is the mean square of its output): MNIST feeds classifiers only", model)
	}
	if !in.Equal(graph.Shape{1, ds.Rows, ds.Cols}) {
		return fmt.Errorf("runtime: model %s takes %v images, the data set has 1×%d×%d", model, in, ds.Rows, ds.Cols)
	}
	return nil
}

// Evaluate runs model's forward pass with the weights in store over ds and
// returns the accuracy and mean loss. batch ≤ 0 means 1000. store must
// hold every weight of the model (CheckWeights; InitWeights makes an
// untrained one's).
func Evaluate(model string, store *Store, dev *CPU, ds *data.Dataset, batch int) (accuracy, loss float64, err error) {
	if err := checkInput(model, ds); err != nil {
		return 0, 0, err
	}
	if batch <= 0 {
		batch = 1000
	}
	batch = min(batch, ds.N)
	execs := map[int]*evalExec{} // by batch size: the last batch may be smaller
	loader := data.NewLoader(ds, batch, false, 0)
	x := make([]float32, batch*ds.Rows*ds.Cols)
	y := make([]int32, batch)
	var correct int
	var lossSum float64
	for {
		n, ok := loader.Next(x, y)
		if !ok {
			break
		}
		e, ok := execs[n]
		if !ok {
			if e, err = newEvalExec(model, n, store, dev); err != nil {
				return 0, 0, err
			}
			execs[n] = e
		}
		copy(e.ex.Buffer(e.m.Images).F, x)
		copy(e.ex.Buffer(e.m.Labels).I, y[:n])
		if err := e.ex.Run(0); err != nil {
			return 0, 0, err
		}
		lossSum += float64(e.ex.Buffer(e.m.Loss).F[0]) * float64(n)
		logits := e.ex.Buffer(e.m.Logits).F
		classes := len(logits) / n
		for i := range n {
			row := logits[i*classes : (i+1)*classes]
			if argmax(row) == int(y[i]) {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.N), lossSum / float64(ds.N), nil
}

type evalExec struct {
	m  *zoo.Model
	ex *Executor
}

func newEvalExec(model string, batch int, store *Store, dev *CPU) (*evalExec, error) {
	m, err := zoo.Build(model, zoo.Config{Batch: batch})
	if err != nil {
		return nil, err
	}
	if err := checkWeights(model, m.Graph, store); err != nil {
		return nil, err
	}
	ex, err := NewExecutor(m.Graph, dev, store)
	if err != nil {
		return nil, err
	}
	return &evalExec{m: m, ex: ex}, nil
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// RunnerOption configures the PlanRunner a function makes, before it runs.
type RunnerOption func(*PlanRunner)

// WithGEMM sets the runner's GEMM policy (PlanRunner.GEMM).
func WithGEMM(p GEMMPolicy) RunnerOption { return func(r *PlanRunner) { r.GEMM = p } }

// TrainPlan trains through a compiled plan, executed unchanged by a
// PlanRunner on the plan's devices, on train in shuffled epochs (the
// batches Train would see with the plan's seed), then evaluates replica 0's
// weights on test. opts configure the runner.
func TrainPlan(ctx context.Context, p *plans.Plan, loop Loop, train, test *data.Dataset, opts ...RunnerOption) (*TrainResult, error) {
	r, err := NewPlanRunner(p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for _, o := range opts {
		o(r)
	}
	return TrainOn(ctx, r, p, loop, train, test)
}

// PlanExecutor runs a plan's iterations and gives back the trained
// weights: a PlanRunner, or rank 0 of a multi-process run.
type PlanExecutor interface {
	Run(ctx context.Context, iters int, feed Feeder) (*RunResult, error)
	Store() (*Store, error)
}

// Stopper is a PlanExecutor that is not a PlanRunner but, like one,
// ends a Run at an iteration boundary once the channel it was given
// closes (PlanRunner.Stop): rank 0 of a multi-process run, which stops
// every rank there.
type Stopper interface {
	SetStop(stop <-chan struct{})
}

// TrainOn is TrainPlan on an executor of p.
func TrainOn(ctx context.Context, x PlanExecutor, p *plans.Plan, loop Loop, train, test *data.Dataset) (*TrainResult, error) {
	if err := checkInput(p.Model, train); err != nil {
		return nil, err
	}
	feed, err := NewMNISTFeeder(train, p.Batch, p.Seed)
	if err != nil {
		return nil, err
	}
	res, store, err := trainOn(ctx, x, p, loop, feed)
	if err != nil {
		return nil, err
	}
	res.TestAccuracy, res.TestLoss, err = Evaluate(p.Model, store, NewCPU(0), test, 0)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// epochFeeder is a Feeder of data in epochs of Steps steps.
type epochFeeder interface {
	Feeder
	Steps() int
}

// trainOn runs loop's steps of feed through x, in Run calls of
// loop.SaveEvery steps with a checkpoint between (else one), and returns
// what it measured, and the trained weights.
func trainOn(ctx context.Context, x PlanExecutor, p *plans.Plan, loop Loop, feed epochFeeder) (*TrainResult, *Store, error) {
	if loop.Epochs < 1 {
		return nil, nil, fmt.Errorf("runtime: epochs must be ≥ 1, got %d", loop.Epochs)
	}
	steps := loop.Epochs * feed.Steps()
	if loop.MaxSteps > 0 {
		steps = min(steps, loop.MaxSteps)
	}
	chunk := steps
	if loop.SaveEvery > 0 {
		chunk = loop.SaveEvery
	}
	last := time.Now()
	done := 0 // steps of the Run calls before this one
	report := func(iter int, loss float64) {
		now := time.Now()
		if loop.Progress != nil {
			iter += done
			loop.Progress(StepStats{Step: iter + 1, Steps: steps, Epoch: iter / feed.Steps(), Loss: float32(loss), StepTime: now.Sub(last)})
		}
		last = now
	}
	r, stepwise := x.(*PlanRunner)
	if stepwise {
		r.Progress, r.Stop = report, loop.Stop
	} else if s, ok := x.(Stopper); ok {
		s.SetStop(loop.Stop)
	}
	saved := stepsRun(x, 0) // the step of the last checkpoint
	start := time.Now()
	losses := make([]float64, 0, steps)
	res := &TrainResult{Model: p.Model, Optimizer: p.Optimizer, Batch: p.Batch, Steps: steps,
		Epochs: (steps + feed.Steps() - 1) / feed.Steps()}
	for done < steps {
		// Stop is asked before each Run as well as in it: a Run that
		// starts with Stop closed still runs one iteration (see
		// PlanRunner.Stop), and Stop may close while a checkpoint is
		// being written.
		if closed(loop.Stop) {
			w, err := x.Store()
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, stopped(loop.Save, saved, stepsRun(x, done), w, done, steps)
		}
		run, err := x.Run(ctx, min(chunk, steps-done), feed)
		if err != nil {
			if done > 0 {
				err = fmt.Errorf("%w (after %d of %d steps)", err, done, steps)
			}
			return nil, nil, err
		}
		n := len(run.Loss) // fewer than asked if Stop closed
		if !stepwise {
			report(n-1, run.Loss[n-1])
		}
		// A loss that is not finite stops the run at once: the weights it
		// updated are lost, and the steps after it would only carry the
		// NaN on.
		for i, l := range run.Loss {
			if math.IsNaN(l) || math.IsInf(l, 0) {
				return nil, nil, fmt.Errorf("%w at step %d: loss is %g (try a smaller learning rate)", ErrDiverged, done+i, l)
			}
		}
		losses = append(losses, run.Loss...)
		res.StepTimes = append(res.StepTimes, run.Steps...)
		done += n
		if done < steps && loop.SaveEvery > 0 && !closed(loop.Stop) {
			w, err := x.Store()
			if err == nil {
				saved = stepsRun(x, done)
				err = loop.Save(saved, w)
			}
			if err != nil {
				return nil, nil, err
			}
		}
	}
	res.TrainTime = time.Since(start)
	lastEpoch := (steps - 1) / feed.Steps() * feed.Steps()
	for i := lastEpoch; i < steps; i++ {
		res.FinalLoss += losses[i] / float64(steps-lastEpoch)
	}
	store, err := x.Store()
	if err != nil {
		return nil, nil, err
	}
	res.Weights, res.Step = store, stepsRun(x, steps)
	return res, store, nil
}

// stepsRun is the steps x's weights have taken: its iteration count if
// it keeps one (a resumed run's steps included), else done.
func stepsRun(x PlanExecutor, done int) int {
	if it, ok := x.(interface{ Iteration() int }); ok {
		return it.Iteration()
	}
	return done
}
