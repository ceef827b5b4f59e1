package cpu

import "testing"

// The MNIST CNN at batch 64: conv1 is 1→32 channels on 28×28, conv2 32→64
// on 14×14, both 3×3 with padding 1, each followed by 2×2 max pooling.
var (
	mnistConv1 = ConvShape{N: 64, C: 1, H: 28, W: 28, K: 32, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	mnistConv2 = ConvShape{N: 64, C: 32, H: 14, W: 14, K: 64, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	mnistPool1 = PoolShape{N: 64, C: 32, H: 28, W: 28, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
)

type convKernel func(p *Pool, s ConvShape, a, b, c []float32)

// benchConv times one conv kernel, whose operands come in the order of its
// parameters, and reports GFLOP/s (a multiply-add counts 2).
func benchConv(b *testing.B, s ConvShape, kernel convKernel, sizes [3]int) {
	p := NewPool(0)
	rng := newRNG(1)
	a, c := randSlice(rng, sizes[0]), randSlice(rng, sizes[1])
	out := make([]float32, sizes[2])
	for b.Loop() {
		kernel(p, s, a, c, out)
	}
	flops := 2 * float64(s.N*s.K*s.OutH()*s.OutW()*s.C*s.R*s.S) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func convSizes(s ConvShape) (x, w, y int) {
	return s.N * s.C * s.H * s.W, s.K * s.C * s.R * s.S, s.N * s.K * s.OutH() * s.OutW()
}

func benchConvForward(b *testing.B, s ConvShape) {
	x, w, y := convSizes(s)
	benchConv(b, s, Conv2DForward, [3]int{x, w, y})
}

func benchConvBackwardData(b *testing.B, s ConvShape) {
	x, w, y := convSizes(s)
	benchConv(b, s, Conv2DBackwardData, [3]int{y, w, x})
}

func benchConvBackwardFilter(b *testing.B, s ConvShape) {
	x, w, y := convSizes(s)
	benchConv(b, s, Conv2DBackwardFilter, [3]int{x, y, w})
}

func BenchmarkConv2DForward_MNISTConv1(b *testing.B)        { benchConvForward(b, mnistConv1) }
func BenchmarkConv2DForward_MNISTConv2(b *testing.B)        { benchConvForward(b, mnistConv2) }
func BenchmarkConv2DBackwardData_MNISTConv2(b *testing.B)   { benchConvBackwardData(b, mnistConv2) }
func BenchmarkConv2DBackwardFilter_MNISTConv1(b *testing.B) { benchConvBackwardFilter(b, mnistConv1) }
func BenchmarkConv2DBackwardFilter_MNISTConv2(b *testing.B) { benchConvBackwardFilter(b, mnistConv2) }

// BenchmarkMaxPool_MNIST pools conv1's output, the larger of the two:
// numbers of either sign, and after ReLU (as in the MNIST CNN: zeros and
// positive numbers).
func BenchmarkMaxPool_MNIST(b *testing.B) {
	s := mnistPool1
	p := NewPool(0)
	x := randSlice(newRNG(1), s.N*s.C*s.H*s.W)
	relued := make([]float32, len(x))
	for i, v := range x {
		relued[i] = max(v, 0)
	}
	y := make([]float32, s.N*s.C*s.OutH()*s.OutW())
	dx := make([]float32, len(x))
	for _, in := range []struct {
		name string
		x    []float32
	}{{"Signed", x}, {"ReLU", relued}} {
		b.Run(in.name+"/Forward", func(b *testing.B) {
			for b.Loop() {
				MaxPool2DForward(p, s, in.x, y)
			}
		})
		b.Run(in.name+"/Backward", func(b *testing.B) {
			for b.Loop() {
				MaxPool2DBackward(p, s, in.x, y, dx)
			}
		})
	}
}

func BenchmarkSoftmaxCE_64x10(b *testing.B) {
	const rows, cols = 64, 10
	p := NewPool(0)
	logits := randSlice(newRNG(1), rows*cols)
	labels := randLabels(2, rows, cols)
	dlogits := make([]float32, rows*cols)
	b.Run("Forward", func(b *testing.B) {
		for b.Loop() {
			if _, err := SoftmaxCrossEntropy(p, logits, labels, rows, cols); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Backward", func(b *testing.B) {
		for b.Loop() {
			if err := SoftmaxCrossEntropyBackward(p, logits, labels, 1, dlogits, rows, cols); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchAttention times causal attention forward and backward over the
// heads of batch sequences, with the probabilities kept and with flash
// attention, and reports GFLOP/s (QKᵀ and PV forward, four products
// backward, all the dense count, for both: the rates compare as times,
// though flash's backward recomputes the scores).
func benchAttention(b *testing.B, batch, seq, heads, hid int) {
	p := NewPool(0)
	rng := newRNG(1)
	qkv := randSlice(rng, batch*seq*3*hid)
	dout := randSlice(rng, batch*seq*hid)
	out := make([]float32, batch*seq*hid)
	probs := make([]float32, batch*heads*seq*seq)
	lse := make([]float32, batch*heads*seq)
	dqkv := make([]float32, len(qkv))
	flops := 2 * float64(batch*seq*seq*hid)
	run := func(name string, f func(), products float64) {
		b.Run(name, func(b *testing.B) {
			c0 := cpuTime(b)
			for b.Loop() {
				f()
			}
			reportCPU(b, c0)
			b.ReportMetric(products*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	run("Forward", func() { AttentionForward(p, qkv, out, probs, batch, seq, heads, heads, hid, true) }, 2)
	run("Backward", func() { AttentionBackward(p, qkv, probs, dout, dqkv, batch, seq, heads, heads, hid, true) }, 4)
	run("FlashForward", func() { FlashAttentionForward(p, qkv, out, lse, batch, seq, heads, heads, hid, true) }, 2)
	run("FlashBackward", func() { FlashAttentionBackward(p, qkv, out, lse, dout, dqkv, batch, seq, heads, heads, hid, true) }, 4)
}

// BenchmarkAttention_GPTText: the GPT of results/text-gpt-cpu.
func BenchmarkAttention_GPTText(b *testing.B) { benchAttention(b, 16, 128, 4, 128) }

// BenchmarkAttention_Seq1024: one GPT-2-small sequence of 1024 positions
// (12 heads of 64), where the probabilities are 48 MiB.
func BenchmarkAttention_Seq1024(b *testing.B) { benchAttention(b, 1, 1024, 12, 768) }

// benchBiasGELU times BiasAct and BiasActBackward with GELU on rows×cols.
func benchBiasGELU(b *testing.B, rows, cols int) {
	p := NewPool(0)
	rng := newRNG(1)
	x, bias, dy := randSlice(rng, rows*cols), randSlice(rng, cols), randSlice(rng, rows*cols)
	for i := range x {
		x[i] *= 3
	}
	y := make([]float32, rows*cols)
	b.Run("Forward", func(b *testing.B) {
		c0 := cpuTime(b)
		for b.Loop() {
			BiasAct(p, ActGELU, x, bias, y, rows, cols, 1)
		}
		reportCPU(b, c0)
	})
	b.Run("Backward", func(b *testing.B) {
		c0 := cpuTime(b)
		for b.Loop() {
			BiasActBackward(p, ActGELU, x, bias, dy, y, rows, cols, 1)
		}
		reportCPU(b, c0)
	})
}

// BenchmarkBiasGELU_GPTText: the MLP's first layer of the text GPT.
func BenchmarkBiasGELU_GPTText(b *testing.B) { benchBiasGELU(b, 2048, 512) }

// BenchmarkSoftmaxCE_GPTText: the text GPT's loss, 2048 rows over 256 bytes.
func BenchmarkSoftmaxCE_GPTText(b *testing.B) {
	const rows, cols = 2048, 256
	p := NewPool(0)
	logits := randSlice(newRNG(1), rows*cols)
	labels := randLabels(2, rows, cols)
	dlogits := make([]float32, rows*cols)
	b.Run("Forward", func(b *testing.B) {
		c0 := cpuTime(b)
		for b.Loop() {
			if _, err := SoftmaxCrossEntropy(p, logits, labels, rows, cols); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, c0)
	})
	b.Run("Backward", func(b *testing.B) {
		c0 := cpuTime(b)
		for b.Loop() {
			if err := SoftmaxCrossEntropyBackward(p, logits, labels, 1, dlogits, rows, cols); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, c0)
	})
}

// BenchmarkBiasGrad_GPTText: the bias gradient of the MLP's first layer.
func BenchmarkBiasGrad_GPTText(b *testing.B) {
	const rows, cols = 2048, 512
	p := NewPool(0)
	dy := randSlice(newRNG(1), rows*cols)
	db := make([]float32, cols)
	c0 := cpuTime(b)
	for b.Loop() {
		BiasGrad(p, dy, db, rows, cols, 1)
	}
	reportCPU(b, c0)
}

// BenchmarkBiasReLU_MNISTConv1: bias and ReLU after the MNIST CNN's first
// convolution at batch 64 ([64, 32, 28, 28]), by each implementation of
// the ReLU rows, side by side.
func BenchmarkBiasReLU_MNISTConv1(b *testing.B) {
	const n, c, hw = 64, 32, 28 * 28
	p := NewPool(0)
	r := newRNG(1)
	x, dy, bias := randSlice(r, n*c*hw), randSlice(r, n*c*hw), randSlice(r, c)
	y := make([]float32, len(x))
	def := reluRowsDefault
	defer func() { reluRowsDefault = def }()
	for _, impl := range reluRowsImpls {
		reluRowsDefault = impl
		b.Run(impl.name+"/Forward", func(b *testing.B) {
			b.SetBytes(int64(8 * len(x)))
			for b.Loop() {
				BiasAct(p, ActReLU, x, bias, y, n, c, hw)
			}
		})
		b.Run(impl.name+"/Backward", func(b *testing.B) {
			b.SetBytes(int64(12 * len(x)))
			for b.Loop() {
				BiasActBackward(p, ActReLU, x, bias, dy, y, n, c, hw)
			}
		})
	}
}
