package search

import (
	"fmt"
	"testing"
)

// A sweep of a small GPT over four GPUs of a DGX A100: 85 strategies of
// data, tensor, sequence and pipeline parallelism, ZeRO and micro-batches,
// compiled and simulated one at a time and side by side.
func BenchmarkSweep_GPT_DGXA100_4(b *testing.B) {
	const model = "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=128"
	cfg := autoConfig(b, model, "dgx-a100", "dp=4", 16, false)
	strategies, err := Strategies(16, Space{Devices: 4, MaxMB: 4, MaxTP: 2, SP: true, Layers: 2, Zero: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				if _, err := Sweep(cfg, catalogModel(b, "dgx-a100"), strategies, Options{Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(strategies)), "strategies")
		})
	}
}
