package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/units"
)

// gpuDevices are the devices of the h200-host cluster: the GPU first, then
// the host's cores.
func gpuDevices(t *testing.T) []plans.Device {
	t.Helper()
	c, err := topology.Preset("h200-host")
	require.NoError(t, err)
	devs, err := plans.DevicesFromCluster(c, 2, false)
	require.NoError(t, err)
	return devs
}

func compileOn(t *testing.T, devs []plans.Device, model, strategy string, batch int, dtype graph.DType) *plans.Plan {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 3, DType: dtype,
		Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs, Cluster: "h200-host"})
	require.NoError(t, err)
	return p
}

// openGPU returns cuda:0 or skips the test, saying why.
func openGPU(t *testing.T) *GPU {
	t.Helper()
	g, err := sharedGPU(0)
	// The GPU check sets $FLOWKIT_REQUIRE_GPU: there a missing GPU fails.
	if errors.Is(err, cu.ErrNotAvailable) && os.Getenv("FLOWKIT_REQUIRE_GPU") == "" {
		t.Skip(err)
	}
	require.NoError(t, err)
	return g
}

// A ZeRO plan with a GPU is refused, at every stage, naming the strategy
// and what it splits (before any GPU is opened).
func TestGPURefusesZero(t *testing.T) {
	for stage, what := range map[int]string{1: "splits optimizer state over", 2: "splits optimizer state and gradients over", 3: "splits optimizer state, gradients and weights over"} {
		p := compileOn(t, gpuDevices(t), "mlp", fmt.Sprintf("dp=2,zero=%d", stage), 8, 0)
		err := gpuSupported(p)
		require.ErrorContains(t, err, fmt.Sprintf("plan dp=2,zero=%d %s its replicas (zero=%d): ZeRO runs on CPU devices only so far", stage, what, stage))
		_, err = NewPlanRunner(p)
		require.ErrorContains(t, err, "ZeRO runs on CPU devices only")
	}
}

// Without a GPU, a plan with a GPU device is refused with the reason, and
// nothing else breaks.
func TestGPUNotAvailable(t *testing.T) {
	if _, err := OpenGPU(0); err == nil {
		t.Skip("this machine has a GPU")
	}
	p := compileOn(t, gpuDevices(t), "mlp", "single", 8, 0)
	_, err := NewPlanRunner(p)
	require.ErrorIs(t, err, cu.ErrNotAvailable)
	require.Contains(t, err.Error(), "gpu0")
}

func TestCatalogType(t *testing.T) {
	for _, c := range []struct {
		name string
		mem  int64
		want string
	}{
		{"NVIDIA H200", 141 << 30, "H200"},
		{"NVIDIA H100 80GB HBM3", 80 << 30, "H100"},
		{"NVIDIA A100-SXM4-80GB", 80 << 30, "A100-80"},
		{"NVIDIA A100-SXM4-40GB", 40 << 30, "A100-40"},
		{"Tesla V100-SXM2-16GB", 16 << 30, "V100-16"},
		{"Tesla T4", 15 << 30, "T4"},
		{"NVIDIA GeForce RTX 4090", 24 << 30, ""},
	} {
		got := catalogType(c.name, units.Bytes(c.mem))
		require.Equal(t, c.want, got, c.name)
		if got != "" {
			_, ok := topology.Lookup(got)
			require.True(t, ok, "%s is a catalog type", got)
		}
	}
}

// runPlan runs p for iters iterations on synthetic data and returns the
// runner (closed at the end of the test) and the losses.
func runPlan(t *testing.T, p *plans.Plan, iters int, eager bool) (*PlanRunner, []float64) {
	t.Helper()
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	r.Eager = eager
	r.TaskTimes = true
	res, err := r.Run(context.Background(), iters, NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7))
	require.NoError(t, err)
	if len(res.Trace.Events) > 0 {
		require.NoError(t, p.CheckTrace(res.Trace), "the GPU's trace obeys the plan")
	}
	require.Len(t, res.Steps, iters)
	return r, res.Loss
}

// The same plan on the GPU (graph replay and eager) computes what the CPU
// computes, in f32: the CNNs with convolution, pooling, dropout and
// cross-entropy, a ResNet with batch norm, the MLP and transformer workloads, LLaMA blocks, and GPT
// and LLaMA language models ($FLOWKIT_GPU_TEST_MODELS, semicolon-separated, picks some).
func TestGPUPlanMatchesCPU(t *testing.T) {
	openGPU(t)
	for _, c := range []struct {
		model, weight string
		batch         int
		iters         int  // 3 if 0
		raceless      bool // not under -race: emulated, its kernels take a minute without it
	}{
		{"mnist-cnn", "conv1.weight", 32, 0, false},
		{"cifar-cnn", "fc1.weight", 16, 0, false},
		{"mlp3x4096:width=64", "0.weight", 16, 0, false},
		// batch norm, strided and padded convolutions and pooling,
		// residual adds. One step: its last stages normalize 4 values a
		// channel (1×1 images), and training is chaotic there: on the
		// CPU alone, moving every batch norm's mean by one part in 10⁷
		// moves this weight by 1.6e-5 after one step, 2% after two and
		// 9% after three, so the GPU's float32 statistics can only be
		// held to the CPU's float64 ones for a step.
		{"resnet:depth=18,image=16", "layer1.0.conv1.weight", 4, 1, true},
		{"gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "layers.0.self_attn.in_proj_weight", 4, 0, false},
		{"gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16,norm=rms", "layers.1.norm2.weight", 4, 0, false},
		// rotary embeddings, grouped-query attention, SwiGLU
		{"llama-blocks:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16", "model.layers.0.self_attn.qkv_proj.weight", 4, 0, false},
		// flash attention: against the CPU's flash kernels, sequences
		// across the GPU's tiles, grouped-query attention
		{"gpt2s-blocks:layers=2,hidden=64,heads=4,seq=40,attention=flash", "layers.0.self_attn.in_proj_weight", 4, 0, false},
		{"llama-blocks:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,attention=flash", "model.layers.0.self_attn.qkv_proj.weight", 4, 0, false},
		// language models: token ids and next-token labels fed from a
		// pool on the GPU, embeddings, the head's cross-entropy at every
		// position
		{"gpt:layers=2,hidden=64,heads=4,seq=16,vocab=96", "wte.weight", 4, 0, false},
		{"gpt:layers=1,hidden=64,heads=4,seq=16,vocab=96,tie=on", "wte.weight", 4, 0, false}, // the head is the embedding
		{"llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,vocab=96", "model.embed_tokens.weight", 4, 0, false},
		// a masked language model: bidirectional attention, post-norm
		// blocks, the decoder's bias over the vocabulary
		{"bert:layers=2,hidden=64,heads=4,seq=16,vocab=96", "embeddings.word_embeddings.weight", 4, 0, false},
	} {
		if only := os.Getenv("FLOWKIT_GPU_TEST_MODELS"); only != "" && !slices.Contains(strings.Split(only, ";"), c.model) {
			continue
		}
		if c.raceless && raceEnabled {
			continue // the run without -race covers it (a skip would fail the emulator's run)
		}
		iters := cmp.Or(c.iters, 3)
		t.Run(c.model, func(t *testing.T) {
			ref, refLoss := runPlan(t, compileOn(t, cpuDevices(1), c.model, "single", c.batch, 0), iters, false)
			want, ok := ref.Param(c.weight, 0)
			require.True(t, ok)
			for _, eager := range []bool{false, true} {
				r, loss := runPlan(t, compileOn(t, gpuDevices(t), c.model, "single", c.batch, 0), iters, eager)
				if os.Getenv("FLOWKIT_FAKE_CUBLASLT_EPILOGUES") == "none" {
					require.NotEmpty(t, r.Notes(), "the fallbacks are reported")
				} else if notes := r.Notes(); len(notes) > 0 {
					t.Log(notes)
				}
				for i := range loss {
					require.InDelta(t, refLoss[i], loss[i], 1e-4*math.Abs(refLoss[i])+1e-6, "eager=%v loss of iteration %d", eager, i)
				}
				got, ok := r.Param(c.weight, 0)
				require.True(t, ok)
				require.Less(t, relDiff(got, want), 1e-4, "eager=%v: %s after %d steps", eager, c.weight, iters)
			}
		})
	}
}

// Recomputation on the GPU, full and selective (a captured graph and eager
// streams), computes what one CPU device computes without it.
func TestGPURecompute(t *testing.T) {
	openGPU(t)
	const iters, model, weight = 3, "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16", "layers.0.self_attn.in_proj_weight"
	ref, refLoss := runPlan(t, compileOn(t, cpuDevices(1), model, "single", 4, 0), iters, false)
	want, _ := ref.Param(weight, 0)
	for _, strategy := range []string{"mb=2,recompute=full", "recompute=selective"} {
		p := compileOn(t, gpuDevices(t), model, strategy, 4, 0)
		for _, eager := range []bool{false, true} {
			r, loss := runPlan(t, p, iters, eager)
			require.InDeltaSlice(t, refLoss, loss, 1e-4*math.Abs(refLoss[0]), "%s eager=%v", strategy, eager)
			got, _ := r.Param(weight, 0)
			require.Less(t, relDiff(got, want), 1e-4, "%s eager=%v", strategy, eager)
		}
	}
}

// Every GEMM policy computes the same: dense layers and products tuned
// (the default), as cuBLASLt's first algorithm with the epilogue fused, and
// as cuBLAS GEMMs and kernels. The tuned run reports what it timed.
func TestGPUGEMMPoliciesAgree(t *testing.T) {
	openGPU(t)
	p := compileOn(t, gpuDevices(t), "mlp3x4096:width=64", "single", 16, 0)
	tuned, want := runPlan(t, p, 3, false)
	tunings := tuned.Tunings()
	require.NotEmpty(t, tunings)
	for _, op := range []string{"dense", "dense_grad", "matmul"} {
		require.True(t, slices.ContainsFunc(tunings, func(s string) bool { return strings.Contains(s, ": "+op+" ") }),
			"no tuning of a %s among %q", op, tunings)
	}
	for _, policy := range []GEMMPolicy{GEMMFused, GEMMUnfused} {
		r, err := NewPlanRunner(p)
		require.NoError(t, err)
		r.GEMM = policy
		res, err := r.Run(context.Background(), 3, NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7))
		require.NoError(t, err)
		require.NoError(t, r.Close())
		for i := range want {
			require.InDelta(t, want[i], res.Loss[i], 1e-5*math.Abs(want[i])+1e-7, "%v: loss of iteration %d", policy, i)
		}
	}
}

// Inputs fed from the host (staged in page-locked memory and copied by
// the graph, or by each eager firing) give the GPU what the device-resident
// pool gives it: the same losses, in f32 and bf16, for images and for a
// language model's token ids and labels.
func TestGPUHostFedMatchesPooled(t *testing.T) {
	openGPU(t)
	for _, c := range []struct {
		model string
		dtype graph.DType
	}{{"mnist-cnn", graph.F32}, {"mlp3x4096:width=64", graph.BF16}, {"gpt:layers=1,hidden=32,heads=2,seq=8,vocab=64", graph.F32}} {
		t.Run(c.model+"/"+c.dtype.String(), func(t *testing.T) {
			p := compileOn(t, gpuDevices(t), c.model, "single", 8, c.dtype)
			for _, eager := range []bool{false, true} {
				var losses [2][]float64
				for i, feed := range []Feeder{NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7), hostFeeder{NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)}} {
					r, err := NewPlanRunner(p)
					require.NoError(t, err)
					r.Eager = eager
					res, err := r.Run(context.Background(), 2, feed)
					require.NoError(t, err)
					require.NoError(t, r.Close())
					losses[i] = res.Loss
				}
				for i := range losses[0] {
					require.InDelta(t, losses[0][i], losses[1][i], 1e-6*math.Abs(losses[0][i]), "eager=%v: loss of iteration %d", eager, i)
				}
			}
		})
	}
}

// A masked language model on the GPU, fed masked windows of text from the
// host (labels IgnoreLabel where not masked), computes what the CPU
// computes: the cross-entropy kernels score the masked rows only.
func TestGPUMaskedText(t *testing.T) {
	openGPU(t)
	train, _ := goText(t)
	const model, iters = "bert:layers=1,hidden=32,heads=2,seq=16,vocab=256", 3
	run := func(p *plans.Plan, eager bool) []float64 {
		feed, err := NewTextFeederFor(p.Model, train, p.Batch, p.Seed)
		require.NoError(t, err)
		r, err := NewPlanRunner(p)
		require.NoError(t, err)
		defer func() { require.NoError(t, r.Close()) }()
		r.Eager = eager
		res, err := r.Run(context.Background(), iters, feed)
		require.NoError(t, err)
		return res.Loss
	}
	want := run(compileOn(t, cpuDevices(1), model, "single", 8, 0), false)
	for _, eager := range []bool{false, true} {
		got := run(compileOn(t, gpuDevices(t), model, "single", 8, 0), eager)
		for i := range got {
			require.InDelta(t, want[i], got[i], 1e-4*math.Abs(want[i]), "eager=%v: loss of iteration %d", eager, i)
		}
	}
}

// bf16 on the GPU follows the f32 CPU run within bf16's precision: dense
// layers, attention, a language model's head, and the CNNs' convolutions,
// pooling and (in the ResNet) batch norms.
func TestGPUBF16Workloads(t *testing.T) {
	openGPU(t)
	for _, model := range []string{"mlp3x4096:width=128", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=32", "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=96",
		"gpt2s-blocks:layers=1,hidden=64,heads=4,seq=32,attention=flash", "llama-blocks:layers=1,hidden=256,heads=2,kv_heads=1,ffn=64,seq=16,attention=flash",
		"mnist-cnn", "resnet:depth=18,image=16"} {
		if model == "resnet:depth=18,image=16" && raceEnabled {
			continue // as in TestGPUPlanMatchesCPU: the run without -race covers it
		}
		t.Run(model, func(t *testing.T) {
			_, want := runPlan(t, compileOn(t, cpuDevices(1), model, "single", 8, 0), 2, false)
			_, got := runPlan(t, compileOn(t, gpuDevices(t), model, "single", 8, graph.BF16), 2, false)
			for i := range got {
				require.InDelta(t, want[i], got[i], 2e-2*math.Abs(want[i]), "loss of iteration %d", i)
			}
		})
	}
}

// Plans over the GPU and the host's CPU compute what one CPU device with
// the whole batch computes: a pipeline with stage 0 on the GPU (the PCIe
// copies are plan tasks), and data parallelism with a replica on each (the
// gradients' all-reduces cross PCIe; with buckets, packed and unpacked on
// each device), whose replicas end with the same bits.
func TestGPUHeterogeneous(t *testing.T) {
	openGPU(t)
	const iters = 3
	ref, refLoss := runPlan(t, compileOn(t, cpuDevices(1), "mnist-cnn", "single", 32, 0), iters, false)
	for _, c := range []struct {
		strategy string
		replicas int
	}{{"pp=2,mb=2,sched=1f1b", 1}, {"pp=2,mb=2,layers=3:1", 1}, {"dp=2", 2}, {"dp=2,mb=3:1", 2}, {"dp=2,bucket=64KiB", 2}} {
		t.Run(c.strategy, func(t *testing.T) {
			p := compileOn(t, gpuDevices(t), "mnist-cnn", c.strategy, 32, 0)
			require.True(t, isGPU(p.Devices[0]) && !isGPU(p.Devices[1]), "the GPU first, then the CPU")
			r, loss := runPlan(t, p, iters, false)
			for i := range loss {
				require.InDelta(t, refLoss[i], loss[i], 1e-4*math.Abs(refLoss[i])+1e-6, "loss of iteration %d", i)
			}
			for _, w := range []string{"conv1.weight", "fc2.weight", "fc2.bias"} {
				want, _ := ref.Param(w, 0)
				first, _ := r.Param(w, 0)
				for replica := range c.replicas {
					got, ok := r.Param(w, replica)
					require.True(t, ok, w)
					require.Less(t, relDiff(got, want), 1e-4, "%s of replica %d", w, replica)
					require.Equal(t, first, got, "%s: replica %d differs from replica 0", w, replica)
				}
			}
		})
	}
}

// On the GPU, too, iterations are numbered across Run calls, and a run
// resumed from a checkpoint goes on as one run does: Adam's step,
// dropout's masks (cifar-cnn) and the pooled feeder's batches follow the
// iteration number, in a captured graph and eagerly, with pooled and
// host-fed inputs.
func TestGPUResume(t *testing.T) {
	openGPU(t)
	st, err := plans.ParseStrategy("single", 2)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "cifar-cnn", Batch: 2, Strategy: st, Seed: 3,
		Optimizer: graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Devices: gpuDevices(t), Cluster: "h200-host"})
	require.NoError(t, err)
	pool := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
	for _, eager := range []bool{false, true} {
		for _, feed := range []Feeder{pool, hostFeeder{pool}} {
			run := func(r *PlanRunner, iters int) {
				t.Helper()
				_, err := r.Run(context.Background(), iters, feed)
				require.NoError(t, err)
			}
			newRunner := func() *PlanRunner {
				r, err := NewPlanRunner(p)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, r.Close()) })
				r.Eager = eager
				return r
			}
			store := func(r *PlanRunner) *Store {
				s, err := r.Store()
				require.NoError(t, err)
				return s
			}
			whole := newRunner()
			run(whole, 3)
			split := newRunner()
			run(split, 1)
			run(split, 2)
			requireSameWeights(t, store(whole), store(split))

			half := newRunner()
			run(half, 2)
			resumed := newRunner()
			require.NoError(t, resumed.Resume(&Checkpoint{Model: p.Model, Seed: p.Seed, Step: half.Iteration(), Weights: store(half)}))
			run(resumed, 1)
			require.Equal(t, 3, resumed.Iteration())
			requireSameWeights(t, store(whole), store(resumed))

			// Stopped before it begins, a run runs one whole iteration;
			// the next goes on from there.
			stopped := newRunner()
			stop := make(chan struct{})
			close(stop)
			stopped.Stop = stop
			res, err := stopped.Run(context.Background(), 3, feed)
			require.NoError(t, err)
			require.Len(t, res.Loss, 1)
			require.Positive(t, res.Loss[0], "the loss read back")
			require.Len(t, res.Steps, 1)
			require.Equal(t, 1, stopped.Iteration())
			stopped.Stop = nil
			run(stopped, 2)
			requireSameWeights(t, store(whole), store(stopped))
		}
	}
}

// AdamW and a learning-rate schedule on the GPU compute what the CPU
// does, replayed as a CUDA graph and eagerly, over runs that go on from one
// another: the captured updates read each step's rate from the tables the
// host refills (every third iteration here, so that the second run crosses
// a refill), the eager ones are given it.
func TestGPUSchedule(t *testing.T) {
	openGPU(t)
	defer func(n int) { rateCap = n }(rateCap)
	rateCap = 3
	for _, sched := range []graph.Schedule{{Decay: "cosine", Warmup: 2, Steps: 5, MinRatio: 0.1}, {}} {
		for _, eager := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/eager=%v", sched, eager), func(t *testing.T) {
				compile := func(devs []plans.Device) *plans.Plan {
					st, err := plans.ParseStrategy("single", 16)
					require.NoError(t, err)
					p, err := plans.Compile(plans.Config{Model: "mlp3x4096:width=64", Batch: 16, Strategy: st, Seed: 3,
						Optimizer: graph.Adam{LR: 3e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true, Schedule: sched},
						Devices:   devs, Cluster: "h200-host"})
					require.NoError(t, err)
					return p
				}
				ref, refLoss := runPlan(t, compile(cpuDevices(1)), 6, false)
				want, ok := ref.Param("0.weight", 0)
				require.True(t, ok)
				p := compile(gpuDevices(t))
				r, err := NewPlanRunner(p)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, r.Close()) })
				require.Empty(t, r.capturable(), "captured")
				r.Eager = eager
				feed := NewSyntheticFeeder(p.Images, 10, 4*p.Batch, 7)
				var loss []float64
				for _, iters := range []int{2, 4} {
					res, err := r.Run(context.Background(), iters, feed)
					require.NoError(t, err)
					if len(res.Trace.Events) > 0 {
						require.NoError(t, p.CheckTrace(res.Trace))
					}
					loss = append(loss, res.Loss...)
				}
				for i := range loss {
					require.InDelta(t, refLoss[i], loss[i], 1e-4*math.Abs(refLoss[i])+1e-6, "loss of iteration %d", i)
				}
				got, ok := r.Param("0.weight", 0)
				require.True(t, ok)
				require.Less(t, relDiff(got, want), 1e-4, "0.weight after 6 steps")
			})
		}
	}
}
