package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	"github.com/flowkit/flowkit/plans"
)

// A learning-rate schedule gives step t the rate Schedule.Rate(lr, t),
// counted over the whole training: a run along the schedule ends with the
// bits of a run of one step at a time, each resumed from the last and
// given that step's rate as a constant. So on the executor (SGD with
// momentum) and through plans (Adam, one device and a pipeline).
func TestScheduleFollowsSteps(t *testing.T) {
	train, test := realMNIST(t)
	train = subset(train, 16*4) // four steps an epoch: the runs cross epochs
	test = subset(test, 100)
	const steps = 6
	sched := graph.Schedule{Decay: "cosine", Warmup: 2, Steps: 5, MinRatio: 0.1}
	withRate := func(opt graph.Optimizer, lr float32, s graph.Schedule) graph.Optimizer {
		switch o := opt.(type) {
		case graph.SGD:
			o.LR, o.Schedule = lr, s
			return o
		case graph.Adam:
			o.LR, o.Schedule = lr, s
			return o
		}
		t.Fatalf("optimizer %T", opt)
		return nil
	}
	// stepwise trains steps runs of one step, each at its step's rate.
	stepwise := func(opt graph.Optimizer, lr float32, one func(opt graph.Optimizer, c *Checkpoint) *TrainResult) *Store {
		var c *Checkpoint
		for step := 1; step <= steps; step++ {
			res := one(withRate(opt, sched.Rate(lr, step), graph.Schedule{}), c)
			require.Equal(t, step, res.Step)
			c = &Checkpoint{Model: "mlp", Seed: 5, Step: res.Step, Weights: res.Weights}
		}
		return c.Weights
	}

	t.Run("executor", func(t *testing.T) {
		sgd := graph.SGD{LR: 0.05, Momentum: 0.9}
		train1 := func(opt graph.Optimizer, c *Checkpoint, n int) *TrainResult {
			res, err := Train(context.Background(), TrainConfig{Model: "mlp", Epochs: 3, Batch: 16, Optimizer: opt, Seed: 5, Workers: 1, MaxSteps: n, Resume: c}, train, test, nil)
			require.NoError(t, err)
			return res
		}
		whole := train1(withRate(sgd, sgd.LR, sched), nil, steps)
		want := stepwise(sgd, sgd.LR, func(opt graph.Optimizer, c *Checkpoint) *TrainResult { return train1(opt, c, 1) })
		requireSameWeights(t, want, whole.Weights)
		constant := train1(sgd, nil, steps)
		requireDifferentWeights(t, constant.Weights, whole.Weights)
	})

	for _, strategy := range []string{"single", "pp=2,mb=2"} {
		t.Run(strategy, func(t *testing.T) {
			compile := func(opt graph.Optimizer) *plans.Plan {
				st, err := plans.ParseStrategy(strategy, 16)
				require.NoError(t, err)
				p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 16, Strategy: st, Optimizer: opt, Seed: 5, Devices: cpuDevices(st.Devices())})
				require.NoError(t, err)
				return p
			}
			trainOn := func(opt graph.Optimizer, c *Checkpoint, n int) *TrainResult {
				return trainResumed(t, compile(opt), c, Loop{Epochs: 3, MaxSteps: n}, train, test)
			}
			adam := graph.Adam{LR: 3e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
			whole := trainOn(withRate(adam, adam.LR, sched), nil, steps)
			want := stepwise(adam, adam.LR, func(opt graph.Optimizer, c *Checkpoint) *TrainResult { return trainOn(opt, c, 1) })
			requireSameWeights(t, want, whole.Weights)
		})
	}
}

// requireDifferentWeights fails if every weight of got equals want's.
func requireDifferentWeights(t *testing.T, want, got *Store) {
	t.Helper()
	w, g := want.whole(), got.whole()
	require.Equal(t, len(w), len(g))
	for i := range w {
		if !slices.Equal(w[i].F, g[i].F) {
			return
		}
	}
	t.Fatal("the weights are the same")
}

// The CPU device runs each update op with its kernel at the step's rate:
// Adam's weight decay added to the gradient, AdamW's decoupled from it
// (which alone leaves w·(1 − lr·wd) where the gradient is zero).
func TestUpdateOpsOnCPU(t *testing.T) {
	const n = 5
	sched := graph.Schedule{Decay: "linear", Warmup: 1, Steps: 10, MinRatio: 0.2}
	w0 := []float32{1, -2, 0.5, 3, -0.25}
	g0 := []float32{0, 0.5, -1, 0, 2}
	spec := graph.Spec{Shape: graph.Shape{n}, DType: graph.F32}
	for _, decoupled := range []bool{false, true} {
		op := graph.AdamUpdate{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.5, Decoupled: decoupled, Schedule: sched}
		w, g, m, v := slices.Clone(w0), slices.Clone(g0), make([]float32, n), make([]float32, n)
		specs := []graph.Spec{spec, spec, spec, spec}
		const iter = 4 // step 5
		require.NoError(t, NewCPU(1).launch(op, specs, nil, step{iter: iter}, []Buffer{{F: w}, {F: g}, {F: m}, {F: v}}, nil))

		want, wm, wv := slices.Clone(w0), make([]float32, n), make([]float32, n)
		lr := sched.Rate(op.LR, iter+1)
		require.InDelta(t, 0.1*(0.2+0.8*5.0/9), float64(lr), 1e-7, "the linear decay's rate at step 5: 4/9 of the way from 1 to 0.2")
		if decoupled {
			cpu.AdamWUpdate(nil, want, g0, wm, wv, lr, op.Beta1, op.Beta2, op.Eps, op.WeightDecay, iter+1)
			require.Equal(t, w0[0]*(1-lr*op.WeightDecay), w[0], "a zero gradient: only the decay")
		} else {
			cpu.AdamUpdate(nil, want, g0, wm, wv, lr, op.Beta1, op.Beta2, op.Eps, op.WeightDecay, iter+1)
			require.NotEqual(t, w0[0]*(1-lr*op.WeightDecay), w[0], "L2 decay goes through Adam's normalization")
		}
		require.Equal(t, want, w, "decoupled=%v", decoupled)
		require.Equal(t, wm, m)
		require.Equal(t, wv, v)
	}
}
