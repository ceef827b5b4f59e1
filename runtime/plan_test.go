package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
	"github.com/flowkit/flowkit/trace"
	"github.com/stretchr/testify/require"
)

func cpuDevices(n int) []plans.Device {
	devs := make([]plans.Device, n)
	for i := range devs {
		devs[i] = plans.Device{Name: "cpu" + string(rune('0'+i)), Type: "cpu", Workers: 1, Memory: 1 << 30}
	}
	return devs
}

func compile(t testing.TB, model, strategy string, batch int) *plans.Plan {
	t.Helper()
	return compileDType(t, model, strategy, batch, graph.F32)
}

// compileDType is compile with the model's float tensors of dtype.
func compileDType(t testing.TB, model, strategy string, batch int, dtype graph.DType) *plans.Plan {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 5, DType: dtype,
		Optimizer: graph.SGD{LR: 0.05, Momentum: 0.9}, Devices: cpuDevices(4)})
	require.NoError(t, err)
	return p
}

// One training step from the same weights and batch gives the same updated
// weights under every strategy (DESIGN: numerics are plan-independent).
func TestPlanNumericsIndependentOfStrategy(t *testing.T) {
	const batch = 16
	run := func(strategy string) *PlanRunner {
		p := compile(t, "mnist-cnn", strategy, batch)
		r, err := NewPlanRunner(p)
		require.NoError(t, err)
		feed := NewSyntheticFeeder(p.Images, 10, 64, 9)
		res, err := r.Run(context.Background(), 2, feed)
		require.NoError(t, err)
		require.NoError(t, p.CheckTrace(res.Trace), "the measured trace obeys the plan")
		return r
	}
	ref := run("single")
	initial, err := NewPlanRunner(compile(t, "mnist-cnn", "single", batch))
	require.NoError(t, err)
	w0, _ := initial.Param("fc1.weight", 0)
	w2, _ := ref.Param("fc1.weight", 0)
	require.Greater(t, relDiff(w2, w0), 1e-3, "two steps change the weights")
	for _, s := range []string{"dp=2", "pp=2,mb=4,sched=1f1b", "pp=2,mb=4,sched=gpipe", "mb=2", "dp=2,pp=2,mb=2",
		"dp=2,mb=3:1", "dp=2,pp=2,mb=1:3,sched=gpipe", "pp=2,layers=3:1,mb=2", "pp=3,layers=1:2:1,mb=4",
		"recompute=full", "pp=2,mb=4,sched=gpipe,recompute=full", "dp=2,mb=3:1,recompute=full",
		"pp=2,vpp=2,mb=2", "pp=2,vpp=2,mb=4", "dp=2,pp=2,vpp=2,mb=2", "pp=2,vpp=2,mb=4,recompute=full",
		"dp=2,zero=1", "dp=4,mb=2,zero=1", "dp=2,mb=3:1,zero=1", "dp=2,pp=2,mb=2,zero=1", "dp=4,mb=2,zero=2", "dp=2,pp=2,mb=2,zero=2",
		"dp=2,bucket=1MiB", "dp=2,mb=3:1,bucket=64KiB", "dp=2,pp=2,mb=2,bucket=1GiB", "dp=2,zero=1,bucket=1GiB"} {
		t.Run(s, func(t *testing.T) {
			got := run(s)
			for _, name := range []string{"conv1.weight", "conv2.bias", "fc1.weight", "fc2.bias"} {
				want, ok := ref.Param(name, 0)
				require.True(t, ok)
				for replica := range 2 {
					g, ok := got.Param(name, replica)
					if !ok {
						continue
					}
					if e := relDiff(g, want); e > 1e-5 {
						t.Errorf("%s (replica %d): relative difference %.3g from single, want ≤ 1e-5", name, replica, e)
					}
				}
			}
		})
	}
}

// Gradients all-reduced or reduce-scattered (ZeRO stage 1) in buckets
// (Strategy.Bucket) get the bits they get one by one: a reduction is
// element by element, whatever else its buffer holds. Every persistent register (weights, momenta) of
// every replica matches to the bit after three steps.
func TestBucketsKeepBits(t *testing.T) {
	for _, c := range []struct{ model, strategy string }{
		{"mnist-cnn", "dp=2"},
		{"mnist-cnn", "dp=2,mb=3:1"}, // weighted, through accumulators
		{"mnist-cnn", "dp=2,pp=2,mb=2"},
		{"mnist-cnn", "dp=3,mb=2:1:1,zero=1"}, // the weights ZeRO cannot split (by 3) are all-reduced, the others reduce-scattered
		{"mnist-cnn", "dp=2,mb=3:1,zero=1"},   // every weight reduce-scattered, weighted, and gathered
		{"mnist-cnn", "dp=2,mb=2,zero=2"},     // per micro-batch scatters; the gathers in buckets
		{"mlp", "dp=2,tp=2,zero=1"},
		{"mlp", "dp=2,tp=2"},
		{"mlp", "dp=4"},
	} {
		var ref *PlanRunner
		for _, bucket := range []string{"", ",bucket=64KiB", ",bucket=1GiB"} {
			t.Run(c.model+"/"+c.strategy+bucket, func(t *testing.T) {
				p := compile(t, c.model, c.strategy+bucket, 16)
				packs := 0
				for _, task := range p.Tasks {
					if task.Kind == plans.Pack {
						packs++
					}
				}
				if bucket == "" {
					require.Zero(t, packs)
				} else {
					require.NotZero(t, packs, "buckets of several gradients")
				}
				r, err := NewPlanRunner(p)
				require.NoError(t, err)
				res, err := r.Run(context.Background(), 3, NewSyntheticFeeder(p.Images, 10, 64, 9))
				require.NoError(t, err)
				require.NoError(t, p.CheckTrace(res.Trace))
				if ref == nil {
					ref = r
					return
				}
				for i, reg := range p.Registers {
					if !reg.Persistent {
						continue
					}
					want, err := ref.value(i) // the unbucketed plan's registers come first, in the same order
					require.NoError(t, err)
					require.Equal(t, ref.p.Registers[i].Name, reg.Name)
					got, err := r.value(i)
					require.NoError(t, err)
					require.Equal(t, want.F, got.F, "%s", reg.Name)
				}
			})
		}
	}
}

// The plan path computes what the graph executor computes.
func TestPlanMatchesExecutor(t *testing.T) {
	const batch = 8
	p := compile(t, "mlp", "single", batch)
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	feed := NewSyntheticFeeder(p.Images, 10, 32, 3)
	res, err := r.Run(context.Background(), 3, feed)
	require.NoError(t, err)

	m, g := buildTrain(t, "mlp", batch)
	store := NewStore(5)
	ex, err := NewExecutor(g, NewCPU(1), store)
	require.NoError(t, err)
	for it := range 3 {
		require.NoError(t, feed.Feed(it, 0, batch, ex.Buffer(m.Images).F, ex.Buffer(m.Labels).I))
		require.NoError(t, ex.Run(it))
		if got, want := res.Loss[it], float64(ex.Buffer(m.Loss).F[0]); math.Abs(got-want) > 1e-6*math.Abs(want) {
			t.Errorf("iteration %d: plan loss %g, executor loss %g", it, got, want)
		}
	}
	want, _ := store.Get("fc1.weight")
	got, _ := r.Param("fc1.weight", 0)
	require.Less(t, relDiff(got, want), 1e-6)
}

func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// A cancelled run stops promptly with the cause, whatever Stall says.
func TestPlanRunCancelled(t *testing.T) {
	p := compile(t, "mlp", "pp=2,mb=2", 8)
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	r.Stall = 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Run(ctx, 1000, NewSyntheticFeeder(p.Images, 10, 16, 1))
	require.ErrorIs(t, err, context.Canceled)
}

// A plan whose CPU arenas this machine's memory cannot hold is refused
// with an error saying how much it needs, before anything is allocated
// (it crashed the process with the Go runtime's out-of-memory error).
func TestPlanRunnerChecksHostMemory(t *testing.T) {
	have, ok := topology.HostMemory()
	if !ok {
		t.Skip("no /proc/meminfo")
	}
	p := compile(t, "mlp", "dp=2", 8)
	p.Memory[1].Peak = have // with device 0's arena, more than the machine has
	_, err := NewPlanRunner(p)
	require.ErrorContains(t, err, fmt.Sprintf("runtime: the plan's CPU devices need %v of memory (the largest, cpu1, %v), this machine has %v", have+p.Memory[0].Peak, have, have))
	p.Memory[1].Peak = p.Memory[0].Peak
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	require.NoError(t, r.Close())
}

// A feeder error stops the run with an error naming the firing.
func TestPlanRunFeederError(t *testing.T) {
	p := compile(t, "mlp", "dp=2", 8)
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	_, err = r.Run(context.Background(), 3, failingFeeder{})
	require.ErrorContains(t, err, "input/images")
	require.ErrorContains(t, err, "disk on fire")
}

// More iterations than a trace holds are refused before anything is
// allocated for them.
func TestPlanRunTooManyIterations(t *testing.T) {
	p := compile(t, "mlp", "single", 8)
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	_, err = r.Run(context.Background(), 1e12, NewSyntheticFeeder(p.Images, 10, 16, 1))
	require.ErrorContains(t, err, fmt.Sprintf("runtime: 1000000000000 iterations of %d firings each are more than the %d events a trace holds", len(p.Firings), trace.MaxEvents))
	_, err = r.Run(context.Background(), 0, NewSyntheticFeeder(p.Images, 10, 16, 1))
	require.ErrorContains(t, err, "iterations must be ≥ 1, got 0")
}

type failingFeeder struct{}

func (failingFeeder) Feed(int, int, int, []float32, []int32) error {
	return errors.New("disk on fire")
}

// Plans the GPU runtime cannot run yet are refused before any GPU is
// touched: several GPUs, and bf16 on a GPU and CPUs together.
// A plan listing one tensor-parallel rank for all (compiled for the
// simulator) is refused with what to do instead.
func TestPlanSharedTPRefused(t *testing.T) {
	st, err := plans.ParseStrategy("tp=2", 8)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: cpuDevices(2), SharedTP: true})
	require.NoError(t, err)
	_, err = NewPlanRunner(p)
	require.ErrorContains(t, err, "lists tensor-parallel rank 0 or data-parallel replica 0 only")
}

func TestPlanForGPUsRefused(t *testing.T) {
	st, err := plans.ParseStrategy("dp=2", 8)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: graph.SGD{LR: 0.1},
		Devices: []plans.Device{{Name: "gpu0", Type: "A100-SXM4-40GB", Workers: 1}, {Name: "gpu1", Type: "A100-SXM4-40GB", Workers: 1}}})
	require.NoError(t, err)
	_, err = NewPlanRunner(p)
	require.ErrorContains(t, err, "plans over several GPUs are not supported yet")

	p = compileOn(t, gpuDevices(t), "mlp", "dp=2", 8, graph.BF16) // the GPU and the host's CPU
	_, err = NewPlanRunner(p)
	require.ErrorContains(t, err, "plans placing 2-byte dtypes on GPUs and CPUs together are not supported")
}
