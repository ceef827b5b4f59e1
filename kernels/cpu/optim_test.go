package cpu

import (
	"fmt"
	"math"
	"testing"
)

// optimCase is a few steps of an optimizer on random weights and gradients.
type optimCase struct {
	n, steps     int
	lr, wd       float64
	mu           float64 // momentum
	beta1, beta2 float64
	eps          float64
}

var optimCases = []optimCase{
	{n: 1, steps: 1, lr: 0.1, mu: 0.9, beta1: 0.9, beta2: 0.999, eps: 1e-8},
	{n: 37, steps: 5, lr: 0.01, wd: 0.05, mu: 0.9, beta1: 0.9, beta2: 0.999, eps: 1e-8},
	{n: 3*grainElems + 1, steps: 3, lr: 0.003, wd: 1e-4, mu: 0.5, beta1: 0.8, beta2: 0.99, eps: 1e-6},
}

// asKernelSees rounds the hyperparameters to float32, as the kernels get
// them: 1−β2 differs by 1e-5 relative between 0.999 and float32(0.999).
func (c optimCase) asKernelSees() optimCase {
	r := func(v float64) float64 { return float64(float32(v)) }
	c.lr, c.wd, c.mu, c.beta1, c.beta2, c.eps = r(c.lr), r(c.wd), r(c.mu), r(c.beta1), r(c.beta2), r(c.eps)
	return c
}

func (c optimCase) String() string { return fmt.Sprintf("n%d_steps%d", c.n, c.steps) }

// grads returns one random gradient per step.
func (c optimCase) grads(seed uint64) [][]float32 {
	rng := newRNG(seed)
	g := make([][]float32, c.steps)
	for i := range g {
		g[i] = randSlice(rng, c.n)
	}
	return g
}

func TestSGDUpdate(t *testing.T) {
	for i, c := range optimCases {
		c := c.asKernelSees()
		w0, gs := randSlice(newRNG(uint64(i)), c.n), c.grads(uint64(i))
		want := to64(w0)
		for _, g := range gs {
			for j := range want {
				want[j] -= c.lr * (float64(g[j]) + c.wd*want[j])
			}
		}
		for _, tp := range testPools {
			t.Run(c.String()+"/"+tp.name, func(t *testing.T) {
				w := append([]float32(nil), w0...)
				for _, g := range gs {
					SGDUpdate(tp.p, w, g, float32(c.lr), float32(c.wd))
				}
				checkClose(t, "w", w, want, fwdTol)
			})
		}
	}
}

func TestMomentumUpdate(t *testing.T) {
	for i, c := range optimCases {
		c := c.asKernelSees()
		w0, gs := randSlice(newRNG(uint64(i)), c.n), c.grads(uint64(i))
		wantW, wantV := to64(w0), make([]float64, c.n)
		for _, g := range gs {
			for j := range wantW {
				wantV[j] = c.mu*wantV[j] + float64(g[j]) + c.wd*wantW[j]
				wantW[j] -= c.lr * wantV[j]
			}
		}
		for _, tp := range testPools {
			t.Run(c.String()+"/"+tp.name, func(t *testing.T) {
				w, v := append([]float32(nil), w0...), make([]float32, c.n)
				for _, g := range gs {
					MomentumUpdate(tp.p, w, g, v, float32(c.lr), float32(c.mu), float32(c.wd))
				}
				checkClose(t, "w", w, wantW, fwdTol)
				checkClose(t, "v", v, wantV, fwdTol)
			})
		}
	}
}

func TestAdamUpdate(t *testing.T) { testAdam(t, AdamUpdate, false) }

func TestAdamWUpdate(t *testing.T) { testAdam(t, AdamWUpdate, true) }

// testAdam checks an Adam kernel against float64 over optimCases, its
// weight decay added to the gradient, or decoupled from it (AdamW: the
// weights decay, the gradient is left alone).
func testAdam(t *testing.T, update func(p *Pool, w, g, m, v []float32, lr, beta1, beta2, eps, weightDecay float32, step int), decoupled bool) {
	for i, c := range optimCases {
		c := c.asKernelSees()
		w0, gs := randSlice(newRNG(uint64(i)), c.n), c.grads(uint64(i))
		wantW, wantM, wantV := to64(w0), make([]float64, c.n), make([]float64, c.n)
		for s, g := range gs {
			step := float64(s + 1)
			for j := range wantW {
				d := float64(g[j])
				if decoupled {
					wantW[j] *= 1 - c.lr*c.wd
				} else {
					d += c.wd * wantW[j]
				}
				wantM[j] = c.beta1*wantM[j] + (1-c.beta1)*d
				wantV[j] = c.beta2*wantV[j] + (1-c.beta2)*d*d
				mHat := wantM[j] / (1 - math.Pow(c.beta1, step))
				vHat := wantV[j] / (1 - math.Pow(c.beta2, step))
				wantW[j] -= c.lr * mHat / (math.Sqrt(vHat) + c.eps)
			}
		}
		for _, tp := range testPools {
			t.Run(c.String()+"/"+tp.name, func(t *testing.T) {
				w, m, v := append([]float32(nil), w0...), make([]float32, c.n), make([]float32, c.n)
				for s, g := range gs {
					update(tp.p, w, g, m, v, float32(c.lr), float32(c.beta1), float32(c.beta2), float32(c.eps), float32(c.wd), s+1)
				}
				checkClose(t, "w", w, wantW, fwdTol)
				checkClose(t, "m", m, wantM, fwdTol)
				checkClose(t, "v", v, wantV, fwdTol)
			})
		}
	}
}

// TestAdamBiasCorrection checks the first step: with m and v corrected for
// their zero start, the update is lr·g/(|g|+eps) ≈ lr·sign(g) whatever the
// betas, where without correction it would be lr·(1−β1)/√(1−β2)·sign(g).
func TestAdamBiasCorrection(t *testing.T) {
	const lr = 0.01
	g := []float32{3, -0.5, 1e-3, -200}
	w, m, v := make([]float32, len(g)), make([]float32, len(g)), make([]float32, len(g))
	AdamUpdate(nil, w, g, m, v, lr, 0.9, 0.999, 1e-8, 0, 1)
	for i, gi := range g {
		if want := -lr * math.Copysign(1, float64(gi)); math.Abs(float64(w[i])-want) > 1e-6 {
			t.Errorf("w[%d] after one step got %v, want %v", i, w[i], want)
		}
	}
}

func TestAdamUpdateStepZeroPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("step 0: got no panic, want one")
		}
	}()
	w := make([]float32, 2)
	AdamUpdate(nil, w, w, w, w, 0.1, 0.9, 0.999, 1e-8, 0, 0)
}
