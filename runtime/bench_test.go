package runtime

import (
	"cmp"
	"context"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/internal/cputime"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// benchTrainStep times one training iteration (forward, backward, SGD with
// momentum) of a zoo model on random data.
func benchTrainStep(b *testing.B, model string, batch, workers int) {
	m, err := zoo.Build(model, zoo.Config{Batch: batch, Train: true, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01, Momentum: 0.9}); err != nil {
		b.Fatal(err)
	}
	ex, err := NewExecutor(m.Graph, NewCPU(workers), NewStore(1))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range ex.Buffer(m.Images).F {
		ex.Buffer(m.Images).F[i] = float32(rng.NormFloat64())
	}
	for i := range ex.Buffer(m.Labels).I {
		ex.Buffer(m.Labels).I[i] = int32(rng.IntN(10))
	}
	flops := float64(m.Graph.Cost().FLOPs)
	iter := 0
	for b.Loop() {
		if err := ex.Run(iter); err != nil {
			b.Fatal(err)
		}
		iter++
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e3, "ms/step")
	b.ReportMetric(float64(batch)/sec, "samples/s")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
}

func BenchmarkTrainStep_MNISTCNN_B64(b *testing.B)  { benchTrainStep(b, "mnist-cnn", 64, 0) }
func BenchmarkTrainStep_MNISTCNN_B256(b *testing.B) { benchTrainStep(b, "mnist-cnn", 256, 0) }
func BenchmarkTrainStep_MNISTCNN_B64_1Worker(b *testing.B) {
	benchTrainStep(b, "mnist-cnn", 64, 1)
}
func BenchmarkTrainStep_MLP_B64(b *testing.B) { benchTrainStep(b, "mlp", 64, 0) }

// benchTrainPlanStep times one training iteration of model through a
// single-device plan on the local cluster (all cores one device), as
// flowrun train runs it, with Adam.
func benchTrainPlanStep(b *testing.B, model string, batch int) {
	cluster, err := topology.Resolve("local")
	if err != nil {
		b.Fatal(err)
	}
	st, err := plans.ParseStrategy("single", batch)
	if err != nil {
		b.Fatal(err)
	}
	devs, err := plans.DevicesFor(cluster, st, false)
	if err != nil {
		b.Fatal(err)
	}
	p, err := plans.Compile(plans.Config{Model: model, Batch: batch, Strategy: st, Seed: 1,
		Optimizer: graph.Adam{LR: 3e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Cluster: cluster.Name, Devices: devs})
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewPlanRunner(p)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var flops float64
	for _, t := range p.Tasks {
		flops += float64(t.FLOPs)
	}
	classes, _ := zoo.Classes(model)
	feed := NewSyntheticFeeder(p.Images, classes, batch, 9)
	byOp := map[string]time.Duration{}
	cpu0 := cpuTime(b)
	for b.Loop() {
		res, err := r.Run(context.Background(), 1, feed)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range res.Trace.Events {
			t := res.Trace.Tasks[e.Task]
			byOp[t.Phase+" "+t.Op] += e.Dur()
			if os.Getenv("KEYS") != "" && (t.Op == "matmul" || t.Op == "dense_grad" || t.Op == "dense") {
				byOp[p.Tasks[e.Task].Key] += e.Dur()
			}
		}
	}
	cpuSec := (cpuTime(b) - cpu0).Seconds() / float64(b.N)
	sec := b.Elapsed().Seconds() / float64(b.N)
	if testing.Verbose() {
		// Where a step's time goes, by phase and op (-test.v).
		ops := slices.SortedFunc(maps.Keys(byOp), func(x, y string) int { return cmp.Compare(byOp[y], byOp[x]) })
		for _, op := range ops {
			b.Logf("%-30s %7.2f ms/step", op, byOp[op].Seconds()*1e3/float64(b.N))
		}
	}
	b.ReportMetric(sec*1e3, "ms/step")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	// The process's CPU time a step: the work, less sensitive than the
	// wall time to other jobs on a shared machine.
	b.ReportMetric(cpuSec*1e3, "cpu-ms/step")
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	t, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// The language model of results/text-gpt-cpu.
func BenchmarkTrainStep_GPTText_B16(b *testing.B) {
	benchTrainPlanStep(b, "gpt:layers=4,hidden=128,heads=4,seq=128,vocab=256", 16)
}
