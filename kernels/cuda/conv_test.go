package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
)

// convShapes cover padding, strides, non-square filters, 1×1 filters (the
// pointwise path), a batch of one (no swap), and the MNIST and CIFAR
// layers' shapes at a small batch.
var convShapes = []cpu.ConvShape{
	{N: 2, C: 3, H: 8, W: 7, K: 4, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1},
	{N: 1, C: 2, H: 9, W: 9, K: 3, R: 3, S: 2, StrideH: 2, StrideW: 3, PadH: 0, PadW: 1},
	{N: 3, C: 5, H: 4, W: 4, K: 6, R: 1, S: 1, StrideH: 1, StrideW: 1},
	{N: 2, C: 4, H: 6, W: 6, K: 2, R: 5, S: 5, StrideH: 1, StrideW: 1, PadH: 2, PadW: 2},
	{N: 4, C: 1, H: 28, W: 28, K: 8, R: 5, S: 5, StrideH: 1, StrideW: 1},
	{N: 2, C: 16, H: 16, W: 16, K: 32, R: 3, S: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1},
	{N: 2, C: 3, H: 11, W: 13, K: 5, R: 3, S: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
}

// The convolutions and pooling are compared with kernels/cpu, whose own
// tests check them against float64 references and finite differences; in
// bf16, on the same bf16 inputs, to 1e-2 norm-wise (the column matrices and
// products are rounded to bf16 on the GPU).
func TestConvGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(14)
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		for _, sh := range convShapes {
			t.Run(name(dt, "/", sh), func(t *testing.T) {
				nx, nw, ny := sh.N*sh.C*sh.H*sh.W, sh.K*sh.C*sh.R*sh.S, sh.N*sh.K*sh.OutH()*sh.OutW()
				x, w, dy := randIn(rng, dt, nx, -1, 1), randIn(rng, dt, nw, -1, 1), randIn(rng, dt, ny, -1, 1)
				px, pw, pdy := e.put(t, dt, x), e.put(t, dt, w), e.put(t, dt, dy)
				work := e.alloc(t, dt, int(ConvWorkspace(sh, dt)/dt.Size()))

				py := e.alloc(t, dt, ny)
				must(t, e.k.Conv2DForward(e.s, dt, sh, px, pw, py, work))
				y := make([]float32, ny)
				cpu.Conv2DForward(nil, sh, x, w, y)
				check(t, "Conv2DForward", dt, e.get(t, dt, py, ny), to64(y), compound)

				pdx := e.alloc(t, dt, nx)
				must(t, e.k.Conv2DBackwardData(e.s, dt, sh, pdy, pw, pdx, work))
				dx := make([]float32, nx)
				cpu.Conv2DBackwardData(nil, sh, dy, w, dx)
				check(t, "Conv2DBackwardData", dt, e.get(t, dt, pdx, nx), to64(dx), compound)

				pdw := e.alloc(t, dt, nw)
				must(t, e.k.Conv2DBackwardFilter(e.s, dt, sh, px, pdy, pdw, work))
				dw := make([]float32, nw)
				cpu.Conv2DBackwardFilter(nil, sh, x, dy, dw)
				check(t, "Conv2DBackwardFilter", dt, e.get(t, dt, pdw, nw), to64(dw), compound)
			})
		}
	}
}

// TestMaxPoolGPU requires kernels/cpu's results bit for bit: the same
// maxima, the gradient routed to the same element among ties (inputs after a
// ReLU, mostly zeros, and coarsely quantized values), and overlapping
// windows added in the same order; in bf16, on the same bf16 inputs, the
// CPU's float results rounded to bf16 (a maximum is one of the inputs, and
// the GPU rounds a float sum once).
func TestMaxPoolGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(15)
	shapes := []cpu.PoolShape{
		{N: 2, C: 3, H: 8, W: 8, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
		{N: 1, C: 2, H: 7, W: 9, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
		{N: 2, C: 2, H: 9, W: 8, KH: 3, KW: 2, StrideH: 1, StrideW: 1, PadH: 1, PadW: 0},
		{N: 4, C: 8, H: 28, W: 28, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
		{N: 1, C: 1, H: 5, W: 5, KH: 5, KW: 5, StrideH: 1, StrideW: 1, PadH: 2, PadW: 2},
	}
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		for _, sh := range shapes {
			for _, kind := range []string{"random", "relu", "quantized", "specials"} {
				t.Run(name(dt, "/", sh, "/", kind), func(t *testing.T) { testMaxPoolGPU(t, e, rng, dt, sh, kind) })
			}
		}
	}
}

func testMaxPoolGPU(t *testing.T, e *gpuEnv, rng *rand.Rand, dt graph.DType, sh cpu.PoolShape, kind string) {
	nx, ny := sh.N*sh.C*sh.H*sh.W, sh.N*sh.C*sh.OutH()*sh.OutW()
	x, dy := randIn(rng, dt, nx, -1, 1), randIn(rng, dt, ny, -1, 1)
	for i, v := range x {
		switch kind {
		case "relu":
			x[i] = max(v, 0)
		case "quantized":
			x[i] = float32(math.Round(float64(v) * 2))
		case "specials":
			switch i % 7 {
			case 0:
				x[i] = float32(math.Copysign(0, -1))
			case 3:
				x[i] = 0
			case 5:
				if i%3 == 0 {
					x[i] = float32(math.NaN())
				}
			}
		}
	}
	px, pdy, py, pdx := e.put(t, dt, x), e.put(t, dt, dy), e.alloc(t, dt, ny), e.alloc(t, dt, nx)
	must(t, e.k.MaxPool2DForward(e.s, dt, sh, px, py))
	must(t, e.k.MaxPool2DBackward(e.s, dt, sh, px, pdy, pdx))
	y, dx := make([]float32, ny), make([]float32, nx)
	cpu.MaxPool2DForward(nil, sh, x, y)
	cpu.MaxPool2DBackward(nil, sh, x, dy, dx)
	same := func(a, b float32) bool {
		return a == b || (math.IsNaN(float64(a)) && math.IsNaN(float64(b)))
	}
	for i, g := range e.get(t, dt, py, ny) {
		if !same(g, y[i]) {
			t.Fatalf("y[%d] = %v, kernels/cpu %v", i, g, y[i])
		}
	}
	for i, g := range e.get(t, dt, pdx, nx) {
		if want := round(dt, dx[i]); math.Float32bits(g) != math.Float32bits(want) {
			t.Fatalf("dx[%d] = %v, kernels/cpu %v", i, g, want)
		}
	}
}
