package cuda

import (
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// The benchmarks time the GPT-2-small kernels (bf16, batch 8, sequence 1024,
// width 768) on the device with CUDA events: gpu-us/op is device time per
// call, and GB/s (bytes each call must move, at least) or TFLOP/s the rate
// it reaches.

// benchGPU times run on the device.
func benchGPU(b *testing.B, bytes, flops float64, run func() error) {
	e := gpu(b)
	start, err := e.ctx.NewEvent(true)
	must(b, err)
	defer start.Destroy()
	end, err := e.ctx.NewEvent(true)
	must(b, err)
	defer end.Destroy()
	must(b, run()) // warm up: the first launch loads the module's code
	e.sync(b)
	must(b, start.Record(e.s))
	n := 0
	for b.Loop() {
		must(b, run())
		n++
	}
	must(b, end.Record(e.s))
	must(b, end.Synchronize())
	d, err := cu.Elapsed(start, end)
	must(b, err)
	per := d.Seconds() / float64(n)
	b.ReportMetric(per*1e6, "gpu-us/op")
	if bytes > 0 {
		b.ReportMetric(bytes/per/1e9, "GB/s")
	}
	if flops > 0 {
		b.ReportMetric(flops/per/1e12, "TFLOP/s")
	}
}

// benchBuf returns n elements of dt of device memory holding small random
// values (a random block repeated: drawing hundreds of millions would cost
// device time for nothing).
func benchBuf(b *testing.B, e *gpuEnv, dt graph.DType, n int) cu.DevicePtr {
	block := randIn(newRNG(uint64(n)), dt, min(n, 1<<16), -1, 1)
	vals := make([]float32, n)
	for i := 0; i < n; i += len(block) {
		copy(vals[i:], block)
	}
	return e.put(b, dt, vals)
}

const (
	gptRows   = 8 * 1024 // batch 8, sequence 1024
	gptWidth  = 768
	gptHeads  = 12
	gptSeq    = 1024
	gptBatch  = 8
	gptHidden = 4 * gptWidth
)

func BenchmarkLayerNorm_BF16_8192x768(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptWidth
	x, g, bb, y := benchBuf(b, e, dt, n), benchBuf(b, e, dt, gptWidth), benchBuf(b, e, dt, gptWidth), e.alloc(b, dt, n)
	m, r := e.alloc(b, graph.F32, gptRows), e.alloc(b, graph.F32, gptRows)
	benchGPU(b, float64(2*2*n), 0, func() error {
		return e.k.LayerNorm(e.s, dt, x, g, bb, y, m, r, gptRows, gptWidth, 1e-5)
	})
}

func BenchmarkLayerNormBackward_BF16_8192x768(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptWidth
	x, g, dy, dx := benchBuf(b, e, dt, n), benchBuf(b, e, dt, gptWidth), benchBuf(b, e, dt, n), e.alloc(b, dt, n)
	m, r := e.alloc(b, graph.F32, gptRows), e.alloc(b, graph.F32, gptRows)
	must(b, e.k.LayerNorm(e.s, dt, x, g, g, dx, m, r, gptRows, gptWidth, 1e-5))
	dg, db := e.alloc(b, dt, gptWidth), e.alloc(b, dt, gptWidth)
	work := e.alloc(b, graph.F32, int(LayerNormWorkspace(gptRows, gptWidth)/4))
	benchGPU(b, float64(3*2*n), 0, func() error {
		return e.k.LayerNormBackward(e.s, dt, x, g, dy, m, r, dx, dg, db, work, gptRows, gptWidth)
	})
}

func BenchmarkRMSNorm_BF16_8192x768(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptWidth
	x, g, y := benchBuf(b, e, dt, n), benchBuf(b, e, dt, gptWidth), e.alloc(b, dt, n)
	r := e.alloc(b, graph.F32, gptRows)
	benchGPU(b, float64(2*2*n), 0, func() error {
		return e.k.RMSNorm(e.s, dt, x, g, y, r, gptRows, gptWidth, 1e-5)
	})
}

func BenchmarkRMSNormBackward_BF16_8192x768(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptWidth
	x, g, dy, dx := benchBuf(b, e, dt, n), benchBuf(b, e, dt, gptWidth), benchBuf(b, e, dt, n), e.alloc(b, dt, n)
	r := e.alloc(b, graph.F32, gptRows)
	must(b, e.k.RMSNorm(e.s, dt, x, g, dx, r, gptRows, gptWidth, 1e-5))
	dg := e.alloc(b, dt, gptWidth)
	work := e.alloc(b, graph.F32, int(RMSNormWorkspace(gptRows, gptWidth)/4))
	benchGPU(b, float64(3*2*n), 0, func() error {
		return e.k.RMSNormBackward(e.s, dt, x, g, dy, r, dx, dg, work, gptRows, gptWidth)
	})
}

func BenchmarkSoftmax_BF16_96x1024x1024(b *testing.B) {
	e := gpu(b)
	dt, rows := graph.BF16, gptBatch*gptHeads*gptSeq
	x, y := benchBuf(b, e, dt, rows*gptSeq), e.alloc(b, dt, rows*gptSeq)
	benchGPU(b, float64(2*2*rows*gptSeq), 0, func() error { return e.k.Softmax(e.s, dt, x, y, rows, gptSeq) })
}

func BenchmarkSoftmaxBackward_BF16_96x1024x1024(b *testing.B) {
	e := gpu(b)
	dt, rows := graph.BF16, gptBatch*gptHeads*gptSeq
	y, dy, dx := benchBuf(b, e, dt, rows*gptSeq), benchBuf(b, e, dt, rows*gptSeq), e.alloc(b, dt, rows*gptSeq)
	benchGPU(b, float64(3*2*rows*gptSeq), 0, func() error { return e.k.SoftmaxBackward(e.s, dt, y, dy, dx, rows, gptSeq) })
}

func BenchmarkGELU_BF16_8192x3072(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptHidden
	x, y := benchBuf(b, e, dt, n), e.alloc(b, dt, n)
	benchGPU(b, float64(2*2*n), 0, func() error { return e.k.GELU(e.s, dt, x, y, n) })
}

func BenchmarkGELUBackward_BF16_8192x3072(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptHidden
	x, dy, dx := benchBuf(b, e, dt, n), benchBuf(b, e, dt, n), e.alloc(b, dt, n)
	benchGPU(b, float64(3*2*n), 0, func() error { return e.k.GELUBackward(e.s, dt, x, dy, dx, n) })
}

// BenchmarkBiasAct_BF16_8192x3072 is the bias and GELU of the MLP's first
// layer, fused: x and b read, y written.
func BenchmarkBiasAct_BF16_8192x3072(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptHidden
	x, bb, y := benchBuf(b, e, dt, n), benchBuf(b, e, dt, gptHidden), e.alloc(b, dt, n)
	benchGPU(b, float64(2*(2*n+gptHidden)), 0, func() error {
		return e.k.BiasAct(e.s, dt, cpu.ActGELU, x, bb, y, gptRows, gptHidden, 1)
	})
}

// BenchmarkBiasActBackward_BF16_8192x3072 is its gradient: x, b and dy
// read, dx written.
func BenchmarkBiasActBackward_BF16_8192x3072(b *testing.B) {
	e := gpu(b)
	dt, n := graph.BF16, gptRows*gptHidden
	x, bb, dy, dx := benchBuf(b, e, dt, n), benchBuf(b, e, dt, gptHidden), benchBuf(b, e, dt, n), e.alloc(b, dt, n)
	benchGPU(b, float64(2*(3*n+gptHidden)), 0, func() error {
		return e.k.BiasActBackward(e.s, dt, cpu.ActGELU, x, bb, dy, dx, gptRows, gptHidden, 1)
	})
}

// BenchmarkAttention_BF16_B8S1024H768 times a forward and a backward pass;
// the rate counts the GEMMs' 12·batch·seq²·hid FLOPs (causal masking
// saves none of them).
func BenchmarkAttention_BF16_B8S1024H768(b *testing.B) {
	e := gpu(b)
	dt, tt := graph.BF16, gptBatch*gptSeq
	qkv, out := benchBuf(b, e, dt, tt*3*gptWidth), e.alloc(b, dt, tt*gptWidth)
	probs := e.alloc(b, dt, gptBatch*gptHeads*gptSeq*gptSeq)
	dout, dqkv := benchBuf(b, e, dt, tt*gptWidth), e.alloc(b, dt, tt*3*gptWidth)
	work := e.alloc(b, dt, int(AttentionWorkspace(dt, gptSeq, gptHeads)/dt.Size()))
	flops := 12 * float64(gptBatch) * math.Pow(gptSeq, 2) * gptWidth
	benchGPU(b, 0, flops, func() error {
		if err := e.k.AttentionForward(e.s, dt, qkv, out, probs, gptBatch, gptSeq, gptHeads, gptHeads, gptWidth, true); err != nil {
			return err
		}
		return e.k.AttentionBackward(e.s, dt, qkv, probs, dout, dqkv, work, gptBatch, gptSeq, gptHeads, gptHeads, gptWidth, true)
	})
}

// BenchmarkFlashAttention_BF16_B8S1024H768 times flash attention on the
// same sizes, causal (a GPT's) and not (the gpt2s-blocks stack's, as
// PyTorch's nn.TransformerEncoder runs it), forward alone and with the
// backward pass; the rate counts the FLOPs BenchmarkAttention's does
// (12·batch·seq²·hid for both passes, 4·… forward), so that the two
// compare as times: the causal kernels skip the tiles above the diagonal,
// and the backward pass recomputes scores.
func BenchmarkFlashAttention_BF16_B8S1024H768(b *testing.B) {
	e := gpu(b)
	dt, tt := graph.BF16, gptBatch*gptSeq
	qkv, out := benchBuf(b, e, dt, tt*3*gptWidth), e.alloc(b, dt, tt*gptWidth)
	lse := e.alloc(b, graph.F32, gptBatch*gptHeads*gptSeq)
	dout, dqkv := benchBuf(b, e, dt, tt*gptWidth), e.alloc(b, dt, tt*3*gptWidth)
	work := e.alloc(b, graph.F32, int(FlashAttentionWorkspace(gptBatch, gptSeq, gptHeads)/4))
	flops := 4 * float64(gptBatch) * math.Pow(gptSeq, 2) * gptWidth
	for _, causal := range []bool{true, false} {
		mask := map[bool]string{true: "causal", false: "full"}[causal]
		fwd := func() error {
			return e.k.FlashAttentionForward(e.s, dt, qkv, out, lse, gptBatch, gptSeq, gptHeads, gptHeads, gptWidth, causal)
		}
		b.Run(mask+"/fwd", func(b *testing.B) { benchGPU(b, 0, flops, fwd) })
		b.Run(mask+"/fwd+bwd", func(b *testing.B) {
			benchGPU(b, 0, 3*flops, func() error {
				if err := fwd(); err != nil {
					return err
				}
				return e.k.FlashAttentionBackward(e.s, dt, qkv, out, lse, dout, dqkv, work, gptBatch, gptSeq, gptHeads, gptHeads, gptWidth, causal)
			})
		})
	}
}

// bnBenchShapes are [n, c, hw] of ResNet-50's batch norms at batch 256:
// the stem's, the first stage's widest, and the last stage's.
var bnBenchShapes = [][3]int{{256, 64, 112 * 112}, {256, 256, 56 * 56}, {256, 2048, 7 * 7}}

// benchBatchNorm runs bench on every dtype and shape of bnBenchShapes.
func benchBatchNorm(b *testing.B, bench func(b *testing.B, e *gpuEnv, dt graph.DType, n, c, hw int)) {
	for _, dt := range dtypes {
		for _, sh := range bnBenchShapes {
			b.Run(name(dt, "/", sh[0], "x", sh[1], "x", sh[2]), func(b *testing.B) { bench(b, gpu(b), dt, sh[0], sh[1], sh[2]) })
		}
	}
}

func BenchmarkBatchNorm(b *testing.B) {
	benchBatchNorm(b, func(b *testing.B, e *gpuEnv, dt graph.DType, n, c, hw int) {
		size := n * c * hw
		x, g, bb, y := benchBuf(b, e, dt, size), benchBuf(b, e, dt, c), benchBuf(b, e, dt, c), e.alloc(b, dt, size)
		work := e.alloc(b, graph.F32, int(BatchNormForwardWorkspace(n, c, hw)/4))
		benchGPU(b, float64(2*int(dt.Size())*size), 0, func() error {
			return e.k.BatchNorm(e.s, dt, x, g, bb, y, work, n, c, hw, 1e-5)
		})
	})
}

func BenchmarkBatchNormBackward(b *testing.B) {
	benchBatchNorm(b, func(b *testing.B, e *gpuEnv, dt graph.DType, n, c, hw int) {
		size := n * c * hw
		x, g, dy, dx := benchBuf(b, e, dt, size), benchBuf(b, e, dt, c), benchBuf(b, e, dt, size), e.alloc(b, dt, size)
		dg, db := e.alloc(b, dt, c), e.alloc(b, dt, c)
		work := e.alloc(b, graph.F32, int(BatchNormWorkspace(n, c, hw)/4))
		benchGPU(b, float64(3*int(dt.Size())*size), 0, func() error {
			return e.k.BatchNormBackward(e.s, dt, x, g, dy, dx, dg, db, work, n, c, hw, 1e-5)
		})
	})
}
