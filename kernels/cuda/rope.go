package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// rope_T(const T *x, T *y, long long rows, int seq, int heads, int kv, int d, double theta, float sign)
var kRoPE = defTyped("rope", "rope", pPtr, pPtr, pI64, pI32, pI32, pI32, pI32, pF64, pF32)

// RoPEForward sets y to the rotary position embedding of the queries and
// keys of x [rows, (heads + 2·kvHeads)·d] (graph.RoPE; row r is position
// r mod seq), the values copied, as kernels/cpu's RoPEForward does. y must
// not alias x.
func (k *Kernels) RoPEForward(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, rows, seq, heads, kvHeads, d int, theta float64) error {
	return k.rope("RoPEForward", s, dt, x, y, rows, seq, heads, kvHeads, d, theta, 1)
}

// RoPEBackward sets dx to RoPE's gradient given dy: dy rotated by the
// opposite angles, the values' gradient copied. dx must not alias dy.
func (k *Kernels) RoPEBackward(s *cu.Stream, dt graph.DType, dy, dx cu.DevicePtr, rows, seq, heads, kvHeads, d int, theta float64) error {
	return k.rope("RoPEBackward", s, dt, dy, dx, rows, seq, heads, kvHeads, d, theta, -1)
}

func (k *Kernels) rope(op string, s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, rows, seq, heads, kvHeads, d int, theta float64, sign float32) error {
	f, err := kRoPE.of(op, dt)
	if err != nil {
		return err
	}
	switch {
	case seq < 1 || heads < 1 || kvHeads < 1 || heads%kvHeads != 0 || d < 2 || d%2 != 0:
		return argErr(op, "seq %d, heads %d, kv heads %d, d %d: want kv heads dividing heads and an even d", seq, heads, kvHeads, d)
	case !(theta > 0):
		return argErr(op, "theta = %g, want > 0", theta)
	}
	if err := fits32(op, "rows cols", rows, (heads+2*kvHeads)*d); err != nil || rows == 0 {
		return err
	}
	if rows%seq != 0 {
		return argErr(op, "%d rows are not a whole number of sequences of %d", rows, seq)
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	n := int64(rows) * int64((heads+2*kvHeads)*d)
	return k.flat(s, f, n, x, y, int64(rows), int32(seq), int32(heads), int32(kvHeads), int32(d), theta, sign)
}
