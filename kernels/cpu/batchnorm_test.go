package cpu

import (
	"fmt"
	"math"
	"testing"
)

const bnEps = 1e-5

// bnShape is a batch of n images of c channels and hw pixels each.
type bnShape struct{ n, c, hw int }

func (s bnShape) String() string { return fmt.Sprintf("n%dc%dhw%d", s.n, s.c, s.hw) }

// batchNormCases include a pixel per image (hw = 1), a single image (n = 1),
// a single channel (c = 1), a single value per channel (M = 1: y = beta),
// and sizes whose channels pool3 splits among its workers (M ≥ grainElems/2).
var batchNormCases = []bnShape{
	{1, 2, 1}, {5, 3, 1}, {1, 4, 9}, {6, 1, 5}, {3, 7, 10}, {2, 5, 33},
	{3, 7, grainElems/3 + 5}, {4, 5, grainElems/4 + 1}, {2, 1, grainElems + 3},
}

// batchNormStats returns each channel's mean and 1/√(var+eps) over x [n,c,hw].
func batchNormStats(x []float64, s bnShape) (mean, rstd []float64) {
	mean, rstd = make([]float64, s.c), make([]float64, s.c)
	m := float64(s.n * s.hw)
	for ch := range s.c {
		var mu, v float64
		for i := range s.n {
			for _, e := range x[(i*s.c+ch)*s.hw : (i*s.c+ch+1)*s.hw] {
				mu += e
			}
		}
		mu /= m
		for i := range s.n {
			for _, e := range x[(i*s.c+ch)*s.hw : (i*s.c+ch+1)*s.hw] {
				v += (e - mu) * (e - mu)
			}
		}
		mean[ch], rstd[ch] = mu, 1/math.Sqrt(v/m+bnEps)
	}
	return mean, rstd
}

// batchNormRef returns y = (x − mean)·rstd·gamma + beta channel by channel.
func batchNormRef(x, gamma, beta []float64, s bnShape) []float64 {
	mean, rstd := batchNormStats(x, s)
	y := make([]float64, len(x))
	for i := range s.n {
		for ch := range s.c {
			for j := range s.hw {
				k := (i*s.c+ch)*s.hw + j
				y[k] = (x[k]-mean[ch])*rstd[ch]*gamma[ch] + beta[ch]
			}
		}
	}
	return y
}

// batchNormBackwardRef returns dx, dgamma and dbeta by the closed form: with
// x̂ = (x − mean)·rstd, dgamma = Σ dy·x̂, dbeta = Σ dy and dx =
// rstd·gamma·(dy − dbeta/M − x̂·dgamma/M), channel by channel.
func batchNormBackwardRef(x, gamma, dy []float64, s bnShape) (dx, dgamma, dbeta []float64) {
	mean, rstd := batchNormStats(x, s)
	dx, dgamma, dbeta = make([]float64, len(x)), make([]float64, s.c), make([]float64, s.c)
	xhat := func(k, ch int) float64 { return (x[k] - mean[ch]) * rstd[ch] }
	for i := range s.n {
		for ch := range s.c {
			for j := range s.hw {
				k := (i*s.c+ch)*s.hw + j
				dgamma[ch] += dy[k] * xhat(k, ch)
				dbeta[ch] += dy[k]
			}
		}
	}
	m := float64(s.n * s.hw)
	for i := range s.n {
		for ch := range s.c {
			for j := range s.hw {
				k := (i*s.c+ch)*s.hw + j
				dx[k] = rstd[ch] * gamma[ch] * (dy[k] - dbeta[ch]/m - xhat(k, ch)*dgamma[ch]/m)
			}
		}
	}
	return dx, dgamma, dbeta
}

// bnPools are testPools and more workers than most cases have channels: the
// results must be bitwise those of the serial run.
var bnPools = append(testPools[:len(testPools):len(testPools)], struct {
	name string
	p    *Pool
}{"pool8", NewPool(8)})

// checkSameBits fails the test unless got is bitwise serial.
func checkSameBits(t *testing.T, what string, p *Pool, got, serial []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(serial[i]) {
			t.Errorf("%s[%d] with %d workers got %v, want %v as serially", what, i, p.Workers(), got[i], serial[i])
			return
		}
	}
}

func TestBatchNorm(t *testing.T) {
	for i, s := range batchNormCases {
		rng := newRNG(uint64(i) + 200)
		x := randSlice(rng, s.n*s.c*s.hw)
		Axpy(nil, 1, randSlice(rng, len(x)), x) // spread wider than [−1, 1)
		for j := range x {
			x[j] += 3 // an offset the mean must remove
		}
		gamma, beta := randSlice(rng, s.c), randSlice(rng, s.c)
		want := batchNormRef(to64(x), to64(gamma), to64(beta), s)
		var serial []float32
		for _, tp := range bnPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				y := randSlice(rng, len(x))
				BatchNorm(tp.p, x, gamma, beta, y, s.n, s.c, s.hw, bnEps)
				checkClose(t, "y", y, want, fwdTol)
				if tp.p == nil {
					serial = y
				} else {
					checkSameBits(t, "y", tp.p, y, serial)
				}
			})
		}
	}
}

// TestBatchNormBackward checks the kernel against the closed form in
// float64 on every case, and against central finite differences of L =
// Σ dy·BatchNorm(x, gamma, beta) on the small ones.
func TestBatchNormBackward(t *testing.T) {
	for i, s := range batchNormCases {
		rng := newRNG(uint64(i) + 300)
		x, gamma, beta := randSlice(rng, s.n*s.c*s.hw), randSlice(rng, s.c), randSlice(rng, s.c)
		for j := range x {
			x[j] += 2 // an offset the recomputed mean must remove
		}
		dy := randSlice(rng, len(x))
		x64, g64, b64 := to64(x), to64(gamma), to64(beta)
		refDx, refDg, refDb := batchNormBackwardRef(x64, g64, to64(dy), s)
		var fdDx, fdDg, fdDb []float64
		if len(x) <= 1000 {
			fdDx = centralDiff(projected(dy, func(x []float64) []float64 { return batchNormRef(x, g64, b64, s) }), x64, fdStep)
			fdDg = centralDiff(projected(dy, func(g []float64) []float64 { return batchNormRef(x64, g, b64, s) }), g64, fdStep)
			fdDb = centralDiff(projected(dy, func(b []float64) []float64 { return batchNormRef(x64, g64, b, s) }), b64, fdStep)
		}
		var sDx, sDg, sDb []float32
		for _, tp := range bnPools {
			t.Run(s.String()+"/"+tp.name, func(t *testing.T) {
				dx := randSlice(rng, len(x))
				dg, db := randSlice(rng, s.c), randSlice(rng, s.c)
				BatchNormBackward(tp.p, x, gamma, dy, dx, dg, db, s.n, s.c, s.hw, bnEps)
				checkClose(t, "dx", dx, refDx, fwdTol)
				checkClose(t, "dgamma", dg, refDg, fwdTol)
				checkClose(t, "dbeta", db, refDb, fwdTol)
				if fdDx != nil {
					checkClose(t, "dx (finite differences)", dx, fdDx, gradTol)
					checkClose(t, "dgamma (finite differences)", dg, fdDg, gradTol)
					checkClose(t, "dbeta (finite differences)", db, fdDb, gradTol)
				}
				if tp.p == nil {
					sDx, sDg, sDb = dx, dg, db
				} else {
					checkSameBits(t, "dx", tp.p, dx, sDx)
					checkSameBits(t, "dgamma", tp.p, dg, sDg)
					checkSameBits(t, "dbeta", tp.p, db, sDb)
				}
			})
		}
	}
}

// An empty batch leaves dgamma and dbeta zero, the sums over no values.
func TestBatchNormBackwardEmpty(t *testing.T) {
	dg, db := []float32{1, 2, 3}, []float32{4, 5, 6}
	BatchNormBackward(nil, nil, make([]float32, 3), nil, nil, dg, db, 0, 3, 4, bnEps)
	checkClose(t, "dgamma", dg, make([]float64, 3), 0)
	checkClose(t, "dbeta", db, make([]float64, 3), 0)
	BatchNorm(nil, nil, make([]float32, 3), make([]float32, 3), nil, 2, 3, 0, bnEps) // nothing to write
}

func TestBatchNormPanicsOnBadCall(t *testing.T) {
	x := make([]float32, 24)
	for name, f := range map[string]func(){
		"short y":      func() { BatchNorm(nil, x, x[:3], x[:3], x[:23], 2, 3, 4, bnEps) },
		"long gamma":   func() { BatchNorm(nil, x, x[:4], x[:3], x, 2, 3, 4, bnEps) },
		"short beta":   func() { BatchNorm(nil, x, x[:3], x[:2], x, 2, 3, 4, bnEps) },
		"short dy":     func() { BatchNormBackward(nil, x, x[:3], x[:20], x, x[:3], x[:3], 2, 3, 4, bnEps) },
		"short dgamma": func() { BatchNormBackward(nil, x, x[:3], x, x, x[:2], x[:3], 2, 3, 4, bnEps) },
		"long dbeta":   func() { BatchNormBackward(nil, x, x[:3], x, x, x[:3], x[:4], 2, 3, 4, bnEps) },
	} {
		t.Run(name, func(t *testing.T) { mustPanicShape(t, f) })
	}
}
