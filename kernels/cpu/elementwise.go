package cpu

import (
	"errors"
	"fmt"
	"math"
)

// ErrShape reports dimensions that do not describe a valid operation, or
// slices whose lengths do not match their dimensions. Kernels panic with an
// error wrapping it: a mismatched call is a programming error.
var ErrShape = errors.New("cpu: bad shape")

// grainElems is the fewest elements an elementwise loop hands to one worker:
// below it, waking a goroutine costs more than the work.
const grainElems = 16 << 10

// shapeErr returns an error wrapping ErrShape that names the kernel.
func shapeErr(kernel, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrShape, kernel, fmt.Sprintf(format, args...))
}

// checkLen panics with ErrShape unless got == want.
func checkLen(kernel, name string, got, want int) {
	if got != want {
		panic(shapeErr(kernel, "len(%s) = %d, want %d", name, got, want))
	}
}

// rowGrain is the fewest rows of the given length to hand to one worker.
func rowGrain(rowLen int) int {
	return max(1, grainElems/max(1, rowLen))
}

// sum64 sums s in float64 with four independent accumulators, for
// reductions long enough that float32 accumulation would lose digits.
func sum64(s []float32) float64 {
	var a0, a1, a2, a3 float64
	i := 0
	for ; i+4 <= len(s); i += 4 {
		q := s[i : i+4 : i+4]
		a0 += float64(q[0])
		a1 += float64(q[1])
		a2 += float64(q[2])
		a3 += float64(q[3])
	}
	for ; i < len(s); i++ {
		a0 += float64(s[i])
	}
	return (a0 + a1) + (a2 + a3)
}

// ReLU sets y = max(x, 0). y may alias x.
func ReLU(p *Pool, x, y []float32) {
	checkLen("ReLU", "y", len(y), len(x))
	p.For(len(x), grainElems, func(lo, hi int) {
		x, y := x[lo:hi], y[lo:hi]
		y = y[:len(x)]
		for i, v := range x {
			y[i] = relu(v)
		}
	})
}

// relu is max(v, 0) as ReLU and BiasAct compute it.
func relu(v float32) float32 {
	b := math.Float32bits(v)
	return math.Float32frombits(b & positiveMask(b))
}

// reluGrad is dy where v > 0, else +0, as ReLUBackward and BiasActBackward
// compute it.
func reluGrad(v, dy float32) float32 {
	return math.Float32frombits(math.Float32bits(dy) & positiveMask(math.Float32bits(v)))
}

// positiveMask is all ones if the float with bits b is greater than zero
// (NaNs with the sign bit clear count as positive), else zero. Bit logic
// rather than a comparison: ReLU's inputs are positive about half the
// time at random, and a branch would mispredict on every other element.
func positiveMask(b uint32) uint32 {
	i := int32(b)
	return uint32((-i & ^i) >> 31)
}

// ReLUBackward sets dx = dy where x > 0 and 0 elsewhere.
func ReLUBackward(p *Pool, x, dy, dx []float32) {
	checkLen("ReLUBackward", "dy", len(dy), len(x))
	checkLen("ReLUBackward", "dx", len(dx), len(x))
	p.For(len(x), grainElems, func(lo, hi int) {
		x, dy, dx := x[lo:hi], dy[lo:hi], dx[lo:hi]
		dy, dx = dy[:len(x)], dx[:len(x)]
		for i, v := range x {
			dx[i] = reluGrad(v, dy[i])
		}
	})
}

// GELU sets y = x·Φ(x) = ½·x·(1+erf(x/√2)), the exact form (not the tanh
// approximation). y may alias x.
func GELU(p *Pool, x, y []float32) {
	checkLen("GELU", "y", len(y), len(x))
	p.For(len(x), grainElems/8, func(lo, hi int) {
		geluInto(x[lo:hi], y[lo:hi])
	})
}

// gelu is v·Φ(v) as GELU and BiasAct compute it: in float64 from the
// tabulated Φ (normalCDFAt), rounded once.
func gelu(v float32) float32 {
	t := float64(v)
	return float32(t * normalCDFAt(t))
}

// geluInto sets y = gelu(x), element by element; y may alias x. The
// lookup in the table is inlined for the values inside it: a call of
// normalCDFAt an element, which the compiler does not inline, cost as much
// as the arithmetic.
func geluInto(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		t := float64(v)
		k, u, ok := normalStep(t)
		if !ok {
			y[i] = gelu(v)
			continue
		}
		y[i] = float32(t * horner(&normalCDF[k], u))
	}
}

// GELUBackward sets dx = dy·(Φ(x) + x·φ(x)), the derivative of GELU.
func GELUBackward(p *Pool, x, dy, dx []float32) {
	checkLen("GELUBackward", "dy", len(dy), len(x))
	checkLen("GELUBackward", "dx", len(dx), len(x))
	p.For(len(x), grainElems/8, func(lo, hi int) {
		geluGradInto(x[lo:hi], dy[lo:hi], dx[lo:hi])
	})
}

// geluGrad is dy·(Φ(v) + v·φ(v)) as GELUBackward and BiasActBackward
// compute it: in float64, rounded once.
func geluGrad(v, dy float32) float32 {
	t := float64(v)
	cdf, pdf := normal(t)
	return float32(float64(dy) * (cdf + t*pdf))
}

// geluGradInto sets dx = geluGrad(x, dy), element by element; dx may alias
// dy. It converts x to float64 a block at a time for geluGrad64.
func geluGradInto(x, dy, dx []float32) {
	var t [geluBlock]float64
	for lo := 0; lo < len(x); lo += geluBlock {
		n := min(geluBlock, len(x)-lo)
		for k, v := range x[lo : lo+n] {
			t[k] = float64(v)
		}
		geluGrad64(t[:n], dy[lo:lo+n], dx[lo:lo+n])
	}
}

// geluBlock is the elements of the stack blocks of geluGradInto and
// geluGradBias.
const geluBlock = 256

// geluGrad64 sets dx = geluGrad(t, dy) for t already in float64, with the
// lookup in the table inlined as geluInto does. Its input comes in float64
// because the conversion from float32 in the loop (CVTSS2SD) merges into
// the register the compiler last gave the previous element's result: a
// false dependence that made every element wait for the one before (half
// the speed).
func geluGrad64(t []float64, dy, dx []float32) {
	dy, dx = dy[:len(t)], dx[:len(t)]
	for i, v := range t {
		k, u, ok := normalStep(v)
		if !ok {
			dx[i] = geluGrad(float32(v), dy[i])
			continue
		}
		cdf, pdf := horner(&normalCDF[k], u), horner(&normalPDF[k], u)
		dx[i] = float32(float64(dy[i]) * (cdf + v*pdf))
	}
}

// Add sets y = a + b.
func Add(p *Pool, a, b, y []float32) {
	checkLen("Add", "b", len(b), len(a))
	checkLen("Add", "y", len(y), len(a))
	p.For(len(a), grainElems, func(lo, hi int) {
		a, b, y := a[lo:hi], b[lo:hi], y[lo:hi]
		b, y = b[:len(a)], y[:len(a)]
		for i, v := range a {
			y[i] = v + b[i]
		}
	})
}

// Mul sets y = a ⊙ b.
func Mul(p *Pool, a, b, y []float32) {
	checkLen("Mul", "b", len(b), len(a))
	checkLen("Mul", "y", len(y), len(a))
	p.For(len(a), grainElems, func(lo, hi int) {
		a, b, y := a[lo:hi], b[lo:hi], y[lo:hi]
		b, y = b[:len(a)], y[:len(a)]
		for i, v := range a {
			y[i] = v * b[i]
		}
	})
}

// Scale sets y = alpha·x.
func Scale(p *Pool, alpha float32, x, y []float32) {
	checkLen("Scale", "y", len(y), len(x))
	p.For(len(x), grainElems, func(lo, hi int) {
		x, y := x[lo:hi], y[lo:hi]
		y = y[:len(x)]
		for i, v := range x {
			y[i] = alpha * v
		}
	})
}

// Axpy sets y += alpha·x, the accumulation of a gradient.
func Axpy(p *Pool, alpha float32, x, y []float32) {
	checkLen("Axpy", "y", len(y), len(x))
	p.For(len(x), grainElems, func(lo, hi int) {
		x, y := x[lo:hi], y[lo:hi]
		y = y[:len(x)]
		for i, v := range x {
			y[i] += alpha * v
		}
	})
}

// Copy sets y = x.
func Copy(p *Pool, x, y []float32) {
	checkLen("Copy", "y", len(y), len(x))
	p.For(len(x), 4*grainElems, func(lo, hi int) {
		copy(y[lo:hi], x[lo:hi])
	})
}

// Fill sets every element of y to v.
func Fill(p *Pool, v float32, y []float32) {
	p.For(len(y), 4*grainElems, func(lo, hi int) {
		y := y[lo:hi]
		if math.Float32bits(v) == 0 {
			clear(y)
			return
		}
		for i := range y {
			y[i] = v
		}
	})
}

// SwiGLU sets y = silu(gate)·up = gate·σ(gate)·up, LLaMA's gated MLP
// activation, in float64 and rounded once. y may alias gate or up.
func SwiGLU(p *Pool, gate, up, y []float32) {
	checkLen("SwiGLU", "up", len(up), len(gate))
	checkLen("SwiGLU", "y", len(y), len(gate))
	p.For(len(gate), grainElems/8, func(lo, hi int) {
		g, u, y := gate[lo:hi], up[lo:hi], y[lo:hi]
		u, y = u[:len(g)], y[:len(g)]
		for i, v := range g {
			a := float64(v)
			y[i] = float32(a / (1 + math.Exp(-a)) * float64(u[i]))
		}
	})
}

// SwiGLUBackward sets dgate = dy·up·σ(g)·(1 + g·(1 − σ(g))) and dup =
// dy·silu(g), g = gate, the gradients of SwiGLU.
func SwiGLUBackward(p *Pool, gate, up, dy, dgate, dup []float32) {
	const kernel = "SwiGLUBackward"
	checkLen(kernel, "up", len(up), len(gate))
	checkLen(kernel, "dy", len(dy), len(gate))
	checkLen(kernel, "dgate", len(dgate), len(gate))
	checkLen(kernel, "dup", len(dup), len(gate))
	p.For(len(gate), grainElems/8, func(lo, hi int) {
		g, u, dy, dg, du := gate[lo:hi], up[lo:hi], dy[lo:hi], dgate[lo:hi], dup[lo:hi]
		u, dy, dg, du = u[:len(g)], dy[:len(g)], dg[:len(g)], du[:len(g)]
		for i, v := range g {
			a, d := float64(v), float64(dy[i])
			s := 1 / (1 + math.Exp(-a))
			dg[i] = float32(d * float64(u[i]) * s * (1 + a*(1-s)))
			du[i] = float32(d * a * s)
		}
	})
}
