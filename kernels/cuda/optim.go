package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// sgd_T(T *w, const T *g, long long n, float lr, const float *rates,
	// long long nrates, const long long *iter, float wd)
	kSGD = defTyped("optim", "sgd", pPtr, pPtr, pI64, pF32, pPtr, pI64, pPtr, pF32)
	// momentum_T(T *w, const T *g, T *v, long long n, float lr, const float
	// *rates, long long nrates, const long long *iter, float mu, float wd)
	kMomentum = defTyped("optim", "momentum", pPtr, pPtr, pPtr, pI64, pF32, pPtr, pI64, pPtr, pF32, pF32)
	// adam_T(T *w, const T *g, T *m, T *v, long long n, float lr, const
	// float *rates, long long nrates, const long long *iter, float b1, float
	// omb1, float b2, float omb2, float eps, float l2, float wdw)
	kAdam = defTyped("optim", "adam", pPtr, pPtr, pPtr, pPtr, pI64, pF32, pPtr, pI64, pPtr, pF32, pF32, pF32, pF32, pF32, pF32, pF32)
)

// The optimizer updates work in place on n elements, with weights,
// gradients and states all of dtype dt and float32 arithmetic, and
// kernels/cpu's (PyTorch's) semantics: weight decay is L2 regularization
// added to the gradient (g + weightDecay·w), except for AdamW's, which is
// decoupled.

// Rate is an update's learning rate: LR, or, where Table is not 0, the
// float32 Table[it % Len] for the int64 iteration number it (counted from
// 0) at the update's iter in device memory, read when the kernel runs. A
// captured CUDA graph keeps its kernels' arguments: a learning-rate
// schedule reaches its replays through a table that the host fills, while
// the GPU is idle, for the iterations to come.
type Rate struct {
	LR    float32
	Table cu.DevicePtr
	Len   int
}

// args checks r for an update that reads the iteration at iter, and
// returns its kernel arguments: lr, rates, nrates, iter.
func (r Rate) args(op string, iter cu.DevicePtr) ([]any, error) {
	if r.Table != 0 {
		if r.Len <= 0 {
			return nil, argErr(op, "a rate table of %d entries", r.Len)
		}
		if err := notNil(op, "iter", iter); err != nil {
			return nil, err
		}
	}
	return []any{r.LR, r.Table, int64(r.Len), iter}, nil
}

// SGDUpdate sets w −= lr·(g + weightDecay·w). iter is read only for a
// rate from a table.
func (k *Kernels) SGDUpdate(s *cu.Stream, dt graph.DType, w, g cu.DevicePtr, lr Rate, weightDecay float32, iter cu.DevicePtr, n int) error {
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
	rate, err := lr.args(op, iter)
	if err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, append(append([]any{w, g, int64(n)}, rate...), weightDecay)...)
}

// MomentumUpdate applies SGD with momentum (no dampening, not Nesterov):
// v = momentum·v + (g + weightDecay·w); w −= lr·v. iter is read only for
// a rate from a table.
func (k *Kernels) MomentumUpdate(s *cu.Stream, dt graph.DType, w, g, v cu.DevicePtr, lr Rate, momentum, weightDecay float32, iter cu.DevicePtr, n int) error {
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
	rate, err := lr.args(op, iter)
	if err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, append(append([]any{w, g, v, int64(n)}, rate...), momentum, weightDecay)...)
}

// Adam is Adam's hyper-parameters besides the rate. WeightDecay is L2
// regularization added to the gradient, or, Decoupled, AdamW's: the
// weights are scaled by 1 − lr·WeightDecay before the step, which then
// takes the gradient alone (kernels/cpu's AdamWUpdate).
type Adam struct {
	Beta1, Beta2, Eps, WeightDecay float32
	Decoupled                      bool
}

// AdamUpdate applies step t of Adam (or AdamW), t = it+1 for the int64
// iteration number it (counted from 0) at iter in device memory, read when
// the kernel runs so that a captured graph replays with each replay's
// step: with d = g + weightDecay·w, m = β1·m + (1−β1)·d and v = β2·v +
// (1−β2)·d², then w −= lr·m̂/(√v̂ + eps) with m̂ = m/(1−β1^t) and v̂ =
// v/(1−β2^t), evaluated as kernels/cpu's AdamUpdate (AdamWUpdate)
// evaluates it.
func (k *Kernels) AdamUpdate(s *cu.Stream, dt graph.DType, w, g, m, v cu.DevicePtr, lr Rate, o Adam, iter cu.DevicePtr, n int) error {
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
	rate, err := lr.args(op, iter)
	if err != nil {
		return err
	}
	l2, wdw := o.WeightDecay, float32(0)
	if o.Decoupled {
		l2, wdw = 0, o.WeightDecay
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, append(append([]any{w, g, m, v, int64(n)}, rate...),
		o.Beta1, 1-o.Beta1, o.Beta2, 1-o.Beta2, o.Eps, l2, wdw)...)
}
