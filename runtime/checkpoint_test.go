package runtime

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
)

var adamOpt = graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}

// A checkpoint reads back what was written, bit for bit, with its
// metadata; the write leaves no temporary file behind. A bf16 tensor is
// stored in bf16 where its values are bf16's (a GPU's), else in f32 (the
// CPU's f32 arithmetic for a bf16 model).
func TestCheckpointRoundTrip(t *testing.T) {
	w := NewStore(7)
	require.NoError(t, w.Put(
		Tensor{Name: "a.weight", Spec: graph.Spec{Shape: graph.Shape{2, 3}, DType: graph.F32}, F: []float32{1, -2, 3.5, 0, -0, 1e-30}},
		Tensor{Name: "a.weight.adam_m", Spec: graph.Spec{Shape: graph.Shape{2, 3}, DType: graph.BF16}, F: []float32{0.5, 0, 0, 0, 0, 7}},
		Tensor{Name: "b", Spec: graph.Spec{Shape: graph.Shape{1}, DType: graph.F32}, F: []float32{float32(1) / 3}},
		Tensor{Name: "c", Spec: graph.Spec{Shape: graph.Shape{2}, DType: graph.BF16}, F: []float32{-1.5, float32(1) / 3}},
	))
	stored := map[string]graph.DType{"a.weight": graph.F32, "a.weight.adam_m": graph.BF16, "b": graph.F32, "c": graph.F32}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.safetensors")
	require.NoError(t, WriteCheckpoint(path, Checkpoint{Model: "mlp", Optimizer: "adam(lr=0.001)", Seed: 7, Step: 42, Weights: w}))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")

	c, err := ReadCheckpoint(path)
	require.NoError(t, err)
	require.Equal(t, "mlp", c.Model)
	require.Equal(t, "adam(lr=0.001)", c.Optimizer)
	require.Equal(t, uint64(7), c.Seed)
	require.Equal(t, 42, c.Step)
	require.Equal(t, w.Names(), c.Weights.Names())
	for _, n := range w.Names() {
		want, _ := w.Get(n)
		got, _ := c.Weights.Get(n)
		require.Equal(t, want, got, n)
		require.Equal(t, w.tensors[n].spec.Shape, c.Weights.tensors[n].spec.Shape, n)
		require.Equal(t, stored[n], c.Weights.tensors[n].spec.DType, n)
	}

	// Rewriting replaces; a folder that does not exist is an error that
	// names it, and the old file stays.
	require.NoError(t, WriteCheckpoint(path, Checkpoint{Model: "mlp", Optimizer: "sgd", Seed: 7, Step: 43, Weights: w}))
	c, err = ReadCheckpoint(path)
	require.NoError(t, err)
	require.Equal(t, 43, c.Step)
	require.ErrorContains(t, WriteCheckpoint(filepath.Join(dir, "none", "c.safetensors"), Checkpoint{Weights: w}), "none")
	require.ErrorContains(t, WriteCheckpoint(path, Checkpoint{Weights: NewStore(1)}), "no weights")
}

func TestCheckpointErrors(t *testing.T) {
	w := NewStore(1)
	require.NoError(t, w.Put(Tensor{Name: "x", Spec: graph.Spec{Shape: graph.Shape{2}, DType: graph.F32}, F: []float32{1, 2}}))
	path := filepath.Join(t.TempDir(), "c.safetensors")
	require.NoError(t, WriteCheckpoint(path, Checkpoint{Model: "mlp", Seed: 1, Step: 3, Weights: w}))
	good, err := os.ReadFile(path)
	require.NoError(t, err)

	// A path that cannot be written is refused, by CheckCheckpointPath
	// before a run trains, and by WriteCheckpoint in words that say why.
	dir := t.TempDir()
	for _, tt := range []struct{ path, want string }{
		{dir, "checkpoint " + dir + ": is a directory"},
		{filepath.Join(dir, "none", "c.safetensors"), "checkpoint " + filepath.Join(dir, "none", "c.safetensors") + ": open " + filepath.Join(dir, "none")},
	} {
		require.ErrorContains(t, CheckCheckpointPath(tt.path), tt.want)
		require.ErrorContains(t, WriteCheckpoint(tt.path, Checkpoint{Model: "mlp", Seed: 1, Weights: w}), "checkpoint")
	}
	require.ErrorContains(t, WriteCheckpoint(dir, Checkpoint{Model: "mlp", Seed: 1, Weights: w}), "checkpoint "+dir+": is a directory")
	require.NoError(t, CheckCheckpointPath(filepath.Join(dir, "c.safetensors")))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "the check leaves nothing behind")

	_, err = ReadCheckpoint(filepath.Join(t.TempDir(), "none.safetensors"))
	require.ErrorContains(t, err, "none.safetensors")
	for _, tt := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a safetensors file"},
		{"truncated", good[:len(good)-1], fmt.Sprintf("truncated: the file is %d bytes, its header and tensors %d (1 missing)", len(good)-1, len(good))},
		{"truncated header", good[:20], "truncated: the file is 20 bytes, its header alone"},
		{"trailing bytes", append(slices.Clone(good), 0, 0, 0), "not a safetensors file: 3 bytes after its tensors, which end at byte"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "not a safetensors file"},
		{"not flowkit's", safetensorsFile(t, `{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4), `metadata format is ""`},
		{"f16", safetensorsFile(t, `{"__metadata__":{"format":"flowkit-checkpoint","seed":"1","step":"0"},"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, 4), "tensor x is F16"},
		{"bad step", safetensorsFile(t, `{"__metadata__":{"format":"flowkit-checkpoint","seed":"1","step":"-1"}}`, 0), `metadata step "-1"`},
		{"bad seed", safetensorsFile(t, `{"__metadata__":{"format":"flowkit-checkpoint","seed":"x","step":"1"}}`, 0), `metadata seed "x"`},
		{"bad batch", safetensorsFile(t, `{"__metadata__":{"format":"flowkit-checkpoint","seed":"1","step":"1","batch":"0"}}`, 0), `metadata batch "0"`},
	} {
		_, err := ParseCheckpoint(tt.data)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
}

// safetensorsFile is a file of the given header and n zero bytes of data.
func safetensorsFile(t *testing.T, header string, n int) []byte {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, n)...)
}

// ParseCheckpoint never panics.
func FuzzParseCheckpoint(f *testing.F) {
	w := NewStore(1)
	if err := w.Put(Tensor{Name: "x", Spec: graph.Spec{Shape: graph.Shape{2}, DType: graph.F32}, F: []float32{1, 2}}); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(f.TempDir(), "c.safetensors")
	if err := WriteCheckpoint(path, Checkpoint{Model: "mlp", Seed: 1, Step: 3, Weights: w}); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCheckpoint(data)
		if err == nil && (c.Weights == nil || c.Step < 0) {
			t.Fatalf("accepted %q as %+v", data, c)
		}
	})
}

// Training in two runs, the second resumed from the first's checkpoint,
// computes what one run computes, bit for bit: the weights, Adam's state
// and step, the data order across an epoch's end.
func TestResumeMatchesOneRun(t *testing.T) {
	train, test := realMNIST(t)
	train = subset(train, 16*5) // five steps an epoch: the runs cross epochs
	test = subset(test, 100)
	cfg := TrainConfig{Model: "mlp", Epochs: 2, Batch: 16, Optimizer: adamOpt, Seed: 5, Workers: 1}
	cfg.MaxSteps = 8
	whole, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	require.Equal(t, 8, whole.Step)

	cfg.MaxSteps = 3
	first, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "c.safetensors")
	require.NoError(t, WriteCheckpoint(path, Checkpoint{Model: "mlp", Optimizer: first.Optimizer, Seed: 5, Step: first.Step, Batch: 16, Weights: first.Weights}))
	c, err := ReadCheckpoint(path)
	require.NoError(t, err)
	require.Equal(t, 16, c.Batch)
	// Batches of another size would resume the data order elsewhere.
	other := cfg
	other.Batch, other.Resume = 8, c
	_, err = Train(context.Background(), other, train, test, nil)
	require.ErrorContains(t, err, "runtime: the checkpoint's run took batches of 16 (3 steps: where its data order is), this run takes 8")
	cfg.MaxSteps, cfg.Resume = 5, c
	second, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	require.Equal(t, 8, second.Step)
	requireSameWeights(t, whole.Weights, second.Weights)
	require.Equal(t, whole.TestLoss, second.TestLoss)

	// Another model's checkpoint, or one without Adam's state, is refused.
	cfg.Model = "mnist-cnn"
	_, err = Train(context.Background(), cfg, train, test, nil)
	require.ErrorContains(t, err, "the checkpoint is of model mlp, not mnist-cnn")
	cfg.Model = "mlp"
	sgd, err := Train(context.Background(), TrainConfig{Model: "mlp", Epochs: 1, Batch: 16, Optimizer: graph.SGD{LR: 0.1}, Seed: 5, MaxSteps: 1}, train, test, nil)
	require.NoError(t, err)
	cfg.Resume = &Checkpoint{Model: "mlp", Seed: 5, Step: 1, Weights: sgd.Weights}
	_, err = Train(context.Background(), cfg, train, test, nil)
	require.ErrorContains(t, err, "has no tensor fc1.weight.adam_m")
}

// The same holds through plans: a checkpoint of one plan's run resumes
// another plan of the same model, whatever its parallelism, and goes on
// as the one-device run does (data parallelism and ZeRO compute the same
// sums in another order, so within rounding; one device to one device,
// bit for bit).
func TestResumePlans(t *testing.T) {
	train, test := realMNIST(t)
	train = subset(train, 32*4)
	test = subset(test, 100)
	compile := func(strategy string) *plans.Plan {
		st, err := plans.ParseStrategy(strategy, 32)
		require.NoError(t, err)
		p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 32, Strategy: st, Optimizer: adamOpt, Seed: 9, Devices: cpuDevices(st.Devices())})
		require.NoError(t, err)
		return p
	}
	trainOn := func(p *plans.Plan, steps int, c *Checkpoint) *TrainResult {
		return trainResumed(t, p, c, Loop{Epochs: 2, MaxSteps: steps}, train, test)
	}
	single := compile("single")
	whole := trainOn(single, 6, nil)
	first := trainOn(single, 2, nil)
	path := filepath.Join(t.TempDir(), "c.safetensors")
	require.NoError(t, WriteCheckpoint(path, Checkpoint{Model: "mlp", Optimizer: first.Optimizer, Seed: 9, Step: first.Step, Batch: 32, Weights: first.Weights}))
	c, err := ReadCheckpoint(path)
	require.NoError(t, err)
	r, err := NewPlanRunner(compile("single"))
	require.NoError(t, err)
	wrong := *c
	wrong.Batch = 64
	require.ErrorContains(t, r.Resume(&wrong), "the checkpoint's run took batches of 64 (2 steps: where its data order is), this run takes 32")
	require.NoError(t, r.Close())
	again := trainOn(single, 4, c)
	require.Equal(t, 6, again.Step)
	requireSameWeights(t, whole.Weights, again.Weights)

	for _, strategy := range []string{"dp=2,zero=1", "dp=2,zero=3", "pp=2,mb=2"} {
		got := trainOn(compile(strategy), 4, c)
		for _, n := range whole.Weights.Names() {
			want, _ := whole.Weights.Get(n)
			have, ok := got.Weights.Get(n)
			require.True(t, ok, "%s: %s", strategy, n)
			require.InDeltaSlice(t, want, have, 1e-4, "%s: %s", strategy, n)
		}
		require.InDelta(t, whole.TestLoss, got.TestLoss, 1e-4, strategy)
	}

	// A checkpoint of another model is refused.
	c.Model = "mnist-cnn"
	r, err = NewPlanRunner(single)
	require.NoError(t, err)
	defer r.Close()
	require.ErrorContains(t, r.Resume(c), "the checkpoint is of model mnist-cnn, the plan of mlp")
}

// requireSameWeights checks that two stores hold the same whole tensors,
// bit for bit.
func requireSameWeights(t *testing.T, want, got *Store) {
	t.Helper()
	w, g := want.whole(), got.whole()
	require.Equal(t, len(w), len(g))
	for i := range w {
		require.Equal(t, w[i].Name, g[i].Name)
		require.Equal(t, w[i].F, g[i].F, w[i].Name)
	}
}

// saved is a checkpoint a training loop's Save was given: the step and a
// copy of the weights.
type saved struct {
	step int
	w    []Tensor
}

// keep is a Save that appends what it is given to into.
func keep(into *[]saved) func(int, *Store) error {
	return func(step int, w *Store) error {
		*into = append(*into, saved{step, w.Tensors()}) // copies
		return nil
	}
}

// checkpoint is s as a checkpoint of model and seed.
func (s saved) checkpoint(t *testing.T, model string, seed uint64) *Checkpoint {
	w := NewStore(seed)
	require.NoError(t, w.Put(s.w...))
	return &Checkpoint{Model: model, Seed: seed, Step: s.step, Weights: w}
}

// Saving every k steps saves after k, 2k, … (not after the last step,
// which the result holds), each checkpoint what the run has then: one
// resumed from the last goes on to the run's end, bit for bit. A save
// that fails stops the run with its error.
func TestSaveEvery(t *testing.T) {
	train, test := realMNIST(t)
	train, test = subset(train, 16*5), subset(test, 100)
	resumeFrom := func(s saved) *Checkpoint { return s.checkpoint(t, "mlp", 5) }

	// The executor.
	var got []saved
	cfg := TrainConfig{Model: "mlp", Epochs: 2, Batch: 16, Optimizer: adamOpt, Seed: 5, Workers: 1, MaxSteps: 7, SaveEvery: 3, Save: keep(&got)}
	whole, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []int{3, 6}, []int{got[0].step, got[1].step})
	cfg.MaxSteps, cfg.SaveEvery, cfg.Resume = 1, 0, resumeFrom(got[1])
	end, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	requireSameWeights(t, whole.Weights, end.Weights)

	// A plan, in Run calls of 3 steps.
	st, err := plans.ParseStrategy("dp=2", 16)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 16, Strategy: st, Optimizer: adamOpt, Seed: 5, Devices: cpuDevices(2)})
	require.NoError(t, err)
	trainOn := func(loop Loop, c *Checkpoint) *TrainResult {
		r, err := NewPlanRunner(p)
		require.NoError(t, err)
		defer r.Close()
		if c != nil {
			require.NoError(t, r.Resume(c))
		}
		var steps []int
		loop.Progress = func(s StepStats) { steps = append(steps, s.Step) }
		res, err := TrainOn(context.Background(), r, p, loop, train, test)
		require.NoError(t, err)
		require.Len(t, steps, res.Steps, "progress once a step")
		require.Equal(t, res.Steps, steps[len(steps)-1])
		return res
	}
	got = nil
	whole = trainOn(Loop{Epochs: 2, MaxSteps: 7}, nil)
	chunked := trainOn(Loop{Epochs: 2, MaxSteps: 7, SaveEvery: 3, Save: keep(&got)}, nil)
	requireSameWeights(t, whole.Weights, chunked.Weights)
	require.Len(t, chunked.StepTimes, 7)
	require.Equal(t, whole.FinalLoss, chunked.FinalLoss)
	require.Equal(t, []int{3, 6}, []int{got[0].step, got[1].step})
	end = trainOn(Loop{Epochs: 2, MaxSteps: 1}, resumeFrom(got[1]))
	requireSameWeights(t, whole.Weights, end.Weights)

	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	defer r.Close()
	_, err = TrainOn(context.Background(), r, p, Loop{Epochs: 1, MaxSteps: 4, SaveEvery: 2, Save: func(int, *Store) error { return os.ErrPermission }}, train, test)
	require.ErrorIs(t, err, os.ErrPermission)
}

// CheckWeights wants every weight of the model, of its shape, and nothing
// of the optimizer.
func TestCheckWeights(t *testing.T) {
	w := NewStore(1)
	put := func(name string, shape ...int) {
		require.NoError(t, w.Put(Tensor{Name: name, Spec: graph.Spec{Shape: shape, DType: graph.F32}, F: make([]float32, graph.Shape(shape).NumElements())}))
	}
	put("fc1.weight", 256, 784)
	put("fc1.bias", 256)
	put("fc2.weight", 256, 256)
	put("fc2.bias", 256)
	put("fc3.weight", 10, 256)
	require.ErrorContains(t, CheckWeights("mlp", w), "the weights of mlp have no tensor fc3.bias")
	// Evaluation checks the same, rather than drawing fc3.bias from the seed.
	ds := &data.Dataset{Images: make([]uint8, 4*28*28), Labels: make([]uint8, 4), N: 4, Rows: 28, Cols: 28}
	_, _, err := Evaluate("mlp", w, NewCPU(1), ds, 0)
	require.ErrorContains(t, err, "the weights of mlp have no tensor fc3.bias")
	_, err = EvaluateText("gpt:layers=1,hidden=16,heads=2,seq=8,vocab=256", NewStore(1), NewCPU(1), &data.Text{Name: "t", Bytes: make([]byte, 40)}, 2, 0)
	require.ErrorContains(t, err, "have no tensor")
	put("fc3.bias", 11)
	require.ErrorContains(t, CheckWeights("mlp", w), "tensor fc3.bias is [11] in the weights, [10] in model mlp")
	put("fc3.bias", 10)
	require.NoError(t, CheckWeights("mlp", w))
	require.ErrorContains(t, CheckWeights("nope", w), "nope")
	// Weights of a run that diverged are refused, not scored as NaN.
	bias := make([]float32, 10)
	bias[7] = float32(math.NaN())
	require.NoError(t, w.Put(Tensor{Name: "fc3.bias", Spec: graph.Spec{Shape: graph.Shape{10}, DType: graph.F32}, F: bias}))
	require.ErrorContains(t, CheckWeights("mlp", w), "tensor fc3.bias holds NaN at element 7: the run that wrote these weights diverged")
	// So is a checkpoint to resume from, optimizer state too.
	c := Checkpoint{Model: "mlp", Step: 12, Weights: NewStore(1)}
	require.NoError(t, c.CheckFinite())
	require.NoError(t, c.Weights.Put(Tensor{Name: "fc3.bias", Spec: graph.Spec{Shape: graph.Shape{10}, DType: graph.F32}, F: make([]float32, 10)}))
	require.NoError(t, c.CheckFinite())
	mom := make([]float32, 4)
	mom[3] = float32(math.Inf(-1))
	require.NoError(t, c.Weights.Put(Tensor{Name: "fc3.bias.momentum", Spec: graph.Spec{Shape: graph.Shape{4}, DType: graph.F32}, F: mom}))
	require.EqualError(t, c.CheckFinite(), "runtime: tensor fc3.bias.momentum holds -Inf at element 3: the run that saved the checkpoint (12 steps) had diverged; go on from an earlier one")
}

// A run whose Stop closes ends with whole steps and saves them: resumed
// from that checkpoint, it goes on to what one run computes, bit for bit.
// A plan's runner finishes the steps it has begun (a pipeline may have
// begun the next before the last ends) and begins no other.
func TestStop(t *testing.T) {
	train, test := realMNIST(t)
	train, test = subset(train, 16*5), subset(test, 100)
	resumeFrom := func(s saved) *Checkpoint { return s.checkpoint(t, "mlp", 5) }
	const steps = 7

	// The executor stops after the step in flight.
	cfg := TrainConfig{Model: "mlp", Epochs: 2, Batch: 16, Optimizer: adamOpt, Seed: 5, Workers: 1, MaxSteps: steps}
	whole, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	var got []saved
	stop := make(chan struct{})
	cfg.Stop, cfg.Save, cfg.SaveEvery = stop, keep(&got), 2
	_, err = Train(context.Background(), cfg, train, test, func(s StepStats) {
		if s.Step == 3 {
			close(stop)
		}
	})
	require.ErrorIs(t, err, ErrStopped)
	require.ErrorContains(t, err, "after 3 of 7 steps")
	require.Equal(t, []int{2, 3}, []int{got[0].step, got[1].step}, "saved every 2 steps, and at the stop")
	cfg.Stop, cfg.SaveEvery, cfg.Resume = nil, 0, resumeFrom(got[1])
	cfg.MaxSteps = steps - 3
	end, err := Train(context.Background(), cfg, train, test, nil)
	require.NoError(t, err)
	requireSameWeights(t, whole.Weights, end.Weights)

	// Stopped where the last save was, it does not save again.
	got = nil
	cfg.Resume, cfg.Stop, cfg.MaxSteps, cfg.SaveEvery = nil, stop, steps, 0
	_, err = Train(context.Background(), cfg, train, test, nil)
	require.ErrorContains(t, err, "after 0 of 7 steps")
	require.Empty(t, got)

	for _, strategy := range []string{"single", "dp=2", "pp=2,mb=2,sched=1f1b", "pp=2,mb=4,sched=gpipe"} {
		st, err := plans.ParseStrategy(strategy, 16)
		require.NoError(t, err)
		p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 16, Strategy: st, Optimizer: adamOpt, Seed: 5, Devices: cpuDevices(st.Devices())})
		require.NoError(t, err)
		trainOn := func(loop Loop, c *Checkpoint) (*TrainResult, error) {
			r, err := NewPlanRunner(p)
			require.NoError(t, err)
			defer r.Close()
			if c != nil {
				require.NoError(t, r.Resume(c))
			}
			return TrainOn(context.Background(), r, p, loop, train, test)
		}
		whole, err := trainOn(Loop{Epochs: 2, MaxSteps: steps}, nil)
		require.NoError(t, err)
		got = nil
		stop := make(chan struct{})
		_, err = trainOn(Loop{Epochs: 2, MaxSteps: steps, Stop: stop, Save: keep(&got), Progress: func(s StepStats) {
			if s.Step == 2 {
				close(stop)
			}
		}}, nil)
		require.ErrorIs(t, err, ErrStopped, strategy)
		require.Len(t, got, 1, strategy)
		k := got[0].step
		require.True(t, k >= 2 && k < steps, "%s: stopped after step %d", strategy, k)
		require.ErrorContains(t, err, fmt.Sprintf("after %d of %d steps", k, steps), strategy)
		end, err := trainOn(Loop{Epochs: 2, MaxSteps: steps - k}, resumeFrom(got[0]))
		require.NoError(t, err)
		require.Equal(t, steps, end.Step, strategy)
		requireSameWeights(t, whole.Weights, end.Weights)

		// Stopped while a checkpoint is written, it runs no more steps;
		// stopped before its first, none.
		got, stop = nil, make(chan struct{})
		save := keep(&got)
		_, err = trainOn(Loop{Epochs: 2, MaxSteps: steps, Stop: stop, SaveEvery: 3, Save: func(step int, w *Store) error {
			close(stop)
			return save(step, w)
		}}, nil)
		require.ErrorContains(t, err, "after 3 of 7 steps", strategy)
		require.Len(t, got, 1, "%s: saved once, before the stop", strategy)
		got = nil
		_, err = trainOn(Loop{Epochs: 2, MaxSteps: steps, Stop: stop, SaveEvery: 3, Save: keep(&got)}, nil)
		require.ErrorContains(t, err, "after 0 of 7 steps", strategy)
		require.Empty(t, got, strategy)

		if strategy != "dp=2" {
			continue
		}
		// An executor that runs whole Run calls (as a multi-process run
		// does) stops after the call in flight.
		r, err := NewPlanRunner(p)
		require.NoError(t, err)
		defer r.Close()
		got, stop = nil, make(chan struct{})
		_, err = TrainOn(context.Background(), wholeCalls{r}, p, Loop{Epochs: 2, MaxSteps: steps, Stop: stop, SaveEvery: 3, Save: keep(&got), Progress: func(s StepStats) {
			if s.Step == 3 {
				close(stop)
			}
		}}, train, test)
		require.ErrorContains(t, err, "after 3 of 7 steps")
		require.Len(t, got, 1, "saved once, at the stop")
		require.Equal(t, 3, got[0].step)
	}
}

// wholeCalls is a PlanExecutor that is not a *PlanRunner.
type wholeCalls struct{ *PlanRunner }

// Once Stop closes, a stream may still begin an iteration another stream
// has begun, and none begins one no stream has: every stream ends after
// the same whole iterations.
func TestStopAtIterationBoundary(t *testing.T) {
	stop := make(chan struct{})
	x := &run{r: &PlanRunner{Stop: stop}, iters: 10}
	require.True(t, x.begin(0)) // stream a
	require.True(t, x.begin(0)) // stream b
	require.True(t, x.begin(1)) // a, ahead
	require.True(t, x.begin(2)) // a, further ahead
	close(stop)
	require.True(t, x.begin(1))  // b catches up with what a has begun
	require.True(t, x.begin(2))  //
	require.False(t, x.begin(3)) // a
	require.False(t, x.begin(3)) // b
	require.Equal(t, 3, x.iters)

	// Stopped before any iteration began, a run still runs one.
	x = &run{r: &PlanRunner{Stop: stop}, iters: 10}
	require.True(t, x.begin(0))
	require.False(t, x.begin(1))
	// A rank of a multi-process run does not stop on its own.
	x = &run{r: &PlanRunner{Stop: stop}, iters: 2, rr: &rankRun{}}
	require.True(t, x.begin(0))
	require.True(t, x.begin(1))
	require.False(t, x.begin(2))
}

// trainResumed trains p through a plan runner as loop says, resumed from c
// unless it is nil.
func trainResumed(t *testing.T, p *plans.Plan, c *Checkpoint, loop Loop, train, test *data.Dataset) *TrainResult {
	t.Helper()
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	defer r.Close()
	if c != nil {
		require.NoError(t, r.Resume(c))
	}
	res, err := TrainOn(context.Background(), r, p, loop, train, test)
	require.NoError(t, err)
	return res
}
