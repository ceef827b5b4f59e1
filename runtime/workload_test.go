package runtime

import (
	"context"
	"math"
	"testing"

	"github.com/flowkit/flowkit/data"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
	"github.com/stretchr/testify/require"
)

// Small versions of the workloads without labels, and a weight of each.
var workloads = []struct {
	model, weight string
	batch         int
}{
	{"gpt2s-blocks:layers=2,hidden=16,heads=2,seq=8", "layers.0.self_attn.in_proj_weight", 4},
	{"mlp3x4096:width=32", "0.weight", 8},
}

var workloadOpt = graph.SGD{LR: 0.01}

func compileWorkload(t *testing.T, model, strategy string, batch int, dtype graph.DType) *plans.Plan {
	t.Helper()
	st, err := plans.ParseStrategy(strategy, batch)
	require.NoError(t, err)
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 5, DType: dtype,
		Optimizer: workloadOpt, Devices: cpuDevices(4)})
	require.NoError(t, err)
	return p
}

// runWorkload runs a plan for iters iterations on one batch fed again and
// again, checks the trace, and checks that Progress reports every
// iteration's loss.
func runWorkload(t *testing.T, p *plans.Plan, iters int) (*PlanRunner, []float64) {
	t.Helper()
	r, err := NewPlanRunner(p)
	require.NoError(t, err)
	reported := make([]float64, iters)
	r.Progress = func(iter int, loss float64) { reported[iter] = loss }
	res, err := r.Run(context.Background(), iters, NewSyntheticFeeder(p.Images, 10, p.Batch, 9))
	require.NoError(t, err)
	require.NoError(t, p.CheckTrace(res.Trace), "the measured trace obeys the plan")
	require.Equal(t, res.Loss, reported, "Progress reports each iteration's loss")
	return r, res.Loss
}

// The workloads without labels train through plans: the loss of one batch
// goes down step after step, and every strategy computes what the single
// device computes.
func TestWorkloadPlans(t *testing.T) {
	const iters = 3
	for _, w := range workloads {
		t.Run(w.model, func(t *testing.T) {
			ref, refLoss := runWorkload(t, compileWorkload(t, w.model, "single", w.batch, 0), iters)
			for i, l := range refLoss {
				require.False(t, math.IsNaN(l) || math.IsInf(l, 0), "iteration %d: loss %g", i, l)
				if i > 0 {
					require.Less(t, l, refLoss[i-1], "iteration %d", i)
				}
			}
			want, _ := ref.Param(w.weight, 0)
			strategies := []string{"dp=2", "pp=2,mb=2", "dp=2,pp=2,mb=2", "dp=2,mb=3:1", "pp=2,mb=2,recompute=full"}
			if zoo.KeepsAttentionProbs(w.model) { // what selective recomputation recomputes
				strategies = append(strategies, "pp=2,mb=2,recompute=selective")
			}
			for _, s := range strategies {
				t.Run(s, func(t *testing.T) {
					r, loss := runWorkload(t, compileWorkload(t, w.model, s, w.batch, 0), iters)
					require.InDeltaSlice(t, refLoss, loss, 1e-6*refLoss[0])
					for replica := range 2 {
						if got, ok := r.Param(w.weight, replica); ok {
							if e := relDiff(got, want); e > 1e-5 {
								t.Errorf("%s (replica %d): relative difference %.3g from single, want ≤ 1e-5", w.weight, replica, e)
							}
						}
					}
				})
			}
		})
	}
}

// The plan path computes what the graph executor computes, and a bf16
// plan (its arena widened: the CPU computes in f32) what the f32 plan does.
func TestWorkloadPlanMatchesExecutor(t *testing.T) {
	const iters = 2
	for _, w := range workloads {
		t.Run(w.model, func(t *testing.T) {
			p := compileWorkload(t, w.model, "single", w.batch, 0)
			_, loss := runWorkload(t, p, iters)

			m, err := zoo.Build(w.model, zoo.Config{Batch: w.batch, Train: true, Seed: 5})
			require.NoError(t, err)
			require.NoError(t, m.Graph.Minimize(m.Loss, workloadOpt))
			store := NewStore(5)
			ex, err := NewExecutor(m.Graph, NewCPU(1), store)
			require.NoError(t, err)
			feed := NewSyntheticFeeder(p.Images, 10, p.Batch, 9)
			for it := range iters {
				require.NoError(t, feed.Feed(it, 0, w.batch, ex.Buffer(m.Images).F, nil))
				require.NoError(t, ex.Run(it))
				if got, want := loss[it], float64(ex.Buffer(m.Loss).F[0]); math.Abs(got-want) > 1e-6*math.Abs(want) {
					t.Errorf("iteration %d: plan loss %g, executor loss %g", it, got, want)
				}
			}

			bf16 := compileWorkload(t, w.model, "pp=2,mb=2", w.batch, graph.BF16)
			require.Less(t, bf16.Memory[0].Peak, compileWorkload(t, w.model, "pp=2,mb=2", w.batch, 0).Memory[0].Peak)
			_, got := runWorkload(t, bf16, iters)
			_, want := runWorkload(t, compileWorkload(t, w.model, "pp=2,mb=2", w.batch, 0), iters)
			require.Equal(t, want, got)
		})
	}
}

// MNIST training refuses a model without labels, saying why.
func TestMNISTRefusesModelWithoutLabels(t *testing.T) {
	ds := &data.Dataset{Images: make([]uint8, 16*28*28), Labels: make([]uint8, 16), N: 16, Rows: 28, Cols: 28}
	err := checkInput("mlp3x4096:width=784", ds)
	require.ErrorContains(t, err, "has no labels")
	f, err := NewMNISTFeeder(ds, 4, 1)
	require.NoError(t, err)
	require.ErrorContains(t, f.Feed(0, 0, 2, make([]float32, 2*16), make([]int32, 2)), "the model's input takes 16 floats a sample")
}
