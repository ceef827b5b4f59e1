package cuda

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// maxpool_fwd_T(const T *x, T *y, int planes, int H, int W, int OH,
	// int OW, int KH, int KW, int sh, int sw, int ph, int pw)
	kMaxPoolFwd = defTyped("pool", "maxpool_fwd", pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32)
	// maxpool_bwd_T(const T *x, const T *dy, T *dx, …the same sizes…)
	kMaxPoolBwd = defTyped("pool", "maxpool_bwd", pPtr, pPtr, pPtr, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32, pI32)
)

// poolCheck validates sh for the kernels' 32-bit indices.
func poolCheck(op string, sh cpu.PoolShape) error {
	if err := sh.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrArg, op, err)
	}
	if err := fits32(op, "N C H W", sh.N, sh.C, sh.H, sh.W); err != nil {
		return err
	}
	return fits32(op, "N C OutH OutW", sh.N, sh.C, sh.OutH(), sh.OutW())
}

// poolArgs are the size arguments of the pooling kernels.
func poolArgs(sh cpu.PoolShape) []any {
	return []any{int32(sh.N * sh.C), int32(sh.H), int32(sh.W), int32(sh.OutH()), int32(sh.OutW()),
		int32(sh.KH), int32(sh.KW), int32(sh.StrideH), int32(sh.StrideW), int32(sh.PadH), int32(sh.PadW)}
}

// MaxPool2DForward sets y to the maximum of each window of x (NCHW, f32
// or bf16), as kernels/cpu's MaxPool2DForward: windows are clipped to the
// input, and a window holding a NaN gives NaN.
func (k *Kernels) MaxPool2DForward(s *cu.Stream, dt graph.DType, sh cpu.PoolShape, x, y cu.DevicePtr) error {
	const op = "MaxPool2DForward"
	f, err := kMaxPoolFwd.of(op, dt)
	if err != nil {
		return err
	}
	if err := poolCheck(op, sh); err != nil {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.flat(s, f, int64(sh.N*sh.C*sh.OutH()*sh.OutW()), append([]any{x, y}, poolArgs(sh)...)...)
}

// MaxPool2DBackward sets dx to the gradient of the loss with respect to x:
// each window's dy goes to its maximum, recomputed from x, the first in
// row-major window order among equal ones (NaN above any number), and
// overlapping windows add up in row-major window order, as kernels/cpu's
// MaxPool2DBackward does. Each input element gathers its own sum: no
// atomics; in bf16 the sums are in float, rounded once.
func (k *Kernels) MaxPool2DBackward(s *cu.Stream, dt graph.DType, sh cpu.PoolShape, x, dy, dx cu.DevicePtr) error {
	const op = "MaxPool2DBackward"
	f, err := kMaxPoolBwd.of(op, dt)
	if err != nil {
		return err
	}
	if err := poolCheck(op, sh); err != nil {
		return err
	}
	if err := notNil(op, "x dy dx", x, dy, dx); err != nil {
		return err
	}
	return k.flat(s, f, int64(sh.N*sh.C*sh.H*sh.W), append([]any{x, dy, dx}, poolArgs(sh)...)...)
}
