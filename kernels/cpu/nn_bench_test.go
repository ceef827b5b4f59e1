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

// BenchmarkMaxPool_MNIST pools conv1's output, the larger of the two.
func BenchmarkMaxPool_MNIST(b *testing.B) {
	s := mnistPool1
	p := NewPool(0)
	x := randSlice(newRNG(1), s.N*s.C*s.H*s.W)
	y := make([]float32, s.N*s.C*s.OutH()*s.OutW())
	dx := make([]float32, len(x))
	b.Run("Forward", func(b *testing.B) {
		for b.Loop() {
			MaxPool2DForward(p, s, x, y)
		}
	})
	b.Run("Backward", func(b *testing.B) {
		for b.Loop() {
			MaxPool2DBackward(p, s, x, y, dx)
		}
	})
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
