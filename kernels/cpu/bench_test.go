package cpu

import (
	"testing"
	"time"

	"github.com/flowkit/flowkit/internal/cputime"
)

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	t, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// reportCPU reports the process's CPU time an iteration since c0: on a
// machine shared with other jobs, the work, where the wall time also
// counts the waits for a core.
func reportCPU(b *testing.B, c0 time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-c0)/float64(b.N), "cpu-ns/op")
}

// benchSgemm times C = op(A)·op(B) on pool p and reports GFLOP/s.
func benchSgemm(b *testing.B, p *Pool, transA, transB bool, m, n, k int) {
	rng := newRNG(1)
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	x := randSlice(rng, m*k)
	y := randSlice(rng, k*n)
	c := make([]float32, m*n)
	c0 := cpuTime(b)
	for b.Loop() {
		Sgemm(p, transA, transB, m, n, k, 1, x, lda, y, ldb, 0, c, n)
	}
	reportCPU(b, c0)
	flops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkSgemm_512(b *testing.B)  { benchSgemm(b, NewPool(0), false, false, 512, 512, 512) }
func BenchmarkSgemm_1024(b *testing.B) { benchSgemm(b, NewPool(0), false, false, 1024, 1024, 1024) }
func BenchmarkSgemm_2048(b *testing.B) { benchSgemm(b, NewPool(0), false, false, 2048, 2048, 2048) }

func BenchmarkSgemm_1024_Serial(b *testing.B) { benchSgemm(b, nil, false, false, 1024, 1024, 1024) }

// The MNIST CNN at batch 64, each layer as one GEMM over the batch
// (bench/openblas/sgemm.c times the same shapes).

// BenchmarkSgemm_MNISTConv1Fwd: 32 filters of 1·3·3 over 64·28·28 pixels.
func BenchmarkSgemm_MNISTConv1Fwd(b *testing.B) {
	benchSgemm(b, NewPool(0), false, false, 32, 64*28*28, 9)
}

// BenchmarkSgemm_MNISTConv2Fwd: 64 filters of 32·3·3 over 64·14·14 pixels.
func BenchmarkSgemm_MNISTConv2Fwd(b *testing.B) {
	benchSgemm(b, NewPool(0), false, false, 64, 64*14*14, 288)
}

// BenchmarkSgemm_MNISTConv2WGrad: dW = dY·colsᵀ, summed over the pixels.
func BenchmarkSgemm_MNISTConv2WGrad(b *testing.B) {
	benchSgemm(b, NewPool(0), false, true, 64, 288, 64*14*14)
}

// BenchmarkSgemm_MNISTFC1Fwd: Y = X·Wᵀ with W stored [128, 3136].
func BenchmarkSgemm_MNISTFC1Fwd(b *testing.B) {
	benchSgemm(b, NewPool(0), false, true, 64, 128, 3136)
}

// BenchmarkSgemm_MNISTFC1DGrad: dX = dY·W.
func BenchmarkSgemm_MNISTFC1DGrad(b *testing.B) {
	benchSgemm(b, NewPool(0), false, false, 64, 3136, 128)
}

// The byte-level GPT of results/text-gpt-cpu (hidden 128, 4 heads, seq
// 128, batch 16: 2048 rows): the weight gradients dW = dYᵀ·X, whose A is
// transposed.

// BenchmarkSgemm_GPTQKVWGrad: dW [384, 128] of the fused q/k/v projection.
func BenchmarkSgemm_GPTQKVWGrad(b *testing.B) {
	benchSgemm(b, NewPool(0), true, false, 384, 128, 2048)
}

// BenchmarkSgemm_GPTFC2WGrad: dW [128, 512] of the MLP's second layer.
func BenchmarkSgemm_GPTFC2WGrad(b *testing.B) {
	benchSgemm(b, NewPool(0), true, false, 128, 512, 2048)
}

// BenchmarkSgemm_GPTFC1Fwd: Y = X·Wᵀ of the MLP's first layer.
func BenchmarkSgemm_GPTFC1Fwd(b *testing.B) {
	benchSgemm(b, NewPool(0), false, true, 2048, 512, 128)
}

// BenchmarkSgemm_GPTProjFwd: Y = X·Wᵀ of the attention's output projection.
func BenchmarkSgemm_GPTProjFwd(b *testing.B) {
	benchSgemm(b, NewPool(0), false, true, 2048, 128, 128)
}

// BenchmarkSgemm_GPTFC2DGrad: dX = dY·W of the MLP's second layer.
func BenchmarkSgemm_GPTFC2DGrad(b *testing.B) {
	benchSgemm(b, NewPool(0), false, false, 2048, 512, 128)
}

// BenchmarkSgemm_GPTFC1DGrad: dX = dY·W of the MLP's first layer.
func BenchmarkSgemm_GPTFC1DGrad(b *testing.B) {
	benchSgemm(b, NewPool(0), false, false, 2048, 128, 512)
}
