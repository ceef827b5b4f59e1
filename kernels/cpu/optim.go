package cpu

import (
	"fmt"
	"math"
)

// The optimizer updates work in place with PyTorch's semantics: weight
// decay is L2 regularization added to the gradient (g + weightDecay·w),
// except AdamW's, which is decoupled from it.

// SGDUpdate sets w −= lr·(g + weightDecay·w).
func SGDUpdate(p *Pool, w, g []float32, lr, weightDecay float32) {
	checkLen("SGDUpdate", "g", len(g), len(w))
	p.For(len(w), grainElems, func(lo, hi int) {
		w, g := w[lo:hi], g[lo:hi]
		g = g[:len(w)]
		for i, wi := range w {
			w[i] = wi - lr*(g[i]+weightDecay*wi)
		}
	})
}

// MomentumUpdate applies SGD with momentum (no dampening, not Nesterov):
// v = momentum·v + (g + weightDecay·w); w −= lr·v. v starts at zero.
func MomentumUpdate(p *Pool, w, g, v []float32, lr, momentum, weightDecay float32) {
	checkLen("MomentumUpdate", "g", len(g), len(w))
	checkLen("MomentumUpdate", "v", len(v), len(w))
	p.For(len(w), grainElems, func(lo, hi int) {
		w, g, v := w[lo:hi], g[lo:hi], v[lo:hi]
		g, v = g[:len(w)], v[:len(w)]
		for i, wi := range w {
			vi := momentum*v[i] + g[i] + weightDecay*wi
			v[i] = vi
			w[i] = wi - lr*vi
		}
	})
}

// AdamUpdate applies step number step (counted from 1) of Adam: with
// d = g + weightDecay·w, m = β1·m + (1−β1)·d and v = β2·v + (1−β2)·d², then
// w −= lr·m̂/(√v̂ + eps) where m̂ = m/(1−β1^step) and v̂ = v/(1−β2^step)
// undo the bias of m and v starting at zero.
func AdamUpdate(p *Pool, w, g, m, v []float32, lr, beta1, beta2, eps, weightDecay float32, step int) {
	adam("AdamUpdate", p, w, g, m, v, lr, beta1, beta2, eps, weightDecay, 1, step)
}

// AdamWUpdate applies step number step of AdamW (Loshchilov and Hutter's
// decoupled weight decay, as PyTorch's AdamW): w is first scaled by
// 1 − lr·weightDecay, then Adam's step is taken with the gradient alone.
func AdamWUpdate(p *Pool, w, g, m, v []float32, lr, beta1, beta2, eps, weightDecay float32, step int) {
	adam("AdamWUpdate", p, w, g, m, v, lr, beta1, beta2, eps, 0, 1-lr*weightDecay, step)
}

// adam is Adam's step with L2 decay l2 added to the gradient, after w is
// scaled by decay (1: not at all, which leaves w's bits as they are).
func adam(op string, p *Pool, w, g, m, v []float32, lr, beta1, beta2, eps, l2, decay float32, step int) {
	checkLen(op, "g", len(g), len(w))
	checkLen(op, "m", len(m), len(w))
	checkLen(op, "v", len(v), len(w))
	if step < 1 {
		panic(fmt.Sprintf("cpu: %s: step = %d, want ≥ 1", op, step))
	}
	// As PyTorch: w −= (lr/bc1)·m/(√v/√bc2 + eps).
	bc1 := 1 - math.Pow(float64(beta1), float64(step))
	bc2 := 1 - math.Pow(float64(beta2), float64(step))
	stepSize := float32(float64(lr) / bc1)
	invSqrtBC2 := float32(1 / math.Sqrt(bc2))
	p.For(len(w), grainElems/2, func(lo, hi int) {
		w, g, m, v := w[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]
		g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
		for i, wi := range w {
			wi *= decay
			d := g[i] + l2*wi
			mi := beta1*m[i] + (1-beta1)*d
			vi := beta2*v[i] + (1-beta2)*d*d
			m[i], v[i] = mi, vi
			w[i] = wi - stepSize*mi/(float32(math.Sqrt(float64(vi)))*invSqrtBC2+eps)
		}
	})
}
