package cuda

import (
	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
	"github.com/flowkit/flowkit/units"
)

// The elementwise kernels take n elements of dt; n = 0 launches nothing.

var (
	// relu_T(const T *x, T *y, long long n)
	kReLU = defTyped("elementwise", "relu", pPtr, pPtr, pI64)
	// gelu_T(const T *x, T *y, long long n)
	kGELU = defTyped("elementwise", "gelu", pPtr, pPtr, pI64)
	// relu_bwd_T(const T *x, const T *dy, T *dx, long long n)
	kReLUBwd = defTyped("elementwise", "relu_bwd", pPtr, pPtr, pPtr, pI64)
	// gelu_bwd_T(const T *x, const T *dy, T *dx, long long n)
	kGELUBwd = defTyped("elementwise", "gelu_bwd", pPtr, pPtr, pPtr, pI64)
	// swiglu_T(const T *gate, const T *up, T *y, long long n)
	kSwiGLU = defTyped("elementwise", "swiglu", pPtr, pPtr, pPtr, pI64)
	// swiglu_bwd_T(const T *gate, const T *up, const T *dy, T *dgate, T *dup, long long n)
	kSwiGLUBwd = defTyped("elementwise", "swiglu_bwd", pPtr, pPtr, pPtr, pPtr, pPtr, pI64)
	// add_T(const T *a, const T *b, T *y, long long n)
	kAdd = defTyped("elementwise", "add", pPtr, pPtr, pPtr, pI64)
	// mul_T(const T *a, const T *b, T *y, long long n)
	kMul = defTyped("elementwise", "mul", pPtr, pPtr, pPtr, pI64)
	// scale_T(float alpha, const T *x, T *y, long long n)
	kScale = defTyped("elementwise", "scale", pF32, pPtr, pPtr, pI64)
	// axpy_T(float alpha, const T *x, T *y, long long n)
	kAxpy = defTyped("elementwise", "axpy", pF32, pPtr, pPtr, pI64)
	// fill_T(float v, T *y, long long n)
	kFill = defTyped("elementwise", "fill", pF32, pPtr, pI64)
)

// unary launches a kernel of parameters (x, y, n).
func (k *Kernels) unary(op string, t typed, s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, n int) error {
	f, err := t.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, x, y, int64(n))
}

// binary launches a kernel of parameters (a, b, y, n).
func (k *Kernels) binary(op string, t typed, s *cu.Stream, dt graph.DType, a, b, y cu.DevicePtr, n int) error {
	f, err := t.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "a b y", a, b, y); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, a, b, y, int64(n))
}

// ReLU sets y = max(x, 0) as kernels/cpu's ReLU does (bit for bit). y may
// alias x.
func (k *Kernels) ReLU(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, n int) error {
	return k.unary("ReLU", kReLU, s, dt, x, y, n)
}

// ReLUBackward sets dx = dy where x > 0 and 0 elsewhere.
func (k *Kernels) ReLUBackward(s *cu.Stream, dt graph.DType, x, dy, dx cu.DevicePtr, n int) error {
	return k.binary("ReLUBackward", kReLUBwd, s, dt, x, dy, dx, n)
}

// GELU sets y = x·Φ(x), the exact form. y may alias x.
func (k *Kernels) GELU(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, n int) error {
	return k.unary("GELU", kGELU, s, dt, x, y, n)
}

// SwiGLU sets y = silu(gate)·up = gate·σ(gate)·up (graph.SwiGLU). y may
// alias gate or up.
func (k *Kernels) SwiGLU(s *cu.Stream, dt graph.DType, gate, up, y cu.DevicePtr, n int) error {
	return k.binary("SwiGLU", kSwiGLU, s, dt, gate, up, y, n)
}

// SwiGLUBackward sets dgate = dy·up·σ(g)·(1 + g·(1 − σ(g))) and dup =
// dy·silu(g), g = gate, SwiGLU's gradients.
func (k *Kernels) SwiGLUBackward(s *cu.Stream, dt graph.DType, gate, up, dy, dgate, dup cu.DevicePtr, n int) error {
	const op = "SwiGLUBackward"
	f, err := kSwiGLUBwd.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "gate up dy dgate dup", gate, up, dy, dgate, dup); err != nil {
		return err
	}
	return k.flat(s, f, int64(n), gate, up, dy, dgate, dup, int64(n))
}

// GELUBackward sets dx = dy·(Φ(x) + x·φ(x)).
func (k *Kernels) GELUBackward(s *cu.Stream, dt graph.DType, x, dy, dx cu.DevicePtr, n int) error {
	return k.binary("GELUBackward", kGELUBwd, s, dt, x, dy, dx, n)
}

// Add sets y = a + b.
func (k *Kernels) Add(s *cu.Stream, dt graph.DType, a, b, y cu.DevicePtr, n int) error {
	return k.binary("Add", kAdd, s, dt, a, b, y, n)
}

// Mul sets y = a ⊙ b.
func (k *Kernels) Mul(s *cu.Stream, dt graph.DType, a, b, y cu.DevicePtr, n int) error {
	return k.binary("Mul", kMul, s, dt, a, b, y, n)
}

// Scale sets y = alpha·x.
func (k *Kernels) Scale(s *cu.Stream, dt graph.DType, alpha float32, x, y cu.DevicePtr, n int) error {
	return k.scaled("Scale", kScale, s, dt, alpha, x, y, n)
}

// Axpy sets y += alpha·x, the accumulation of a gradient.
func (k *Kernels) Axpy(s *cu.Stream, dt graph.DType, alpha float32, x, y cu.DevicePtr, n int) error {
	return k.scaled("Axpy", kAxpy, s, dt, alpha, x, y, n)
}

func (k *Kernels) scaled(op string, t typed, s *cu.Stream, dt graph.DType, alpha float32, x, y cu.DevicePtr, n int) error {
	f, err := t.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, alpha, x, y, int64(n))
}

// Copy sets y = x (a device-to-device copy of n elements of dt).
func (k *Kernels) Copy(s *cu.Stream, dt graph.DType, x, y cu.DevicePtr, n int) error {
	const op = "Copy"
	if _, err := kFill.of(op, dt); err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "x y", x, y); err != nil {
		return err
	}
	return k.be.copy(s, y, x, dt.Size()*units.Bytes(n))
}

// Fill sets every element of y to v, rounded once to dt.
func (k *Kernels) Fill(s *cu.Stream, dt graph.DType, v float32, y cu.DevicePtr, n int) error {
	const op = "Fill"
	f, err := kFill.of(op, dt)
	if err != nil {
		return err
	}
	if err := nonNeg(op, "n", n); err != nil || n == 0 {
		return err
	}
	if err := notNil(op, "y", y); err != nil {
		return err
	}
	return k.flat(s, f, int64(n)/vec(dt)+1, v, y, int64(n))
}
