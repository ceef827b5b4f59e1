package runtime

import (
	"math/rand/v2"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
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
