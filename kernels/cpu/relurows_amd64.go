//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// reluRowsImpls lists the ReLU row kernels this CPU can run, slowest first.
var reluRowsImpls = func() []reluRows {
	impls := []reluRows{reluRowsGo}
	if cpu.X86.HasAVX2 {
		impls = append(impls, reluRows{"avx2", addReLUAVX2, addReLUVecAVX2, addReLUGradAVX2, addReLUGradVecAVX2})
	}
	return impls
}()

// The AVX2 rows do eight values at a time and leave the rest (fewer than
// eight) to the Go rows; the arithmetic is the same, bit for bit.

func addReLUAVX2(x []float32, b float32, y []float32) {
	n := len(y) &^ 7
	if n > 0 {
		_ = x[n-1]
		addReLU8(n, &x[0], b, &y[0])
	}
	addReLUGo(x[n:len(y)], b, y[n:])
}

func addReLUVecAVX2(x, b, y []float32) {
	n := len(y) &^ 7
	if n > 0 {
		_, _ = x[n-1], b[n-1]
		addReLUVec8(n, &x[0], &b[0], &y[0])
	}
	addReLUVecGo(x[n:len(y)], b[n:len(y)], y[n:])
}

func addReLUGradAVX2(x []float32, b float32, dy, dx []float32) {
	n := len(dx) &^ 7
	if n > 0 {
		_, _ = x[n-1], dy[n-1]
		addReLUGrad8(n, &x[0], b, &dy[0], &dx[0])
	}
	addReLUGradGo(x[n:len(dx)], b, dy[n:len(dx)], dx[n:])
}

func addReLUGradVecAVX2(x, b, dy, dx []float32) {
	n := len(dx) &^ 7
	if n > 0 {
		_, _, _ = x[n-1], b[n-1], dy[n-1]
		addReLUGradVec8(n, &x[0], &b[0], &dy[0], &dx[0])
	}
	addReLUGradVecGo(x[n:len(dx)], b[n:len(dx)], dy[n:len(dx)], dx[n:])
}

// addReLU8 sets y[i] = relu(x[i] + b) for i < n, a multiple of 8.
//
//go:noescape
func addReLU8(n int, x *float32, b float32, y *float32)

// addReLUVec8 sets y[i] = relu(x[i] + b[i]) for i < n, a multiple of 8.
//
//go:noescape
func addReLUVec8(n int, x, b, y *float32)

// addReLUGrad8 sets dx[i] = dy[i] where x[i] + b > 0, else +0, for i < n,
// a multiple of 8.
//
//go:noescape
func addReLUGrad8(n int, x *float32, b float32, dy, dx *float32)

// addReLUGradVec8 sets dx[i] = dy[i] where x[i] + b[i] > 0, else +0, for
// i < n, a multiple of 8.
//
//go:noescape
func addReLUGradVec8(n int, x, b, dy, dx *float32)
