package runtime

import (
	"context"
	"sync"
	"testing"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/stretchr/testify/require"
)

var mnist struct {
	once        sync.Once
	train, test *data.Dataset
	err         error
}

// realMNIST loads real MNIST once per test binary; it skips only when no
// copy can be found (no module cache and no network).
func realMNIST(t *testing.T) (train, test *data.Dataset) {
	t.Helper()
	mnist.once.Do(func() {
		dir, err := data.LocateMNIST("")
		if err != nil {
			mnist.err = err
			return
		}
		mnist.train, mnist.test, mnist.err = data.LoadMNIST(dir)
	})
	if mnist.err != nil {
		t.Skipf("real MNIST not available: %v", mnist.err)
	}
	return mnist.train, mnist.test
}

// subset returns the first n samples of ds.
func subset(ds *data.Dataset, n int) *data.Dataset {
	size := ds.Rows * ds.Cols
	return &data.Dataset{Images: ds.Images[:n*size], Labels: ds.Labels[:n], N: n, Rows: ds.Rows, Cols: ds.Cols}
}

// A short run on real MNIST learns: well above chance on held-out images.
func TestTrainLearnsMNIST(t *testing.T) {
	train, test := realMNIST(t)
	cfg := TrainConfig{Model: "mlp", Epochs: 1, Batch: 32, Optimizer: graph.SGD{LR: 0.05, Momentum: 0.9}, Seed: 3, MaxSteps: 300}
	res, err := Train(context.Background(), cfg, train, subset(test, 2000), nil)
	require.NoError(t, err)
	require.Equal(t, 300, res.Steps)
	if res.TestAccuracy < 0.85 {
		t.Errorf("got test accuracy %.3f after 300 steps, want ≥ 0.85", res.TestAccuracy)
	}
}

// The same seed gives the same run, bit for bit, whatever the worker count.
func TestTrainDeterministic(t *testing.T) {
	train, test := realMNIST(t)
	run := func(workers int) *TrainResult {
		cfg := TrainConfig{Model: "mnist-cnn", Epochs: 1, Batch: 16, Optimizer: graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
			Seed: 11, MaxSteps: 8, Workers: workers}
		res, err := Train(context.Background(), cfg, train, subset(test, 200), nil)
		require.NoError(t, err)
		return res
	}
	a, b := run(2), run(1)
	require.Equal(t, a.FinalLoss, b.FinalLoss)
	require.Equal(t, a.TestAccuracy, b.TestAccuracy)
	require.Equal(t, a.TestLoss, b.TestLoss)
}

func TestTrainErrors(t *testing.T) {
	train, test := realMNIST(t)
	base := TrainConfig{Model: "mlp", Epochs: 1, Batch: 8, Optimizer: graph.SGD{LR: 0.1}, MaxSteps: 2}
	tests := []struct {
		name string
		edit func(*TrainConfig)
		want string
	}{
		{"unknown model", func(c *TrainConfig) { c.Model = "nope" }, "unknown model"},
		{"cifar on mnist", func(c *TrainConfig) { c.Model = "cifar-cnn" }, "[3,32,32]"},
		{"zero epochs", func(c *TrainConfig) { c.Epochs = 0 }, "epochs"},
		{"huge batch", func(c *TrainConfig) { c.Batch = 1 << 20 }, "batch"},
		{"no optimizer", func(c *TrainConfig) { c.Optimizer = nil }, "optimizer"},
		{"diverges", func(c *TrainConfig) { c.Optimizer = graph.SGD{LR: 1e30}; c.MaxSteps = 20 }, "diverged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.edit(&cfg)
			_, err := Train(context.Background(), cfg, train, subset(test, 100), nil)
			require.ErrorContains(t, err, tt.want)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Train(ctx, base, train, test, nil)
	require.ErrorIs(t, err, context.Canceled)
}

// Training through a plan is training: the single-device plan sees the
// batches Train sees and computes the same losses; a pipeline plan learns
// as well.
func TestTrainPlan(t *testing.T) {
	train, test := realMNIST(t)
	opt := graph.SGD{LR: 0.05, Momentum: 0.9}
	cfg := TrainConfig{Model: "mlp", Epochs: 1, Batch: 32, Optimizer: opt, Seed: 3, MaxSteps: 100, Workers: 1}
	want, err := Train(context.Background(), cfg, train, subset(test, 1000), nil)
	require.NoError(t, err)
	for _, strategy := range []string{"single", "pp=2,mb=2,sched=gpipe", "dp=2"} {
		st, err := plans.ParseStrategy(strategy, 32)
		require.NoError(t, err)
		p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 32, Strategy: st, Optimizer: opt, Seed: 3, Devices: cpuDevices(st.Devices())})
		require.NoError(t, err)
		got, err := TrainPlan(context.Background(), p, Loop{Epochs: 1, MaxSteps: 100}, train, subset(test, 1000))
		require.NoError(t, err)
		require.Equal(t, 100, got.Steps)
		require.InDelta(t, want.FinalLoss, got.FinalLoss, 1e-4*want.FinalLoss, strategy)
		require.InDelta(t, want.TestAccuracy, got.TestAccuracy, 0.003, strategy)
	}
}

// A plan's run that diverges stops after the Run call whose loss went
// NaN, and saves no checkpoint of it: before, it ran every step and saved
// every SaveEvery steps weights of NaN, and said so only at the end.
func TestTrainPlanDiverges(t *testing.T) {
	train, test := realMNIST(t)
	opt := graph.SGD{LR: 1e30}
	st, err := plans.ParseStrategy("dp=2", 32)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 32, Strategy: st, Optimizer: opt, Seed: 3, Devices: cpuDevices(2)})
	require.NoError(t, err)
	var saves, steps int
	_, err = TrainPlan(context.Background(), p, Loop{Epochs: 1, MaxSteps: 400, SaveEvery: 5,
		Save:     func(int, *Store) error { saves++; return nil },
		Progress: func(s StepStats) { steps = s.Step }}, train, subset(test, 100))
	require.ErrorIs(t, err, ErrDiverged)
	require.Regexp(t, `diverged at step [1-4]: loss is`, err.Error())
	require.Zero(t, saves)
	require.Less(t, steps, 400)
}
