package cpu

import "math"

// BatchNorm normalizes each channel of x [n, c, hw] (an NCHW image batch,
// hw = H·W) over its M = n·hw values to zero mean and unit variance (the
// biased variance, plus eps) and applies the per-channel affine map:
// y = (x − mean_c)·rstd_c·gamma_c + beta_c with rstd_c = 1/√(var_c+eps).
// The statistics are the batch's own (training mode), accumulated in
// float64; nothing is saved, BatchNormBackward recomputes them from x. Each
// worker owns a range of channels, so y does not depend on the number of
// workers.
func BatchNorm(p *Pool, x, gamma, beta, y []float32, n, c, hw int, eps float32) {
	const kernel = "BatchNorm"
	checkLen(kernel, "x", len(x), n*c*hw)
	checkLen(kernel, "gamma", len(gamma), c)
	checkLen(kernel, "beta", len(beta), c)
	checkLen(kernel, "y", len(y), n*c*hw)
	if n*hw == 0 {
		return
	}
	p.For(c, rowGrain(n*hw), func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, rs := channelStats(x, ch, n, c, hw, eps)
			m, s, g, b := float32(mu), float32(rs), gamma[ch], beta[ch]
			for i := range n {
				off := (i*c + ch) * hw
				xr, yr := x[off:off+hw], y[off:off+hw]
				yr = yr[:len(xr)]
				for j, v := range xr {
					yr[j] = (v-m)*s*g + b
				}
			}
		}
	})
}

// BatchNormBackward sets dx, dgamma and dbeta to the gradients of BatchNorm,
// the statistics recomputed from x. With x̂ = (x − mean)·rstd and g =
// dy·gamma, channel by channel over its M = n·hw values, dx = rstd·(g −
// mean(g) − x̂·mean(g·x̂)) = rstd·gamma·(dy − dbeta/M − x̂·dgamma/M), dgamma =
// Σ dy·x̂ and dbeta = Σ dy, the sums accumulated in float64. Each worker
// owns a range of channels, so none of the outputs depends on the number of
// workers.
func BatchNormBackward(p *Pool, x, gamma, dy, dx, dgamma, dbeta []float32, n, c, hw int, eps float32) {
	const kernel = "BatchNormBackward"
	checkLen(kernel, "x", len(x), n*c*hw)
	checkLen(kernel, "gamma", len(gamma), c)
	checkLen(kernel, "dy", len(dy), n*c*hw)
	checkLen(kernel, "dx", len(dx), n*c*hw)
	checkLen(kernel, "dgamma", len(dgamma), c)
	checkLen(kernel, "dbeta", len(dbeta), c)
	if n*hw == 0 {
		clear(dgamma)
		clear(dbeta)
		return
	}
	p.For(c, rowGrain(n*hw), func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, rs := channelStats(x, ch, n, c, hw, eps)
			var sdy, sdyx float64 // Σ dy, Σ dy·(x − mean)
			for i := range n {
				off := (i*c + ch) * hw
				xr, dyr := x[off:off+hw], dy[off:off+hw]
				dyr = dyr[:len(xr)]
				for j, v := range xr {
					d := float64(dyr[j])
					sdy += d
					sdyx += d * (float64(v) - mu)
				}
			}
			dg := sdyx * rs
			dgamma[ch], dbeta[ch] = float32(dg), float32(sdy)
			mm := float64(n * hw)
			m, s := float32(mu), float32(rs)
			a := float32(rs * float64(gamma[ch]))
			b, k := float32(sdy/mm), float32(dg/mm)
			for i := range n {
				off := (i*c + ch) * hw
				xr, dyr, dxr := x[off:off+hw], dy[off:off+hw], dx[off:off+hw]
				dyr, dxr = dyr[:len(xr)], dxr[:len(xr)]
				for j, v := range xr {
					dxr[j] = a * (dyr[j] - b - (v-m)*s*k)
				}
			}
		}
	})
}

// channelStats returns the mean and rstd = 1/√(var+eps) of channel ch of x
// [n, c, hw], over its n planes of hw values taken in order: the mean, then
// the biased variance about it, both in float64.
func channelStats(x []float32, ch, n, c, hw int, eps float32) (mean, rstd float64) {
	var sum float64
	for i := range n {
		off := (i*c + ch) * hw
		sum += sum64(x[off : off+hw])
	}
	m := float64(n * hw)
	mean = sum / m
	var ss float64
	for i := range n {
		off := (i*c + ch) * hw
		for _, v := range x[off : off+hw] {
			d := float64(v) - mean
			ss += d * d
		}
	}
	return mean, 1 / math.Sqrt(ss/m+float64(eps))
}
