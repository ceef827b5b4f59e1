package cpu

import (
	"fmt"
	"math"
	"testing"
)

type ropeShape struct {
	batch, seq, heads, kv, d int
	theta                    float64
}

func (s ropeShape) String() string {
	return fmt.Sprintf("b%d_s%d_h%d_kv%d_d%d_t%g", s.batch, s.seq, s.heads, s.kv, s.d, s.theta)
}

func (s ropeShape) cols() int { return (s.heads + 2*s.kv) * s.d }

// ropeCases cover multi-head and grouped-query layouts, the smallest head
// (d = 2), LLaMA-3's theta, and positions far enough along that the
// lowest frequencies turn.
var ropeCases = []ropeShape{
	{1, 1, 1, 1, 2, 10000},
	{2, 5, 2, 2, 4, 10000},
	{1, 7, 4, 2, 6, 500000},
	{3, 3, 3, 1, 8, 10000},
	{1, 300, 2, 1, 8, 10},
}

// ropeRef is RoPE straight from its definition: for each row, query and
// key head, out[i] = x[i]·cos − x[i+d/2]·sin and out[i+d/2] = x[i+d/2]·cos
// + x[i]·sin with angle pos/theta^(2i/d); values unchanged.
func ropeRef(x []float64, s ropeShape) []float64 {
	y := append([]float64(nil), x...)
	cols, half := s.cols(), s.d/2
	for r := range s.batch * s.seq {
		pos := float64(r % s.seq)
		for h := range s.heads + s.kv {
			for i := range half {
				a := pos / math.Pow(s.theta, float64(2*i)/float64(s.d))
				at := r*cols + h*s.d + i
				y[at] = x[at]*math.Cos(a) - x[at+half]*math.Sin(a)
				y[at+half] = x[at+half]*math.Cos(a) + x[at]*math.Sin(a)
			}
		}
	}
	return y
}

func TestRoPEForward(t *testing.T) {
	for i, s := range ropeCases {
		x := randSlice(newRNG(uint64(i)), s.batch*s.seq*s.cols())
		want := ropeRef(to64(x), s)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				y := randSlice(newRNG(99), len(x)) // garbage to overwrite
				RoPEForward(tp.p, x, y, s.batch*s.seq, s.seq, s.heads, s.kv, s.d, s.theta)
				checkClose(t, "y", y, want, fwdTol)
				in := append([]float32(nil), x...) // in place
				RoPEForward(tp.p, in, in, s.batch*s.seq, s.seq, s.heads, s.kv, s.d, s.theta)
				checkClose(t, "y in place", in, want, fwdTol)
			})
		}
	}
}

func TestRoPEBackward(t *testing.T) {
	for i, s := range ropeCases {
		n := s.batch * s.seq * s.cols()
		if n > 2000 { // finite differences are slow
			continue
		}
		x := randSlice(newRNG(uint64(i)+10), n)
		r := randSlice(newRNG(uint64(i)+11), n)
		want := centralDiff(projected(r, func(x []float64) []float64 { return ropeRef(x, s) }), to64(x), fdStep)
		for _, tp := range testPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				dx := randSlice(newRNG(97), n)
				RoPEBackward(tp.p, r, dx, s.batch*s.seq, s.seq, s.heads, s.kv, s.d, s.theta)
				checkClose(t, "dx", dx, want, gradTol)
			})
		}
	}
}

// Going forward then backward is the identity: the rotation is orthogonal.
func TestRoPEInverse(t *testing.T) {
	s := ropeCases[2]
	x := randSlice(newRNG(3), s.batch*s.seq*s.cols())
	y := make([]float32, len(x))
	RoPEForward(nil, x, y, s.batch*s.seq, s.seq, s.heads, s.kv, s.d, s.theta)
	RoPEBackward(nil, y, y, s.batch*s.seq, s.seq, s.heads, s.kv, s.d, s.theta)
	checkClose(t, "back", y, to64(x), fwdTol)
}

func TestRoPEPanicsOnBadCall(t *testing.T) {
	x := make([]float32, 2*3*8)
	for name, f := range map[string]func(){
		"odd d":                  func() { RoPEForward(nil, x, x, 2, 2, 1, 1, 3, 1e4) },
		"rows not sequences":     func() { RoPEForward(nil, x, x, 3, 2, 1, 1, 4, 1e4) },
		"kv heads do not divide": func() { RoPEForward(nil, x, x, 2, 2, 2, 3, 2, 1e4) },
		"theta":                  func() { RoPEForward(nil, x, x, 2, 2, 1, 1, 4, 0) },
		"short y":                func() { RoPEBackward(nil, x, x[1:], 2, 2, 1, 1, 4, 1e4) },
		"long x":                 func() { RoPEForward(nil, append(x, 0), x, 2, 2, 1, 1, 4, 1e4) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}

func swigluRef(g, u []float64) []float64 {
	y := make([]float64, len(g))
	for i, a := range g {
		y[i] = a / (1 + math.Exp(-a)) * u[i]
	}
	return y
}

func TestSwiGLU(t *testing.T) {
	for _, n := range []int{1, 7, 1000, 40000} {
		gate, up := randSlice(newRNG(uint64(n)), n), randSlice(newRNG(uint64(n)+1), n)
		Scale(nil, 4, gate, gate) // through the sigmoid's bend and out to its tails
		want := swigluRef(to64(gate), to64(up))
		for _, tp := range testPools {
			t.Run(fmt.Sprintf("n%d/%s", n, tp.name), func(t *testing.T) {
				y := randSlice(newRNG(9), n)
				SwiGLU(tp.p, gate, up, y)
				checkClose(t, "y", y, want, fwdTol)
				if n > 1000 { // finite differences are slow
					return
				}
				r := randSlice(newRNG(uint64(n)+2), n)
				gate64, up64 := to64(gate), to64(up)
				wantDG := centralDiff(projected(r, func(g []float64) []float64 { return swigluRef(g, up64) }), gate64, fdStep)
				wantDU := centralDiff(projected(r, func(u []float64) []float64 { return swigluRef(gate64, u) }), up64, fdStep)
				dg, du := randSlice(newRNG(7), n), randSlice(newRNG(8), n)
				SwiGLUBackward(tp.p, gate, up, r, dg, du)
				checkClose(t, "dgate", dg, wantDG, gradTol)
				checkClose(t, "dup", du, wantDU, gradTol)
			})
		}
	}
	mustPanicShape(t, func() { SwiGLU(nil, make([]float32, 3), make([]float32, 2), make([]float32, 3)) })
	mustPanicShape(t, func() {
		SwiGLUBackward(nil, make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 4))
	})
}
