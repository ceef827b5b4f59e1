package cpu

import "math"

// The exponentials of a softmax, e^(x−m) for the logits x of a row whose
// maximum is m, take most of the time of the attention scores and of a
// language model's loss, which math.Exp spends about 10 ns on each. Here
// they are computed to within 10⁻⁹ relative, far below a float32 ulp, in a
// few nanoseconds, in a loop with no call for the usual case:
//
// x = (32n + j)·ln2/32 + r with |r| ≤ ln2/64, so e^x = 2^n · 2^(j/32) ·
// e^r, and e^r is its Taylor polynomial of degree 4 (error r⁵/120 <
// 2·10⁻¹²). n·32 + j is rounded by adding 1.5·2⁵² (round to nearest,
// whose result's low mantissa bits are the integer), and 2^n scales
// 2^(j/32) ∈ [1, 2) by adding to its exponent, which stays normal for x >
// −708. Outside (−708, 0] — NaN, −∞, exponentials that are not normal
// float64s, and x > 0 — the result is math.Exp's.
//
// Every product is converted to float64 before it is added (the Go spec's
// way to forbid fusing the two into one rounding), so the bits are the
// same whether or not the compiler may use FMA instructions (GOAMD64=v3),
// and the same as the AVX2 loop's (exp_amd64.s).
const (
	expSteps = 32
	expShift = 0x1.8p52
	expScale = expSteps / math.Ln2
	expStep  = math.Ln2 / expSteps
	expMin   = -708
)

// expTable holds 2^(j/expSteps) for j < expSteps.
var expTable = func() (t [expSteps]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / expSteps)
	}
	return t
}()

// expInto sets y = exp(x − m) for a row x whose maximum is m, and returns
// Σ y in float64, added in order. On a CPU with AVX2 it runs four values
// at a time (exp_amd64.s), with the same arithmetic: the same bits.
func expInto(x, y []float32, m float32) float64 { return expIntoImpl(x, y, m) }

// expIntoGo is expInto in Go, its sum starting from s.
func expIntoGo(x, y []float32, m float32, s float64) float64 {
	y = y[:len(x)]
	for i, v := range x {
		d := float64(v) - float64(m)
		var e float64
		if d <= 0 && d > expMin {
			kd := float64(d*expScale) + expShift
			k := int64(math.Float64bits(kd) - math.Float64bits(expShift))
			r := d - float64((kd-expShift)*expStep)
			p := 1 + float64(r*(1+float64(r*(1.0/2+float64(r*(1.0/6+float64(r*(1.0/24))))))))
			e = float64(p * math.Float64frombits(math.Float64bits(expTable[k&(expSteps-1)])+uint64(k>>5)<<52))
		} else {
			e = math.Exp(d)
		}
		y[i] = float32(e)
		s += e
	}
	return s
}

// sumExp returns Σ exp(x − m) for a row whose maximum is m: a sum in
// [1, len(x)] whatever the size of the logits.
func sumExp(x []float32, m float32) float64 { return sumExpImpl(x, m) }

// sumExpGo is sumExp in Go.
func sumExpGo(x []float32, m float32) float64 {
	var s float64 // expInto's loop, storing nothing
	for _, v := range x {
		d := float64(v) - float64(m)
		if d <= 0 && d > expMin {
			kd := float64(d*expScale) + expShift
			k := int64(math.Float64bits(kd) - math.Float64bits(expShift))
			r := d - float64((kd-expShift)*expStep)
			p := 1 + float64(r*(1+float64(r*(1.0/2+float64(r*(1.0/6+float64(r*(1.0/24))))))))
			s += float64(p * math.Float64frombits(math.Float64bits(expTable[k&(expSteps-1)])+uint64(k>>5)<<52))
		} else {
			s += math.Exp(d)
		}
	}
	return s
}
