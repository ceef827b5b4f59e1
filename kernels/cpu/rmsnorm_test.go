package cpu

import (
	"math"
	"testing"
)

const rmsEps = 1e-6

// rmsNormRef returns y, and each row's 1/√(mean(x²)+eps).
func rmsNormRef(x, gamma []float64, rows, cols int) (y, rstd []float64) {
	y, rstd = make([]float64, len(x)), make([]float64, rows)
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		var ss float64
		for _, e := range row {
			ss += e * e
		}
		rs := 1 / math.Sqrt(ss/float64(cols)+rmsEps)
		for j, e := range row {
			y[r*cols+j] = e * rs * gamma[j]
		}
		rstd[r] = rs
	}
	return y, rstd
}

func TestRMSNorm(t *testing.T) {
	for i, m := range layerNormCases {
		rng := newRNG(uint64(i) + 40)
		x := randSlice(rng, m.rows*m.cols)
		Axpy(nil, 1, randSlice(rng, len(x)), x) // spread wider than [−1, 1)
		for j := range x {
			x[j] += 1 // an offset RMSNorm, unlike LayerNorm, keeps
		}
		gamma := randSlice(rng, m.cols)
		wantY, wantRstd := rmsNormRef(to64(x), to64(gamma), m.rows, m.cols)
		for _, tp := range testPools {
			t.Run(m.String()+"/"+tp.name, func(t *testing.T) {
				y, rstd := make([]float32, len(x)), make([]float32, m.rows)
				RMSNorm(tp.p, x, gamma, y, rstd, m.rows, m.cols, rmsEps)
				checkClose(t, "y", y, wantY, fwdTol)
				checkClose(t, "rstd", rstd, wantRstd, fwdTol)
			})
		}
	}
}

func TestRMSNormBackward(t *testing.T) {
	for i, m := range layerNormCases {
		// A row of one column is flat (y = gamma·x/√(x²+eps) ≈ gamma·sign(x)):
		// its dx is all cancellation, of order eps, which float32 cannot resolve.
		if m.rows*m.cols > 1000 || m.cols == 1 {
			continue
		}
		rng := newRNG(uint64(i) + 130)
		x, gamma := randSlice(rng, m.rows*m.cols), randSlice(rng, m.cols)
		r := randSlice(rng, len(x))
		x64, g64 := to64(x), to64(gamma)
		out := func(x, gamma []float64) []float64 {
			y, _ := rmsNormRef(x, gamma, m.rows, m.cols)
			return y
		}
		wantDx := centralDiff(projected(r, func(x []float64) []float64 { return out(x, g64) }), x64, fdStep)
		wantDg := centralDiff(projected(r, func(g []float64) []float64 { return out(x64, g) }), g64, fdStep)
		for _, tp := range testPools {
			t.Run(m.String()+"/"+tp.name, func(t *testing.T) {
				y, rstd := make([]float32, len(x)), make([]float32, m.rows)
				RMSNorm(tp.p, x, gamma, y, rstd, m.rows, m.cols, rmsEps)
				dx, dg := randSlice(rng, len(x)), randSlice(rng, m.cols)
				RMSNormBackward(tp.p, x, gamma, r, rstd, dx, dg, m.rows, m.cols)
				checkClose(t, "dx", dx, wantDx, gradTol)
				checkClose(t, "dgamma", dg, wantDg, gradTol)
			})
		}
	}
}

func TestRMSNormPanicsOnBadCall(t *testing.T) {
	x := make([]float32, 12)
	for name, f := range map[string]func(){
		"short rstd":   func() { RMSNorm(nil, x, x[:4], x, x[:2], 3, 4, rmsEps) },
		"short dgamma": func() { RMSNormBackward(nil, x, x[:4], x, x[:3], x, x[:3], 3, 4) },
		"long gamma":   func() { RMSNorm(nil, x, x[:5], x, x[:3], 3, 4, rmsEps) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}
