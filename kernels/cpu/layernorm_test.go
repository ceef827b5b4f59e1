package cpu

import (
	"math"
	"testing"
)

const lnEps = 1e-5

// layerNormRef returns y, and each row's mean and 1/√(var+eps).
func layerNormRef(x, gamma, beta []float64, rows, cols int) (y, mean, rstd []float64) {
	y, mean, rstd = make([]float64, len(x)), make([]float64, rows), make([]float64, rows)
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		var mu, v float64
		for _, e := range row {
			mu += e
		}
		mu /= float64(cols)
		for _, e := range row {
			v += (e - mu) * (e - mu)
		}
		rs := 1 / math.Sqrt(v/float64(cols)+lnEps)
		for j, e := range row {
			y[r*cols+j] = (e-mu)*rs*gamma[j] + beta[j]
		}
		mean[r], rstd[r] = mu, rs
	}
	return y, mean, rstd
}

var layerNormCases = []matShape{{1, 1}, {1, 8}, {3, 7}, {6, 33}, {2*grainElems/64 + 3, 64}}

func TestLayerNorm(t *testing.T) {
	for i, m := range layerNormCases {
		rng := newRNG(uint64(i))
		x := randSlice(rng, m.rows*m.cols)
		Axpy(nil, 1, randSlice(rng, len(x)), x) // spread wider than [−1, 1)
		for j := range x {
			x[j] += 3 // an offset the mean must remove
		}
		gamma, beta := randSlice(rng, m.cols), randSlice(rng, m.cols)
		wantY, wantMean, wantRstd := layerNormRef(to64(x), to64(gamma), to64(beta), m.rows, m.cols)
		for _, tp := range testPools {
			t.Run(m.String()+"/"+tp.name, func(t *testing.T) {
				y := make([]float32, len(x))
				mean, rstd := make([]float32, m.rows), make([]float32, m.rows)
				LayerNorm(tp.p, x, gamma, beta, y, mean, rstd, m.rows, m.cols, lnEps)
				checkClose(t, "y", y, wantY, fwdTol)
				checkClose(t, "mean", mean, wantMean, fwdTol)
				checkClose(t, "rstd", rstd, wantRstd, fwdTol)
			})
		}
	}
}

func TestLayerNormBackward(t *testing.T) {
	for i, m := range layerNormCases {
		if m.rows*m.cols > 1000 {
			continue
		}
		rng := newRNG(uint64(i) + 90)
		x, gamma, beta := randSlice(rng, m.rows*m.cols), randSlice(rng, m.cols), randSlice(rng, m.cols)
		r := randSlice(rng, len(x))
		x64, g64, b64 := to64(x), to64(gamma), to64(beta)
		out := func(x, gamma, beta []float64) []float64 {
			y, _, _ := layerNormRef(x, gamma, beta, m.rows, m.cols)
			return y
		}
		wantDx := centralDiff(projected(r, func(x []float64) []float64 { return out(x, g64, b64) }), x64, fdStep)
		wantDg := centralDiff(projected(r, func(g []float64) []float64 { return out(x64, g, b64) }), g64, fdStep)
		wantDb := centralDiff(projected(r, func(b []float64) []float64 { return out(x64, g64, b) }), b64, fdStep)
		for _, tp := range testPools {
			t.Run(m.String()+"/"+tp.name, func(t *testing.T) {
				y := make([]float32, len(x))
				mean, rstd := make([]float32, m.rows), make([]float32, m.rows)
				LayerNorm(tp.p, x, gamma, beta, y, mean, rstd, m.rows, m.cols, lnEps)
				dx := randSlice(rng, len(x))
				dg, db := randSlice(rng, m.cols), randSlice(rng, m.cols)
				LayerNormBackward(tp.p, x, gamma, r, mean, rstd, dx, dg, db, m.rows, m.cols)
				checkClose(t, "dx", dx, wantDx, gradTol)
				checkClose(t, "dgamma", dg, wantDg, gradTol)
				checkClose(t, "dbeta", db, wantDb, gradTol)
			})
		}
	}
}

func TestLayerNormPanicsOnBadCall(t *testing.T) {
	x := make([]float32, 12)
	for name, f := range map[string]func(){
		"short rstd":   func() { LayerNorm(nil, x, x[:4], x[:4], x, x[:3], x[:2], 3, 4, lnEps) },
		"short dgamma": func() { LayerNormBackward(nil, x, x[:4], x, x[:3], x[:3], x, x[:3], x[:4], 3, 4) },
		"long gamma":   func() { LayerNorm(nil, x, x[:5], x[:4], x, x[:3], x[:3], 3, 4, lnEps) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}
