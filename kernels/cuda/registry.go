package cuda

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
	cu "github.com/flowkit/flowkit/runtime/cuda"
)

// param is the C type of a kernel parameter, as the Go value passed for it
// must be typed: a mismatch in size or order would hand the kernel garbage,
// so every launch checks its arguments against the kernel's declaration, and
// a test checks the declarations against the compiled PTX.
type param uint8

const (
	pPtr param = iota + 1 // T * (cu.DevicePtr)
	pI32                  // int (int32)
	pI64                  // long long (int64)
	pU64                  // unsigned long long (uint64)
	pF32                  // float (float32)
	pF64                  // double (float64)
)

// ptx returns the parameter's type in a PTX .entry declaration.
func (p param) ptx() string {
	switch p {
	case pI32:
		return ".u32"
	case pF32:
		return ".f32"
	case pF64:
		return ".f64"
	}
	return ".u64"
}

// matches reports whether the Go value a has the type p asks for.
func (p param) matches(a any) bool {
	switch a.(type) {
	case cu.DevicePtr:
		return p == pPtr
	case int32:
		return p == pI32
	case int64:
		return p == pI64
	case uint64:
		return p == pU64
	case float32:
		return p == pF32
	case float64:
		return p == pF64
	}
	return false
}

func (p param) String() string {
	return [...]string{pPtr: "DevicePtr", pI32: "int32", pI64: "int64", pU64: "uint64", pF32: "float32", pF64: "float64"}[p]
}

// kernel is an extern "C" entry point of the PTX module compiled from
// module.cu.
type kernel struct {
	module string
	name   string
	params []param
	id     int // index in registry and in a Kernels' functions
}

// registry lists every kernel, in declaration order; Load resolves them all.
var registry []*kernel

// def declares a kernel; the package-level variables of the wrappers'
// files call it, each beside the kernel's C prototype.
func def(module, name string, params ...param) *kernel {
	k := &kernel{module: module, name: name, params: params, id: len(registry)}
	registry = append(registry, k)
	return k
}

// typed is a kernel instantiated for float32 and bfloat16.
type typed struct{ f32, bf16 *kernel }

// defTyped declares base_f32 and base_bf16 with the same parameters.
func defTyped(module, base string, params ...param) typed {
	return typed{def(module, base+"_f32", params...), def(module, base+"_bf16", params...)}
}

// of returns the instance for dt.
func (t typed) of(op string, dt graph.DType) (*kernel, error) {
	switch dt {
	case graph.F32:
		return t.f32, nil
	case graph.BF16:
		return t.bf16, nil
	}
	return nil, fmt.Errorf("%w: %s: %v (want f32 or bf16)", ErrDType, op, dt)
}

// check reports arguments that do not match the kernel's parameters.
func (k *kernel) check(args []any) error {
	if len(args) != len(k.params) {
		return fmt.Errorf("kernels/cuda: %s: %d arguments, want %d", k.name, len(args), len(k.params))
	}
	for i, a := range args {
		if !k.params[i].matches(a) {
			return fmt.Errorf("kernels/cuda: %s: argument %d is %T, want %v", k.name, i, a, k.params[i])
		}
	}
	return nil
}
