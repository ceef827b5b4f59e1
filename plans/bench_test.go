package plans

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// The lifetimes of a pipeline of 16 stages with 64 micro-batches under
// 1F1B and full recompute, as memory planning computes them: vector clocks
// over two unrolled iterations, a pass per few devices.
func BenchmarkLifetimes_GPT_PP16_MB64(b *testing.B) {
	p := benchPlanFile(b)
	edges, err := p.Deps()
	if err != nil {
		b.Fatal(err)
	}
	touch, versions := p.registerTouches(), p.versionTouches()
	for b.Loop() {
		newLifetimes(p, edges, touch, versions)
	}
	b.ReportMetric(float64(len(p.Firings)), "firings")
}

// benchPlanFile compiles the plan the lifetimes and codec benchmarks
// work on: a pipeline of 16 stages with 64 micro-batches under 1F1B and full
// recompute (124 k firings).
func benchPlanFile(b *testing.B) *Plan {
	b.Helper()
	st, err := ParseStrategy("pp=16,mb=64,recompute=full", 64)
	if err != nil {
		b.Fatal(err)
	}
	p, err := Compile(Config{Model: "gpt:layers=16,hidden=32,heads=2,seq=8,vocab=64", Batch: 64, Strategy: st,
		Optimizer: graph.SGD{LR: 0.01}, Devices: devs(16, 0)})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func BenchmarkEncode_GPT_PP16_MB64(b *testing.B) {
	p := benchPlanFile(b)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := Encode(&buf, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
}

// Decoding includes the checks and Deps, as for any plan file read.
func BenchmarkDecode_GPT_PP16_MB64(b *testing.B) {
	p := benchPlanFile(b)
	var buf bytes.Buffer
	if err := Encode(&buf, p); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Decode(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes")
}

// Memory planning of every device of the pipeline benchPlanFile compiles:
// each register placed at the first offset clear of those it may be live
// with.
func BenchmarkPack_GPT_PP16_MB64(b *testing.B) {
	benchPack(b, pack)
}

// The same with the first fit as first written (packFirstFit), for
// comparison.
func BenchmarkPackFirstFit_GPT_PP16_MB64(b *testing.B) {
	benchPack(b, packFirstFit)
}

// Memory planning of a single device running a 512-layer GPT: 31 k
// registers, most of them live together with hundreds of others, where a
// scan of the placed registers for each would be quadratic.
func BenchmarkPack_GPT_Layers512(b *testing.B) {
	benchPackPlan(b, benchDeepPlan(b, 512), pack)
}

// benchDeepPlan compiles a single-device plan of a GPT of the given depth,
// narrow and short so that its registers are many but its compile quick.
func benchDeepPlan(b *testing.B, layers int) *Plan {
	b.Helper()
	st, err := ParseStrategy("single", 8)
	if err != nil {
		b.Fatal(err)
	}
	p, err := Compile(Config{Model: fmt.Sprintf("gpt:layers=%d,hidden=64,heads=4,seq=128", layers), Batch: 8, Strategy: st,
		Optimizer: graph.SGD{LR: 0.01, Momentum: 0.9}, Devices: devs(1, 0)})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchPack(b *testing.B, pack func(*Plan, *lifetimes, int, []int) Memory) {
	benchPackPlan(b, benchPlanFile(b), pack)
}

func benchPackPlan(b *testing.B, p *Plan, pack func(*Plan, *lifetimes, int, []int) Memory) {
	b.Helper()
	edges, err := p.Deps()
	if err != nil {
		b.Fatal(err)
	}
	lives := newLifetimes(p, edges, p.registerTouches(), p.versionTouches())
	byDevice := make([][]int, len(p.Devices))
	for r := range p.Registers {
		byDevice[p.Registers[r].Device] = append(byDevice[p.Registers[r].Device], r)
	}
	for b.Loop() {
		for d := range p.Devices {
			pack(p, lives, d, byDevice[d])
		}
	}
	b.ReportMetric(float64(len(p.Registers)), "registers")
}

// Compiling the pipeline benchPlanFile compiles, memory planning included.
func BenchmarkCompile_GPT_PP16_MB64(b *testing.B) {
	for b.Loop() {
		benchPlanFile(b)
	}
}
