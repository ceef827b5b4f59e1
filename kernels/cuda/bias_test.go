package cuda

import (
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// biasActShapes are axisShapes and the hidden layers of the MLP and the
// transformer: rows of 4096 and 3072 features.
var biasActShapes = append(axisShapes[:len(axisShapes):len(axisShapes)], [3]int{17, 4096, 1}, [3]int{64, 3072, 1})

// biasActRefs are the activations and their derivatives in float64.
var biasActRefs = []struct {
	act       cpu.Activation
	fwd, grad func(z float64) float64
}{
	{cpu.ActReLU, func(z float64) float64 { return max(z, 0) }, func(z float64) float64 {
		if z > 0 {
			return 1
		}
		return 0
	}},
	{cpu.ActGELU, refGELU, refGELUGrad},
}

// TestBiasActGPU checks BiasAct and BiasActBackward against float64
// references, on every layout: vectors of x meeting vectors of b, vectors
// meeting one b[j], and single elements (odd sizes, or views off by one
// element).
func TestBiasActGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(8)
	for _, a := range biasActRefs {
		for _, dt := range dtypes {
			for _, sh := range biasActShapes {
				for _, off := range offsets {
					outer, c, inner := sh[0], sh[1], sh[2]
					t.Run(name(a.act, "/", dt, "/", sh, "/off", off), func(t *testing.T) {
						n := outer * c * inner
						x, b, dy := randIn(rng, dt, n, -2, 2), randIn(rng, dt, c, -2, 2), randIn(rng, dt, n, -1, 1)
						view := func(k int) cu.DevicePtr { return at(e.alloc(t, dt, k+1), dt, off) }
						px, pb, pdy, py, pdx := view(n), view(c), view(n), view(n), view(n)
						e.putAt(t, px, dt, x)
						e.putAt(t, pb, dt, b)
						e.putAt(t, pdy, dt, dy)
						must(t, e.k.BiasAct(e.s, dt, a.act, px, pb, py, outer, c, inner))
						must(t, e.k.BiasActBackward(e.s, dt, a.act, px, pb, pdy, pdx, outer, c, inner))
						want, wantDX := make([]float64, n), make([]float64, n)
						for i := range want {
							z := float64(x[i]) + float64(b[(i/inner)%c])
							want[i], wantDX[i] = a.fwd(z), float64(dy[i])*a.grad(z)
						}
						check(t, "BiasAct", dt, e.get(t, dt, py, n), want, exact)
						check(t, "BiasActBackward", dt, e.get(t, dt, pdx, n), wantDX, compound)
					})
				}
			}
		}
	}
}

// TestBiasActBitsGPU checks the fused kernels in f32 bit for bit against
// BiasAdd followed by ReLU or GELU and their gradients on the device (both
// take their activations from activation.cuh), on random values and on
// sums where ReLU's rule matters: ±0, NaNs of both signs, ±Inf.
func TestBiasActBitsGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(9)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, nan, -nan, inf, -inf, 1e-45, -1e-45, 3, -3}
	dt := graph.F32
	for _, sh := range [][3]int{{len(special), len(special), 1}, {64, 3072, 1}, {5, 8, 16}, {7, 3, 5}} {
		outer, c, inner := sh[0], sh[1], sh[2]
		n := outer * c * inner
		x, b, dy := randIn(rng, dt, n, -4, 4), randIn(rng, dt, c, -2, 2), randIn(rng, dt, n, -1, 1)
		if c == len(special) {
			copy(b, special)
			for i := range x {
				x[i] = special[(i/c+i)%len(special)] // every pair of x and b
			}
		}
		px, pb, pdy := e.put(t, dt, x), e.put(t, dt, b), e.put(t, dt, dy)
		pz, py, pdx, want, wantDX := e.alloc(t, dt, n), e.alloc(t, dt, n), e.alloc(t, dt, n), e.alloc(t, dt, n), e.alloc(t, dt, n)
		must(t, e.k.BiasAdd(e.s, dt, px, pb, pz, outer, c, inner))
		for _, a := range biasActRefs {
			t.Run(name(a.act, "/", sh), func(t *testing.T) {
				switch a.act {
				case cpu.ActReLU:
					must(t, e.k.ReLU(e.s, dt, pz, want, n))
					must(t, e.k.ReLUBackward(e.s, dt, pz, pdy, wantDX, n))
				case cpu.ActGELU:
					must(t, e.k.GELU(e.s, dt, pz, want, n))
					must(t, e.k.GELUBackward(e.s, dt, pz, pdy, wantDX, n))
				}
				must(t, e.k.BiasAct(e.s, dt, a.act, px, pb, py, outer, c, inner))
				must(t, e.k.BiasActBackward(e.s, dt, a.act, px, pb, pdy, pdx, outer, c, inner))
				gy, gdx := e.get(t, dt, py, n), e.get(t, dt, pdx, n)
				wy, wdx := e.get(t, dt, want, n), e.get(t, dt, wantDX, n)
				for i := range gy {
					if math.Float32bits(gy[i]) != math.Float32bits(wy[i]) || math.Float32bits(gdx[i]) != math.Float32bits(wdx[i]) {
						t.Fatalf("x+b = %v+%v: got y %v, dx %v; unfused %v, %v", x[i], b[(i/inner)%c], gy[i], gdx[i], wy[i], wdx[i])
					}
				}
			})
		}
	}
}
