package cpu

import "math"

// LayerNorm normalizes each row of x [rows, cols] to zero mean and unit
// variance (the biased variance, plus eps) and applies the per-column affine
// map: y = (x − mean)·rstd·gamma + beta. It saves each row's mean and rstd =
// 1/√(var+eps) ([rows] each) for LayerNormBackward. Row statistics are
// accumulated in float64.
func LayerNorm(p *Pool, x, gamma, beta, y, mean, rstd []float32, rows, cols int, eps float32) {
	const kernel = "LayerNorm"
	checkLen(kernel, "x", len(x), rows*cols)
	checkLen(kernel, "gamma", len(gamma), cols)
	checkLen(kernel, "beta", len(beta), cols)
	checkLen(kernel, "y", len(y), rows*cols)
	checkLen(kernel, "mean", len(mean), rows)
	checkLen(kernel, "rstd", len(rstd), rows)
	if cols == 0 {
		return
	}
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
			yr, gamma, beta := yr[:len(xr)], gamma[:len(xr)], beta[:len(xr)]
			mu := sum64(xr) / float64(cols)
			var ss float64
			for _, v := range xr {
				d := float64(v) - mu
				ss += d * d
			}
			rs := 1 / math.Sqrt(ss/float64(cols)+float64(eps))
			m, s := float32(mu), float32(rs)
			for j, v := range xr {
				yr[j] = (v-m)*s*gamma[j] + beta[j]
			}
			mean[r], rstd[r] = m, s
		}
	})
}

// LayerNormBackward sets dx, dgamma and dbeta to the gradients of LayerNorm
// given the mean and rstd it saved. With x̂ = (x − mean)·rstd and g = dy·gamma,
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) row by row, and dgamma = Σ_rows dy·x̂,
// dbeta = Σ_rows dy column by column; each worker owns a range of columns
// for the latter, so they do not depend on the number of workers.
func LayerNormBackward(p *Pool, x, gamma, dy, mean, rstd, dx, dgamma, dbeta []float32, rows, cols int) {
	const kernel = "LayerNormBackward"
	checkLen(kernel, "x", len(x), rows*cols)
	checkLen(kernel, "gamma", len(gamma), cols)
	checkLen(kernel, "dy", len(dy), rows*cols)
	checkLen(kernel, "mean", len(mean), rows)
	checkLen(kernel, "rstd", len(rstd), rows)
	checkLen(kernel, "dx", len(dx), rows*cols)
	checkLen(kernel, "dgamma", len(dgamma), cols)
	checkLen(kernel, "dbeta", len(dbeta), cols)
	if cols == 0 {
		return
	}
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
			dyr, dxr, gamma := dyr[:len(xr)], dxr[:len(xr)], gamma[:len(xr)]
			m, s := mean[r], rstd[r]
			var sg, sgx float64
			for j, v := range xr {
				g := dyr[j] * gamma[j]
				sg += float64(g)
				sgx += float64(g) * float64((v-m)*s)
			}
			a, b := float32(sg/float64(cols)), float32(sgx/float64(cols))
			for j, v := range xr {
				dxr[j] = s * (dyr[j]*gamma[j] - a - (v-m)*s*b)
			}
		}
	})
	p.For(cols, rowGrain(rows), func(lo, hi int) {
		dg, db := dgamma[lo:hi], dbeta[lo:hi]
		db = db[:len(dg)]
		clear(dg)
		clear(db)
		for r := range rows {
			m, s := mean[r], rstd[r]
			xr, dyr := x[r*cols+lo:r*cols+hi], dy[r*cols+lo:r*cols+hi]
			xr, dyr = xr[:len(dg)], dyr[:len(dg)]
			for j, g := range dyr {
				dg[j] += g * (xr[j] - m) * s
				db[j] += g
			}
		}
	})
}
