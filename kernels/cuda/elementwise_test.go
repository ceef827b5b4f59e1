package cuda

import (
	"math"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// elementwiseSizes cover the scalar tail alone, a vector and its tail, and
// enough for a grid of many blocks.
var elementwiseSizes = []int{1, 7, 1001, 1<<16 + 3}

func TestElementwiseGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(2)
	type op struct {
		name string
		acc  accuracy
		run  func(dt graph.DType, a, b, y cu.DevicePtr, n int) error
		ref  func(a, b, y float64) float64 // y is the output's value before
	}
	ops := []op{
		{"ReLU", exact, func(dt graph.DType, a, _, y cu.DevicePtr, n int) error { return e.k.ReLU(e.s, dt, a, y, n) },
			func(a, _, _ float64) float64 { return max(a, 0) }},
		{"ReLUBackward", exact, func(dt graph.DType, a, b, y cu.DevicePtr, n int) error { return e.k.ReLUBackward(e.s, dt, a, b, y, n) },
			func(a, b, _ float64) float64 {
				if a > 0 {
					return b
				}
				return 0
			}},
		{"GELU", exact, func(dt graph.DType, a, _, y cu.DevicePtr, n int) error { return e.k.GELU(e.s, dt, a, y, n) },
			func(a, _, _ float64) float64 { return refGELU(a) }},
		{"GELUBackward", compound, func(dt graph.DType, a, b, y cu.DevicePtr, n int) error { return e.k.GELUBackward(e.s, dt, a, b, y, n) },
			func(a, b, _ float64) float64 { return b * refGELUGrad(a) }},
		{"Add", exact, func(dt graph.DType, a, b, y cu.DevicePtr, n int) error { return e.k.Add(e.s, dt, a, b, y, n) },
			func(a, b, _ float64) float64 { return a + b }},
		{"Mul", exact, func(dt graph.DType, a, b, y cu.DevicePtr, n int) error { return e.k.Mul(e.s, dt, a, b, y, n) },
			func(a, b, _ float64) float64 { return a * b }},
		{"Scale", exact, func(dt graph.DType, a, _, y cu.DevicePtr, n int) error { return e.k.Scale(e.s, dt, -1.5, a, y, n) },
			func(a, _, _ float64) float64 { return -1.5 * a }},
		{"Axpy", compound, func(dt graph.DType, a, _, y cu.DevicePtr, n int) error { return e.k.Axpy(e.s, dt, 0.25, a, y, n) },
			func(a, _, y float64) float64 { return y + 0.25*a }},
		{"Copy", exact, func(dt graph.DType, a, _, y cu.DevicePtr, n int) error { return e.k.Copy(e.s, dt, a, y, n) },
			func(a, _, _ float64) float64 { return a }},
		{"Fill", exact, func(dt graph.DType, _, _, y cu.DevicePtr, n int) error { return e.k.Fill(e.s, dt, 0.75, y, n) },
			func(_, _, _ float64) float64 { return 0.75 }},
	}
	for _, o := range ops {
		for _, dt := range dtypes {
			for _, n := range elementwiseSizes {
				for _, off := range offsets {
					t.Run(name(o.name, "/", dt, "/", n, "/off", off), func(t *testing.T) {
						a, b, y0 := randIn(rng, dt, n, -4, 4), randIn(rng, dt, n, -1, 1), randIn(rng, dt, n, -1, 1)
						pa, pb, py := e.alloc(t, dt, n+1), e.alloc(t, dt, n+1), e.alloc(t, dt, n+1)
						pa, pb, py = at(pa, dt, off), at(pb, dt, off), at(py, dt, off)
						e.putAt(t, pa, dt, a)
						e.putAt(t, pb, dt, b)
						e.putAt(t, py, dt, y0)
						must(t, o.run(dt, pa, pb, py, n))
						want := make([]float64, n)
						for i := range want {
							want[i] = o.ref(float64(a[i]), float64(b[i]), float64(y0[i]))
						}
						check(t, o.name, dt, e.get(t, dt, py, n), want, o.acc)
					})
				}
			}
		}
	}
}

// TestReLUBitsGPU checks ReLU and its gradient against kernels/cpu bit for
// bit on the values where the rule matters: ±0, NaNs of both signs, ±Inf.
func TestReLUBitsGPU(t *testing.T) {
	e := gpu(t)
	x := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), -float32(math.NaN()),
		float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45, 3, -3}
	dy := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	y, dx := make([]float32, len(x)), make([]float32, len(x))
	cpu.ReLU(nil, x, y)
	cpu.ReLUBackward(nil, x, dy, dx)
	px, pdy, py, pdx := e.put(t, graph.F32, x), e.put(t, graph.F32, dy), e.alloc(t, graph.F32, len(x)), e.alloc(t, graph.F32, len(x))
	must(t, e.k.ReLU(e.s, graph.F32, px, py, len(x)))
	must(t, e.k.ReLUBackward(e.s, graph.F32, px, pdy, pdx, len(x)))
	gy, gdx := e.get(t, graph.F32, py, len(x)), e.get(t, graph.F32, pdx, len(x))
	for i := range x {
		if math.Float32bits(gy[i]) != math.Float32bits(y[i]) || math.Float32bits(gdx[i]) != math.Float32bits(dx[i]) {
			t.Errorf("x = %v: ReLU %v, gradient %v; kernels/cpu %v, %v", x[i], gy[i], gdx[i], y[i], dx[i])
		}
	}
}

// TestCastGPU checks both casts bit for bit against cu.BF16FromFloat32,
// ties and specials included.
func TestCastGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(3)
	for _, n := range elementwiseSizes {
		for _, off := range offsets {
			t.Run(name(n, "/off", off), func(t *testing.T) {
				x := randIn(rng, graph.F32, n, -100, 100)
				special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
					math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x7f7fffff), 1e-40}
				copy(x, special)
				pf, pb, pf2 := e.alloc(t, graph.F32, n+1), e.alloc(t, graph.BF16, n+1), e.alloc(t, graph.F32, n+1)
				pf, pb, pf2 = at(pf, graph.F32, off), at(pb, graph.BF16, off), at(pf2, graph.F32, off)
				e.putAt(t, pf, graph.F32, x)
				must(t, e.k.Cast(e.s, graph.F32, graph.BF16, pf, pb, n))
				must(t, e.k.Cast(e.s, graph.BF16, graph.F32, pb, pf2, n))
				b := e.getBytes(t, pb, 2*n)
				back := e.get(t, graph.F32, pf2, n)
				for i, v := range x {
					want := cu.BF16FromFloat32(v)
					got := uint16(b[2*i]) | uint16(b[2*i+1])<<8
					isNaN := want&0x7fff > 0x7f80
					if got != want && !(isNaN && got&0x7fff > 0x7f80) {
						t.Fatalf("element %d: %v → bf16 %#04x, want %#04x", i, v, got, want)
					}
					if math.Float32bits(back[i]) != math.Float32bits(cu.Float32FromBF16(got)) {
						t.Fatalf("element %d: bf16 %#04x → %v, want %v", i, got, back[i], cu.Float32FromBF16(got))
					}
				}
			})
		}
	}
}

// TestDropoutGPU checks the mask and scale against kernels/cpu bit for bit
// (f32), with the counter base from the host and from a device iteration.
func TestDropoutGPU(t *testing.T) {
	e := gpu(t)
	rng := newRNG(4)
	const seed, offset, perIter, it = 99, 12345, 1 << 20, 3
	for _, dt := range dtypes {
		for _, n := range elementwiseSizes {
			for _, rate := range []float32{0, 0.1, 0.5, 1} {
				for _, off := range offsets {
					t.Run(name(dt, "/", n, "/rate", rate, "/off", off), func(t *testing.T) {
						x := randIn(rng, dt, n, -2, 2)
						px, py, pz := e.alloc(t, dt, n+1), e.alloc(t, dt, n+1), e.alloc(t, dt, n+1)
						px, py, pz = at(px, dt, off), at(py, dt, off), at(pz, dt, off)
						e.putAt(t, px, dt, x)
						iter := e.putI64(t, it)
						must(t, e.k.Dropout(e.s, dt, px, py, rate, seed, offset+it*perIter, 0, 0, n))
						must(t, e.k.DropoutBackward(e.s, dt, px, pz, rate, seed, offset, iter, perIter, n))
						want := make([]float32, n)
						cpu.Dropout(nil, x, want, rate, seed, offset+it*perIter)
						for _, p := range []cu.DevicePtr{py, pz} {
							got := e.get(t, dt, p, n)
							for i := range got {
								// bf16: x·scale in float, rounded once.
								if w := round(dt, want[i]); got[i] != w {
									t.Fatalf("element %d: %v, kernels/cpu %v", i, got[i], round(dt, want[i]))
								}
							}
						}
					})
				}
			}
		}
	}
}
