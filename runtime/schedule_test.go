package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
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
				p := compile(opt)
				r, err := NewPlanRunner(p)
				require.NoError(t, err)
				defer r.Close()
				if c != nil {
					require.NoError(t, r.Resume(c))
				}
				res, err := TrainOn(context.Background(), r, p, Loop{Epochs: 3, MaxSteps: n}, train, test)
				require.NoError(t, err)
				return res
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
