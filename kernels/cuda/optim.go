package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// sgd_T(T *w, const T *g, long long n, float lr, float wd)
	kSGD = defTyped("optim", "sgd", pPtr, pPtr, pI64, pF32, pF32)
	// momentum_T(T *w, const T *g, T *v, long long n, float lr, float mu, float wd)
	kMomentum = defTyped("optim", "momentum", pPtr, pPtr, pPtr, pI64, pF32, pF32, pF32)
	// adam_T(T *w, const T *g, T *m, T *v, long long n, float lr, float b1,
	// float omb1, float b2, float omb2, float eps, float wd, const long long *iter)
	kAdam = defTyped("optim", "adam", pPtr, pPtr, pPtr, pPtr, pI64, pF32, pF32, pF32, pF32, pF32, pF32, pF32, pPtr)
)

// The optimizer updates work in place on n elements, with weights,
// gradients and states all of dtype dt and float32 arithmetic, and
// kernels/cpu's (PyTorch's) semantics: weight decay is L2 regularization
// added to the gradient (g + weightDecay·w), not decoupled as in AdamW.

// SGDUpdate sets w −= lr·(g + weightDecay·w).
func (k *Kernels) SGDUpdate(s *cu.Stream, dt graph.DType, w, g cu.DevicePtr, lr, weightDecay float32, n int) error {
	const op = "SGDUpdate"
	f, err := kSGD.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "w g", w, g); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, w, g, int64(n), lr, weightDecay)
}

// MomentumUpdate applies SGD with momentum (no dampening, not Nesterov):
// v = momentum·v + (g + weightDecay·w); w −= lr·v.
func (k *Kernels) MomentumUpdate(s *cu.Stream, dt graph.DType, w, g, v cu.DevicePtr, lr, momentum, weightDecay float32, n int) error {
	const op = "MomentumUpdate"
	f, err := kMomentum.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "w g v", w, g, v); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, w, g, v, int64(n), lr, momentum, weightDecay)
}

// AdamUpdate applies step t of Adam, t = it+1 for the int64 iteration
// number it (counted from 0) at iter in device memory, read when the kernel
// runs so that a captured graph replays with each replay's step: with d =
// g + weightDecay·w, m = β1·m + (1−β1)·d and v = β2·v + (1−β2)·d², then w
// −= lr·m̂/(√v̂ + eps) with m̂ = m/(1−β1^t) and v̂ = v/(1−β2^t), evaluated as
// kernels/cpu's AdamUpdate evaluates it.
func (k *Kernels) AdamUpdate(s *cu.Stream, dt graph.DType, w, g, m, v cu.DevicePtr, lr, beta1, beta2, eps, weightDecay float32, iter cu.DevicePtr, n int) error {
	const op = "AdamUpdate"
	f, err := kAdam.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "w g m v iter", w, g, m, v, iter); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, w, g, m, v, int64(n), lr, beta1, 1-beta1, beta2, 1-beta2, eps, weightDecay, iter)
}
