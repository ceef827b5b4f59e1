package cuda

import (
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/kernels/cpu"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

var (
	// bias_add_T(const T *x, const T *b, T *y, int outer, int c, int inner)
	kBiasAdd = defTyped("bias", "bias_add", pPtr, pPtr, pPtr, pI32, pI32, pI32)
	// bias_act_relu_T(const T *x, const T *b, T *y, int outer, int c, int inner)
	kBiasActReLU = defTyped("bias", "bias_act_relu", pPtr, pPtr, pPtr, pI32, pI32, pI32)
	// bias_act_gelu_T(const T *x, const T *b, T *y, int outer, int c, int inner)
	kBiasActGELU = defTyped("bias", "bias_act_gelu", pPtr, pPtr, pPtr, pI32, pI32, pI32)
	// bias_act_bwd_relu_T(const T *x, const T *b, const T *dy, T *dx, int outer, int c, int inner)
	kBiasActBwdReLU = defTyped("bias", "bias_act_bwd_relu", pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32)
	// bias_act_bwd_gelu_T(const T *x, const T *b, const T *dy, T *dx, int outer, int c, int inner)
	kBiasActBwdGELU = defTyped("bias", "bias_act_bwd_gelu", pPtr, pPtr, pPtr, pPtr, pI32, pI32, pI32)
)

// BiasAdd sets y = x + b broadcast over a middle axis: with x and y viewed
// as [outer, c, inner], y[o,j,i] = x[o,j,i] + b[j]. y may alias x.
func (k *Kernels) BiasAdd(s *cu.Stream, dt graph.DType, x, b, y cu.DevicePtr, outer, c, inner int) error {
	const op = "BiasAdd"
	f, err := kBiasAdd.of(op, dt)
	if err != nil {
		return err
	}
	return k.biasLaunch(s, op, f, dt, outer, c, inner, "x b y", x, b, y)
}

// biasLaunch checks and launches f, a kernel over [outer, c, inner] whose
// parameters are the pointers (named by names) then outer, c and inner,
// one thread per 16-byte vector.
func (k *Kernels) biasLaunch(s *cu.Stream, op string, f *kernel, dt graph.DType, outer, c, inner int, names string, ptrs ...cu.DevicePtr) error {
	if err := fits32(op, "outer c inner", outer, c, inner); err != nil {
		return err
	}
	n := int64(outer) * int64(c) * int64(inner)
	if n == 0 {
		return nil
	}
	if err := notNil(op, names, ptrs...); err != nil {
		return err
	}
	args := make([]any, 0, len(ptrs)+3)
	for _, p := range ptrs {
		args = append(args, p)
	}
	return k.flat(s, f, n/vec(dt)+1, append(args, int32(outer), int32(c), int32(inner))...)
}

// biasActKernel returns the instance of act, a kernels/cpu Activation, for
// dt among relu's and gelu's.
func biasActKernel(op string, act cpu.Activation, dt graph.DType, relu, gelu typed) (*kernel, error) {
	switch act {
	case cpu.ActReLU:
		return relu.of(op, dt)
	case cpu.ActGELU:
		return gelu.of(op, dt)
	}
	return nil, argErr(op, "unknown activation %v", act)
}

// BiasAct sets y = act(x + b), b broadcast as BiasAdd broadcasts it: with
// x and y viewed as [outer, c, inner], y[o,j,i] = act(x[o,j,i] + b[j]).
// x + b is summed in float32 and, for bf16, not rounded to bf16 before the
// activation; in f32, y is bit for bit what BiasAdd followed by ReLU or
// GELU computes. y may alias x.
func (k *Kernels) BiasAct(s *cu.Stream, dt graph.DType, act cpu.Activation, x, b, y cu.DevicePtr, outer, c, inner int) error {
	const op = "BiasAct"
	f, err := biasActKernel(op, act, dt, kBiasActReLU, kBiasActGELU)
	if err != nil {
		return err
	}
	return k.biasLaunch(s, op, f, dt, outer, c, inner, "x b y", x, b, y)
}

// BiasActBackward sets dx = dy ⊙ act′(x + b), the gradient of BiasAct with
// respect to x (BiasGrad of dx is b's), recomputing x + b as BiasAct does;
// in f32, bit for bit what ReLUBackward or GELUBackward computes at
// BiasAdd's x + b. dx may alias dy.
func (k *Kernels) BiasActBackward(s *cu.Stream, dt graph.DType, act cpu.Activation, x, b, dy, dx cu.DevicePtr, outer, c, inner int) error {
	const op = "BiasActBackward"
	f, err := biasActKernel(op, act, dt, kBiasActBwdReLU, kBiasActBwdGELU)
	if err != nil {
		return err
	}
	return k.biasLaunch(s, op, f, dt, outer, c, inner, "x b dy dx", x, b, dy, dx)
}

// BiasGradWorkspace is the scratch BiasGrad needs for these sizes.
func BiasGradWorkspace(outer, c, inner int) units.Bytes {
	if outer <= 0 || c <= 0 || inner <= 0 {
		return 0
	}
	n := colChunks(outer) * c
	if inner > 1 {
		n += outer * c
	}
	return units.Bytes(4 * n)
}

// BiasGrad sets db[j] = Σ over o and i of dy[o,j,i], the gradient of
// BiasAdd's b, in an order fixed by the sizes (no atomics): for inner > 1,
// each (o, j) row of dy is summed first; then the [outer, c] matrix is
// summed down its columns by colSum. work holds BiasGradWorkspace(outer, c,
// inner) bytes.
func (k *Kernels) BiasGrad(s *cu.Stream, dt graph.DType, dy, db, work cu.DevicePtr, outer, c, inner int) error {
	const op = "BiasGrad"
	if _, err := kBiasAdd.of(op, dt); err != nil {
		return err
	}
	if err := fits32(op, "outer c inner", outer, c, inner); err != nil {
		return err
	}
	if c == 0 {
		return nil
	}
	if outer == 0 || inner == 0 {
		return k.Fill(s, dt, 0, db, c)
	}
	if err := notNil(op, "dy db work", dy, db, work); err != nil {
		return err
	}
	if inner == 1 {
		return k.colSum(s, dt, dt, dy, db, work, outer, c)
	}
	rs, err := kRowSumToF32.of(op, dt)
	if err != nil {
		return err
	}
	if err := k.rowSum(s, rs, dy, work, outer*c, inner); err != nil {
		return err
	}
	return k.colSum(s, graph.F32, dt, work, db, work+cu.DevicePtr(4*outer*c), outer, c)
}
