package cuda

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

var (
	// cast_f32_bf16(const float *x, bf16 *y, long long n)
	kCastF32BF16 = def("cast", "cast_f32_bf16", pPtr, pPtr, pI64)
	// cast_bf16_f32(const bf16 *x, float *y, long long n)
	kCastBF16F32 = def("cast", "cast_bf16_f32", pPtr, pPtr, pI64)
)

// Cast sets y to x converted from dtype from to dtype to, n elements:
// f32 to bf16 rounds to nearest even (as cu.BF16FromFloat32), bf16 to f32
// is exact, and equal dtypes copy.
func (k *Kernels) Cast(s *cu.Stream, from, to graph.DType, x, y cu.DevicePtr, n int) error {
	const op = "Cast"
	var f *kernel
	switch {
	case from == to:
		return k.Copy(s, from, x, y, n)
	case from == graph.F32 && to == graph.BF16:
		f = kCastF32BF16
	case from == graph.BF16 && to == graph.F32:
		f = kCastBF16F32
	default:
		return fmt.Errorf("%w: %s: %v to %v (want f32 and bf16)", ErrDType, op, from, to)
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/8+1, x, y, int64(n))
}
