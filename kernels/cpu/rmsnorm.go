package cpu

import "math"

// RMSNorm normalizes each row of x [rows, cols] by its root mean square
// (plus eps) and applies the per-column scale: y = x·rstd·gamma. It saves
// each row's rstd = 1/√(mean(x²)+eps) ([rows]) for RMSNormBackward. Row
// statistics are accumulated in float64.
func RMSNorm(p *Pool, x, gamma, y, rstd []float32, rows, cols int, eps float32) {
	const kernel = "RMSNorm"
	checkLen(kernel, "x", len(x), rows*cols)
	checkLen(kernel, "gamma", len(gamma), cols)
	checkLen(kernel, "y", len(y), rows*cols)
	checkLen(kernel, "rstd", len(rstd), rows)
	if cols == 0 {
		return
	}
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
			yr, gamma := yr[:len(xr)], gamma[:len(xr)]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			s := float32(1 / math.Sqrt(ss/float64(cols)+float64(eps)))
			for j, v := range xr {
				yr[j] = v * s * gamma[j]
			}
			rstd[r] = s
		}
	})
}

// RMSNormBackward sets dx and dgamma to the gradients of RMSNorm given the
// rstd it saved. With x̂ = x·rstd and g = dy·gamma, dx = rstd·(g −
// x̂·mean(g·x̂)) (= rstd·(g − x·rstd²·mean(g·x))) row by row, and dgamma =
// Σ_rows dy·x̂ column by column; each worker owns a range of columns for the
// latter, so it does not depend on the number of workers.
func RMSNormBackward(p *Pool, x, gamma, dy, rstd, dx, dgamma []float32, rows, cols int) {
	const kernel = "RMSNormBackward"
	checkLen(kernel, "x", len(x), rows*cols)
	checkLen(kernel, "gamma", len(gamma), cols)
	checkLen(kernel, "dy", len(dy), rows*cols)
	checkLen(kernel, "rstd", len(rstd), rows)
	checkLen(kernel, "dx", len(dx), rows*cols)
	checkLen(kernel, "dgamma", len(dgamma), cols)
	if cols == 0 {
		return
	}
	p.For(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
			dyr, dxr, gamma := dyr[:len(xr)], dxr[:len(xr)], gamma[:len(xr)]
			s := rstd[r]
			var sgx float64
			for j, v := range xr {
				sgx += float64(dyr[j]*gamma[j]) * float64(v*s)
			}
			b := float32(sgx / float64(cols))
			for j, v := range xr {
				dxr[j] = s * (dyr[j]*gamma[j] - v*s*b)
			}
		}
	})
	p.For(cols, rowGrain(rows), func(lo, hi int) {
		dg := dgamma[lo:hi]
		clear(dg)
		for r := range rows {
			s := rstd[r]
			xr, dyr := x[r*cols+lo:r*cols+hi], dy[r*cols+lo:r*cols+hi]
			xr, dyr = xr[:len(dg)], dyr[:len(dg)]
			for j, g := range dyr {
				dg[j] += g * xr[j] * s
			}
		}
	})
}
