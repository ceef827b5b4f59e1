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
// one. The tests run twice, the threads of each block (and the blocks)
// in one order and then in the reverse order: a race between threads that
// a barrier should order shows as a difference. What the emulator cannot
// show: races the two orders do not reveal, the GPU's own float rounding
// (fused multiply-adds, its exp and erf), and speed.
func TestKernelsOnEmulator(t *testing.T) {
	emu := cudafake.EmulatedKernels(".")
	cudafake.RunTests(t, `Test[A-Za-z0-9]*GPU$`, 20, emu)
	t.Run("reverse", func(t *testing.T) {
		t.Setenv("FLOWKIT_EMU_SCHEDULE", "reverse")
		cudafake.RunTests(t, `Test[A-Za-z0-9]*GPU$`, 20, emu)
	})
}
