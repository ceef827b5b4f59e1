package cpu

import "math"

// The standard normal distribution's Φ and φ for GELU, which would cost
// math.Erf and math.Exp per element (about 30 and 15 ns here): tabulated once
// at steps of 1/normalSteps over [−normalRange, normalRange] and
// interpolated by cubic Hermite polynomials from the values and their
// derivatives (Φ′ = φ, φ′ = −x·φ), in float64, for a few nanoseconds. The
// interpolation error is at most h⁴/384·max|f⁗| ≈ 2·10⁻¹⁰ absolute
// (h = 1/64); relative to Φ, within a float32 ulp down to −5 and 10⁻⁵ in
// the tail, where v·Φ(v) is below 10⁻⁶. Below the range v·Φ(v) is under
// float32's smallest magnitude (Φ(−15) ≈ 4·10⁻⁵¹), so Φ is 0 there; above
// it, 1, as in float64.
const (
	normalRange = 15
	normalSteps = 64
)

// normalCDF and normalPDF hold, for each step [x_i, x_i + h) of the table
// (x_i = −normalRange + i·h, h = 1/normalSteps), the coefficients of the
// Hermite cubic of Φ and of φ in t = (x − x_i)/h, for Horner's rule.
var normalCDF, normalPDF = func() (cdf, pdf [2 * normalRange * normalSteps][4]float64) {
	const h = 1.0 / normalSteps
	at := func(i int) (x, p, d float64) {
		x = float64(i)*h - normalRange
		return x, 0.5 * math.Erfc(-x/math.Sqrt2), math.Exp(-0.5*x*x) / math.Sqrt(2*math.Pi)
	}
	for i := range cdf {
		x0, p0, d0 := at(i)
		x1, p1, d1 := at(i + 1)
		cdf[i] = hermite(p0, p1, h*d0, h*d1)         // Φ′ = φ
		pdf[i] = hermite(d0, d1, -h*x0*d0, -h*x1*d1) // φ′ = −x·φ
	}
	return cdf, pdf
}()

// hermite returns the coefficients, constant first, of the cubic on [0, 1]
// with values f0, f1 and derivatives m0, m1 at its ends.
func hermite(f0, f1, m0, m1 float64) [4]float64 {
	return [4]float64{f0, m0, 3*(f1-f0) - 2*m0 - m1, 2*(f0-f1) + m0 + m1}
}

// normalStep returns the table's step of v and v's place t in it; ok is
// false outside the table.
func normalStep(v float64) (i int, t float64, ok bool) {
	if !(v > -normalRange && v < normalRange) {
		return 0, 0, false
	}
	u := (v + normalRange) * normalSteps
	i = min(int(u), len(normalCDF)-1)
	return i, u - float64(i), true
}

// horner evaluates the cubic c at t.
func horner(c *[4]float64, t float64) float64 { return c[0] + t*(c[1]+t*(c[2]+t*c[3])) }

// normalCDFAt returns Φ(v): 0 below the table (and for NaN, so that v·Φ(v)
// stays NaN), 1 above it.
func normalCDFAt(v float64) float64 {
	i, t, ok := normalStep(v)
	if !ok {
		if v >= normalRange {
			return 1
		}
		return 0
	}
	return horner(&normalCDF[i], t)
}

// normal returns Φ(v) and φ(v), as normalCDFAt, and φ 0 outside the table.
func normal(v float64) (cdf, pdf float64) {
	i, t, ok := normalStep(v)
	if !ok {
		return normalCDFAt(v), 0
	}
	return horner(&normalCDF[i], t), horner(&normalPDF[i], t)
}
