package cuda

import (
	"testing"

	"github.com/flowkit/flowkit/internal/cudafake"
)

// TestKernelsOnEmulator runs the *GPU tests on the host: the fake driver of
// internal/cudafake with the kernels of this package's .cu files compiled
// for the emulator, every CUDA thread on a fiber, and cuBLAS computed by
// reference code. The kernels are checked against the float64 references
// and kernels/cpu as on a GPU, by the same tests, on a machine without
// one. What the emulator cannot show: races between threads that the
// barriers order (threads run one after another), the GPU's own float
// rounding (fused multiply-adds, its exp and erf), and speed.
func TestKernelsOnEmulator(t *testing.T) {
	cudafake.RunTests(t, `Test[A-Za-z0-9]*GPU$`, 17, cudafake.EmulatedKernels("."))
}
