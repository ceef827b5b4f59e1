package runtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/internal/cudafake"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// TestGPUEngineOnFakeDriver runs the TestFakeGPU* tests in a child process
// against the fake CUDA libraries of internal/cudafake with no-op kernels:
// the plan runner's GPU paths (graph capture and replay, eager streams and
// events, CPU+GPU pipelines over pinned memory, host-fed staging, the
// microbenchmark) run end to end, and every copy, memset and cuBLAS GEMM
// really moves the host memory behind the device pointers, checked against
// the allocations. Kernels compute nothing, so numbers are not checked.
// They run again with streams that run their work only when the host waits
// (FLOWKIT_FAKE_CUDA_STREAMS=async). It needs a C compiler and the CUDA
// headers; without them it skips.
func TestGPUEngineOnFakeDriver(t *testing.T) {
	for _, streams := range []string{"sync", "async"} {
		t.Run(streams, func(t *testing.T) {
			t.Setenv("FLOWKIT_FAKE_CUDA_STREAMS", streams)
			log := cudafake.RunTests(t, "TestFakeGPU", 9, cudafake.NoopKernels)
			if strings.Contains(log, "fake cuda: ") {
				t.Errorf("the fake driver refused calls:\n%s", log)
			}
		})
	}
}

// TestGPUOnEmulator runs the GPU tests that check numbers
// (TestGPUPlanMatchesCPU, TestGPUGEMMPoliciesAgree, TestGPUBF16Workloads,
// TestGPUHeterogeneous, TestGPUHostFedMatchesPooled, TestGPURecompute,
// TestGPUResume, TestGPUSchedule, TestGPUBatchNorm, TestGPUMaskedText) in a child process against the fake driver, with
// kernels/cuda's kernels run by the host emulator of internal/cudafake and
// cuBLAS by reference code: the GPU runtime (graph capture and replay,
// eager streams, CPU+GPU pipelines and data parallelism) with the real
// kernels computes what the CPU runtime computes, here, without a GPU. It
// needs C and C++ compilers and the CUDA headers; without them it skips.
func TestGPUOnEmulator(t *testing.T) {
	emu := cudafake.EmulatedKernels(filepath.Join("..", "kernels", "cuda"))
	log := cudafake.RunTests(t, "TestGPU(PlanMatchesCPU|GEMMPoliciesAgree|BF16Workloads|Heterogeneous|HostFedMatchesPooled|Recompute|Resume|Schedule|BatchNorm|MaskedText)$", 10, emu)
	if strings.Contains(log, "fake cuda: ") {
		t.Errorf("the fake driver refused calls:\n%s", log)
	}
	if raceEnabled {
		// The battery above has the race detector watch the GPU runner's
		// goroutines; the runs below repeat it with other timings and
		// fallbacks, which the plain test run covers in a fraction of the
		// time (under -race they took most of the package's 9 minutes).
		t.Log("async streams and the cuBLASLt fallback run without -race")
		return
	}
	// Streams that run their work only when the host waits for it, the
	// newest first: a missing event wait, or page-locked memory reused
	// before the copy that reads it has run, changes the numbers.
	t.Run("async streams", func(t *testing.T) {
		t.Setenv("FLOWKIT_FAKE_CUDA_STREAMS", "async")
		t.Setenv("FLOWKIT_GPU_TEST_MODELS", "mnist-cnn;gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16")
		cudafake.RunTests(t, "TestGPU(PlanMatchesCPU|Heterogeneous|GEMMPoliciesAgree|HostFedMatchesPooled|Recompute)$", 5, emu)
	})
	// Where cuBLASLt has no algorithm for an epilogue, Dense and DenseGrad
	// fall back to cuBLAS and kernels, and compute the same.
	t.Setenv("FLOWKIT_FAKE_CUBLASLT_EPILOGUES", "none")
	t.Setenv("FLOWKIT_GPU_TEST_MODELS", "mlp3x4096:width=64")
	cudafake.RunTests(t, "TestGPUPlanMatchesCPU$", 1, emu)
}

// onFake skips t unless this process runs against the fake driver with
// no-op kernels (TestGPUEngineOnFakeDriver's child).
func onFake(t *testing.T) {
	t.Helper()
	if os.Getenv("FLOWKIT_FAKE_CUDA_KERNELS") != "noop" {
		t.Skip("runs against the fake CUDA driver: see TestGPUEngineOnFakeDriver")
	}
	openGPU(t)
}

// fakeRun runs r for iters iterations and checks what Run promises
// whatever the numbers: a step and a loss per iteration, one Progress call
// per iteration, and a trace that obeys the plan. It returns the result.
func fakeRun(t *testing.T, r *PlanRunner, iters int, feed Feeder) *RunResult {
	t.Helper()
	progress := 0
	r.Progress = func(int, float64) { progress++ }
	defer func() { r.Progress = nil }()
	res, err := r.Run(context.Background(), iters, feed)
	require.NoError(t, err)
	require.Len(t, res.Steps, iters)
	require.Len(t, res.Loss, iters)
	require.Equal(t, iters, progress, "Progress calls")
	graphed := r.gpu.graph != nil && !r.Eager && r.capturable() == ""
	if graphed && !r.TaskTimes {
		require.Empty(t, res.Trace.Events, "a graph replay without TaskTimes")
	} else {
		require.Len(t, res.Trace.Events, len(r.p.Firings)*iters, "trace events")
		require.NoError(t, r.p.CheckTrace(res.Trace))
	}
	return res
}

// newFakeRunner opens a runner for p, closed at the end of the test, that
// gives up after 20 s without progress rather than hang.
func newFakeRunner(t *testing.T, p *plans.Plan) *PlanRunner {
	t.Helper()
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	r.Stall = 20 * time.Second
	return r
}

// checkParams downloads the parameters (Store, Param) of replica 0.
func checkParams(t *testing.T, r *PlanRunner, weight string) {
	t.Helper()
	s, err := r.Store()
	require.NoError(t, err)
	require.NotEmpty(t, s.tensors)
	w, ok := r.Param(weight, 0)
	require.True(t, ok, weight)
	require.NotEmpty(t, w)
}

// mnist-cnn in graph mode and eagerly, with and without task times, several
// runs on one runner: the graph is captured once per feeder and TaskTimes
// setting and replayed, and the runner can change mode between runs.
func TestFakeGPUModes(t *testing.T) {
	onFake(t)
	p := compileOn(t, gpuDevices(t), "mnist-cnn", "single", 32, 0)
	feed := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
	for _, c := range []struct {
		name             string
		eager, taskTimes bool
	}{
		{"graph", false, false},
		{"graph+times", false, true},
		{"eager", true, false},
		{"eager+times", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newFakeRunner(t, p)
			r.Eager, r.TaskTimes = c.eager, c.taskTimes
			fakeRun(t, r, 3, feed)
			gg := r.gpu.graph
			if !c.eager {
				require.NotNil(t, gg, "captured")
				require.Positive(t, gg.nodes)
			}
			fakeRun(t, r, 4, feed)
			require.Same(t, gg, r.gpu.graph, "the second run replays the first run's graph")
			checkParams(t, r, "conv1.weight")

			// The other mode, then back.
			r.Eager = !c.eager
			fakeRun(t, r, 2, feed)
			r.Eager = c.eager
			r.TaskTimes = !c.taskTimes
			fakeRun(t, r, 2, feed)
			checkParams(t, r, "fc2.weight")
		})
	}
}

// The workloads in graph mode and eagerly: dropout (cifar-cnn), the MLP and
// the transformer blocks (attention's strided-batched GEMMs, LayerNorm), in
// f32 and bf16.
func TestFakeGPUWorkloads(t *testing.T) {
	onFake(t)
	for _, c := range []struct {
		model, weight string
		batch         int
		dtype         graph.DType
	}{
		{"cifar-cnn", "fc1.weight", 16, graph.F32},
		{"mlp3x4096:width=64", "0.weight", 16, graph.F32},
		{"mlp3x4096:width=64", "0.weight", 16, graph.BF16},
		{"gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "layers.0.self_attn.in_proj_weight", 4, graph.F32},
		{"gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "layers.0.self_attn.in_proj_weight", 4, graph.BF16},
	} {
		t.Run(c.model+"/"+c.dtype.String(), func(t *testing.T) {
			p := compileOn(t, gpuDevices(t), c.model, "single", c.batch, c.dtype)
			feed := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
			for _, eager := range []bool{false, true} {
				r := newFakeRunner(t, p)
				r.Eager, r.TaskTimes = eager, true
				fakeRun(t, r, 3, feed)
				checkParams(t, r, c.weight)
			}
		})
	}
}

// A pipeline with stage 0 on the GPU and stage 1 on the host's CPU: PCIe
// copies from and into the pinned arena, CPU streams waiting on GPU
// events. The CPU computes on whatever the GPU's no-op kernels left. With
// fc2 alone on the CPU (layers=3:1), its firings are short and follow GPU
// firings closely: GPU times map to the run's clock a little late, and the
// CPU stream's recorded firings must still not overlap.
func TestFakeGPUHeterogeneousPipeline(t *testing.T) {
	onFake(t)
	for _, c := range []struct {
		strategy string
		batch    int
	}{{"pp=2,mb=2,sched=1f1b", 32}, {"pp=2,mb=2,layers=3:1", 64}} {
		t.Run(c.strategy, func(t *testing.T) {
			p := compileOn(t, gpuDevices(t), "mnist-cnn", c.strategy, c.batch, 0)
			require.True(t, isGPU(p.Devices[0]) && !isGPU(p.Devices[1]), "stage 0 on the GPU, stage 1 on the CPU")
			r := newFakeRunner(t, p)
			require.NotEmpty(t, r.capturable(), "a CPU+GPU plan is not captured")
			feed := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
			fakeRun(t, r, 4, feed)
			fakeRun(t, r, 2, feed)
			checkParams(t, r, "conv1.weight")
			_, ok := r.Param("fc2.weight", 0)
			require.True(t, ok, "stage 1's weight")
		})
	}
}

// hostFeeder is a synthetic feeder that is not a *SyntheticFeeder: its
// inputs go through the pinned staging buffers, as real data does.
type hostFeeder struct{ s *SyntheticFeeder }

func (h hostFeeder) Feed(iter, from, n int, images []float32, labels []int32) error {
	return h.s.Feed(iter, from, n, images, labels)
}

func (h hostFeeder) FeedTokens(iter, from, n int, tokens []int32) error {
	return h.s.FeedTokens(iter, from, n, tokens)
}

// feederFunc is a Feeder of a type that Go cannot compare.
type feederFunc func(iter, from, n int, images []float32, labels []int32) error

func (f feederFunc) Feed(iter, from, n int, images []float32, labels []int32) error {
	return f(iter, from, n, images, labels)
}

// Inputs fed from the host: staged in pinned memory and copied by the
// captured graph, or by each eager firing, in f32 and bf16; and TrainPlan
// (an MNISTFeeder) through the GPU.
func TestFakeGPUHostFed(t *testing.T) {
	onFake(t)
	for _, c := range []struct {
		model string
		batch int
		dtype graph.DType
	}{
		{"mnist-cnn", 32, graph.F32},
		{"mlp3x4096:width=64", 16, graph.BF16},
	} {
		t.Run(c.model+"/"+c.dtype.String(), func(t *testing.T) {
			p := compileOn(t, gpuDevices(t), c.model, "single", c.batch, c.dtype)
			feed := hostFeeder{NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)}
			for _, eager := range []bool{false, true} {
				r := newFakeRunner(t, p)
				r.Eager = eager
				fakeRun(t, r, 3, feed)
				gg := r.gpu.graph
				// Feeders of a type Go cannot compare: the host-fed graph
				// serves any feeder.
				fakeRun(t, r, 2, feederFunc(feed.Feed))
				fakeRun(t, r, 2, feederFunc(feed.Feed))
				require.Same(t, gg, r.gpu.graph, "eager=%v: one graph for all host feeders", eager)
			}
		})
	}
	t.Run("TrainPlan", func(t *testing.T) {
		// The losses TrainPlan checks for divergence are the fake's fill
		// pattern (no kernel writes them): 0xA5A5A5A5, a finite float.
		p := compileOn(t, gpuDevices(t), "mnist-cnn", "single", 32, 0)
		res, err := TrainPlan(context.Background(), p, Loop{Epochs: 1, MaxSteps: 5}, randomDigits(320, 1), randomDigits(100, 2))
		require.NoError(t, err)
		require.Equal(t, 5, res.Steps)
		require.Len(t, res.StepTimes, 5)
	})
}

// randomDigits is a data set of n random 28×28 images in MNIST's form.
func randomDigits(n int, seed uint64) *data.Dataset {
	rng := rand.New(rand.NewPCG(seed, 0))
	ds := &data.Dataset{Images: make([]uint8, n*28*28), Labels: make([]uint8, n), N: n, Rows: 28, Cols: 28}
	for i := range ds.Images {
		ds.Images[i] = uint8(rng.IntN(256))
	}
	for i := range ds.Labels {
		ds.Labels[i] = uint8(rng.IntN(10))
	}
	return ds
}

// The microbenchmark on a GPU plan: timed and untimed graph replays.
func TestFakeGPUMicrobench(t *testing.T) {
	onFake(t)
	p := compileOn(t, gpuDevices(t), "mnist-cnn", "single", 32, 0)
	got, err := Microbench{Iters: 4}.Measure(context.Background(), p)
	require.NoError(t, err)
	require.NotEmpty(t, got.Tasks)
	for _, s := range got.Tasks {
		require.Positive(t, s.Time, s.Key)
		require.Equal(t, "H200", s.Device)
	}
}

// Runs of one iteration, and a graph replayed more times than the GPU's
// loss history holds (lossCap), which the host reads as it fills.
func TestFakeGPURunLengths(t *testing.T) {
	onFake(t)
	p := compileOn(t, gpuDevices(t), "mlp", "single", 8, 0)
	feed := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
	for _, eager := range []bool{false, true} {
		r := newFakeRunner(t, p)
		r.Eager = eager
		fakeRun(t, r, 1, feed)
		if !eager {
			fakeRun(t, r, lossCap+5, feed)
		}
		fakeRun(t, r, 1, feed)
	}
}

// A feeder's error ends the run with it, in graph mode (while capturing, or
// staging a later iteration) and eagerly; the runner runs again afterwards.
func TestFakeGPUFeedError(t *testing.T) {
	onFake(t)
	p := compileOn(t, gpuDevices(t), "mnist-cnn", "single", 32, 0)
	good := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
	errFeed := errors.New("no more data")
	failAt := func(at int) Feeder {
		return feederFunc(func(iter, from, n int, images []float32, labels []int32) error {
			if iter >= at {
				return errFeed
			}
			return good.Feed(iter, from, n, images, labels)
		})
	}
	for _, eager := range []bool{false, true} {
		for _, at := range []int{0, 2} { // capture feeds iteration 1
			r := newFakeRunner(t, p)
			r.Eager = eager
			_, err := r.Run(context.Background(), 4, failAt(at))
			require.ErrorIs(t, err, errFeed, "eager=%v, failing at iteration %d", eager, at)
			fakeRun(t, r, 2, hostFeeder{good})
		}
	}
}

// A plan for another GPU is refused with the reason.
func TestFakeGPUWrongDevice(t *testing.T) {
	onFake(t)
	c, err := topology.Preset("dgx-a100")
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, 1, false)
	require.NoError(t, err)
	st, err := plans.ParseStrategy("single", 8)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Seed: 3,
		Optimizer: graph.SGD{LR: 0.01}, Devices: devs, Cluster: "dgx-a100"})
	require.NoError(t, err)
	_, err = NewPlanRunner(p)
	require.Error(t, err)
	for _, want := range []string{"gpu0", "A100", "NVIDIA H200", "compile the plan for this GPU"} {
		require.Contains(t, err.Error(), want)
	}
}

// A cancelled context stops a run, before it starts or midway, in graph
// mode and eagerly; the runner runs again afterwards.
func TestFakeGPUCancel(t *testing.T) {
	onFake(t)
	p := compileOn(t, gpuDevices(t), "mnist-cnn", "single", 32, 0)
	feed := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
	for _, eager := range []bool{false, true} {
		r := newFakeRunner(t, p)
		r.Eager, r.TaskTimes = eager, true
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := r.Run(ctx, 3, feed)
		require.ErrorIs(t, err, context.Canceled, "eager=%v, cancelled before", eager)

		ctx, cancel = context.WithCancel(context.Background())
		r.Progress = func(it int, _ float64) {
			if it == 1 {
				cancel()
			}
		}
		_, err = r.Run(ctx, 200, feed)
		cancel()
		require.True(t, errors.Is(err, context.Canceled), "eager=%v, cancelled midway: got %v", eager, err)
		r.Progress = nil
		fakeRun(t, r, 2, feed)
	}
}
