package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

var activations = []struct {
	act Activation
	ref func(float64) float64
}{
	{ActReLU, func(v float64) float64 { return max(v, 0) }},
	{ActGELU, geluRef},
}

func biasActRef(x, b []float64, a axisShape, f func(float64) float64) []float64 {
	return mapRef(biasAddRef(x, b, a), f)
}

func TestBiasAct(t *testing.T) {
	for _, ac := range activations {
		for i, a := range axisCases {
			rng := newRNG(uint64(i) + 30)
			x, b := randSlice(rng, a.outer*a.mid*a.inner), randSlice(rng, a.mid)
			want := biasActRef(to64(x), to64(b), a, ac.ref)
			for _, tp := range testPools {
				t.Run(fmt.Sprint(ac.act, "/", a, "/", tp.name), func(t *testing.T) {
					y := make([]float32, len(x))
					BiasAct(tp.p, ac.act, x, b, y, a.outer, a.mid, a.inner)
					checkClose(t, "y", y, want, fwdTol)
					x := append([]float32(nil), x...)
					BiasAct(tp.p, ac.act, x, b, x, a.outer, a.mid, a.inner)
					checkClose(t, "in place", x, to64(y), 0)
				})
			}
		}
	}
}

// TestBiasActBackward checks dx against finite differences of the
// reference in x, and BiasGrad(dx) against those in b, at points where
// x + b is away from ReLU's kink.
func TestBiasActBackward(t *testing.T) {
	for _, ac := range activations {
		for i, a := range axisCases {
			n := a.outer * a.mid * a.inner
			if n > 5000 {
				continue // finite differences are quadratic
			}
			rng := newRNG(uint64(i) + 40)
			b := randSlice(rng, a.mid)
			x := awayFromZero(uint64(i)+50, n)
			for k := range x {
				x[k] -= b[k/a.inner%a.mid]
			}
			r := randSlice(rng, n)
			x64, b64 := to64(x), to64(b)
			wantDX := centralDiff(projected(r, func(x []float64) []float64 { return biasActRef(x, b64, a, ac.ref) }), x64, fdStep)
			wantDB := centralDiff(projected(r, func(b []float64) []float64 { return biasActRef(x64, b, a, ac.ref) }), b64, fdStep)
			for _, tp := range testPools {
				t.Run(fmt.Sprint(ac.act, "/", a, "/", tp.name), func(t *testing.T) {
					dx, db := make([]float32, n), make([]float32, a.mid)
					BiasActBackward(tp.p, ac.act, x, b, r, dx, a.outer, a.mid, a.inner)
					checkClose(t, "dx", dx, wantDX, gradTol)
					BiasGrad(tp.p, dx, db, a.outer, a.mid, a.inner)
					checkClose(t, "db", db, wantDB, gradTol)
					dy := append([]float32(nil), r...)
					BiasActBackward(tp.p, ac.act, x, b, dy, dy, a.outer, a.mid, a.inner)
					checkClose(t, "in place", dy, to64(dx), 0)
				})
			}
		}
	}
}

// sameBits reports whether a and b are the same float32, bit for bit, or
// both NaN: which NaN an operation on two NaNs gives (x86 gives its first
// operand) is not IEEE 754's to say, and the Go compiler may swap the
// operands of a commutative operation.
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || math.IsNaN(float64(a)) && math.IsNaN(float64(b))
}

// TestBiasActMatchesUnfused checks BiasAct and BiasActBackward bit for bit
// against BiasAdd followed by ReLU or GELU and their backward kernels, on
// random values and on those where the rules matter: sums of ±0, exactly
// 0, NaNs of both signs, ±Inf, subnormals.
func TestBiasActMatchesUnfused(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	special := []float32{0, negZero, 1, -1, 0.5, nan, -nan, inf, -inf, 1e-45, -1e-45, 3, -3, 1e30, -1e30}
	unfused := map[Activation]struct {
		fwd func(p *Pool, x, y []float32)
		bwd func(p *Pool, x, dy, dx []float32)
	}{
		ActReLU: {ReLU, ReLUBackward},
		ActGELU: {GELU, GELUBackward},
	}
	for _, a := range append(axisCases, axisShape{len(special), len(special), 1}, axisShape{2, len(special), 3}) {
		n := a.outer * a.mid * a.inner
		rng := newRNG(uint64(n))
		x, b, dy := randSlice(rng, n), randSlice(rng, a.mid), randSlice(rng, n)
		if a.mid == len(special) {
			copy(b, special)
			for k := range x {
				x[k] = special[(k/a.inner/a.mid+k)%len(special)] // every pair of x and b
			}
		}
		for _, ac := range activations {
			for _, tp := range testPools {
				t.Run(fmt.Sprint(ac.act, "/", a, "/", tp.name), func(t *testing.T) {
					z, want, wantDX := make([]float32, n), make([]float32, n), make([]float32, n)
					BiasAdd(tp.p, x, b, z, a.outer, a.mid, a.inner)
					unfused[ac.act].fwd(tp.p, z, want)
					unfused[ac.act].bwd(tp.p, z, dy, wantDX)
					y, dx := make([]float32, n), make([]float32, n)
					BiasAct(tp.p, ac.act, x, b, y, a.outer, a.mid, a.inner)
					BiasActBackward(tp.p, ac.act, x, b, dy, dx, a.outer, a.mid, a.inner)
					for k := range y {
						if !sameBits(y[k], want[k]) || !sameBits(dx[k], wantDX[k]) {
							t.Fatalf("x+b = %v+%v: got y %v, dx %v; want %v, %v (unfused)",
								x[k], b[k/a.inner%a.mid], y[k], dx[k], want[k], wantDX[k])
						}
					}
				})
			}
		}
	}
}

func TestBiasActPanicsOnBadCall(t *testing.T) {
	x := make([]float32, 24)
	for name, f := range map[string]func(){
		"BiasAct short b":          func() { BiasAct(nil, ActReLU, x, x[:3], x, 2, 4, 3) },
		"BiasAct bad dims":         func() { BiasAct(nil, ActGELU, x, x[:4], x, 2, 4, 2) },
		"BiasAct short y":          func() { BiasAct(nil, ActReLU, x, x[:4], x[:23], 2, 4, 3) },
		"BiasActBackward short dy": func() { BiasActBackward(nil, ActReLU, x, x[:4], x[:12], x, 2, 4, 3) },
		"BiasActBackward long dx":  func() { BiasActBackward(nil, ActGELU, x[:12], x[:4], x[:12], x, 3, 4, 1) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
	for name, f := range map[string]func(){
		"BiasAct":         func() { BiasAct(nil, 0, x, x[:4], x, 2, 4, 3) },
		"BiasActBackward": func() { BiasActBackward(nil, 7, x, x[:4], x, x, 2, 4, 3) },
	} {
		t.Run(name+" unknown activation", func(t *testing.T) {
			defer func() {
				if e, _ := recover().(error); e == nil || !strings.Contains(e.Error(), "unknown activation") {
					t.Errorf("panic got %v, want an unknown activation error", e)
				}
			}()
			f()
		})
	}
}

func TestParseActivation(t *testing.T) {
	for _, a := range []Activation{ActReLU, ActGELU} {
		got, err := ParseActivation(a.String())
		if err != nil || got != a {
			t.Errorf("ParseActivation(%q): got %v, %v; want %v", a.String(), got, err, a)
		}
	}
	if _, err := ParseActivation("tanh"); err == nil {
		t.Error("ParseActivation(\"tanh\"): got no error, want one")
	}
	if got := Activation(9).String(); got != "Activation(9)" {
		t.Errorf("got %q, want Activation(9)", got)
	}
}
