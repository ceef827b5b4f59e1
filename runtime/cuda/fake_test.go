package cuda

import (
	"testing"

	"github.com/flowkit/flowkit/internal/cudafake"
)

// TestFakeDriver builds the fake libcuda, libcublas and libcublasLt of
// internal/cudafake against NVIDIA's headers, which checks that the
// prototypes the bindings assume are the headers' own, and runs the
// TestGPU* tests against them in a child process. The fakes check the
// arguments the bindings pass (enum values, attribute sizes, leading
// dimensions, the current context on every call) and compute with
// reference code, so the GPU tests themselves are exercised here too. It
// needs a C compiler and the CUDA headers (cuda.h, cublas_v2.h,
// cublasLt.h); without them it skips. The tests run twice: with streams
// that run work as it is enqueued, and with streams that run it only when
// the host waits for it (FLOWKIT_FAKE_CUDA_STREAMS=async).
func TestFakeDriver(t *testing.T) {
	for _, streams := range []string{"sync", "async"} {
		t.Run(streams, func(t *testing.T) {
			t.Setenv("FLOWKIT_FAKE_CUDA_STREAMS", streams)
			cudafake.RunTests(t, "TestGPU", 9)
		})
	}
}
