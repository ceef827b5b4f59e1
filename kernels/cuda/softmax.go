package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// softmax_{warp,block}_T(const T *x, T *y, int rows, int n, int causal)
	kSoftmaxWarp  = defTyped("softmax", "softmax_warp", pPtr, pPtr, pI32, pI32, pI32)
	kSoftmaxBlock = defTyped("softmax", "softmax_block", pPtr, pPtr, pI32, pI32, pI32)
	// softmax_bwd_{warp,block}_T(const T *y, const T *dy, T *dx, int rows, int n, float scale, int causal)
	kSoftmaxBwdWarp  = defTyped("softmax", "softmax_bwd_warp", pPtr, pPtr, pPtr, pI32, pI32, pF32, pI32)
	kSoftmaxBwdBlock = defTyped("softmax", "softmax_bwd_block", pPtr, pPtr, pPtr, pI32, pI32, pF32, pI32)
)

// Softmax sets each row of y [rows, cols] to the softmax of the same row of
// x, exp(x − max) over its sum. y may alias x.
func (k *Kernels) Softmax(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, rows, cols int) error {
	return k.softmax("Softmax", s, dt, x, y, rows, cols, false)
}

// softmax is Softmax, optionally with attention's causal mask: cols = seq
// and row r is position r mod seq of a [seq, seq] score matrix, which sees
// columns j ≤ r mod seq only (the others come out 0).
func (k *Kernels) softmax(op string, s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, rows, cols int, causal bool) error {
	w, err := kSoftmaxWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kSoftmaxBlock.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || rows == 0 || cols == 0 {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.rows(s, w, b, rows, cols, x, y, int32(rows), int32(cols), flag(causal))
}

// flag is a C int for a bool.
func flag(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// SoftmaxBackward sets dx to the gradient with respect to Softmax's input,
// given its output y: dx = y ⊙ (dy − Σ_j y_j·dy_j), row by row. dx may
// alias dy.
func (k *Kernels) SoftmaxBackward(s *cu.Stream, dt graph.DType, y, dy, dx cu.DevicePtr, rows, cols int) error {
	return k.softmaxBackward("SoftmaxBackward", s, dt, y, dy, dx, rows, cols, 1, false)
}

// softmaxBackward is SoftmaxBackward with the result scaled by scale, and
// with causal, the gradient of softmax's causal form.
func (k *Kernels) softmaxBackward(op string, s *cu.Stream, dt graph.DType, y, dy, dx cu.DevicePtr, rows, cols int, scale float32, causal bool) error {
	w, err := kSoftmaxBwdWarp.of(op, dt)
	if err != nil {
		return err
	}
	b, _ := kSoftmaxBwdBlock.of(op, dt)
	if err := fits32(op, "rows cols", rows, cols); err != nil || rows == 0 || cols == 0 {
		return err
	}
	if err := notNil(op, "y dy dx", y, dy, dx); err != nil {
		return err
	}
	return k.rows(s, w, b, rows, cols, y, dy, dx, int32(rows), int32(cols), scale, flag(causal))
}
