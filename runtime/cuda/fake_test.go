package cuda

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
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
// cublasLt.h); without them it skips.
func TestFakeDriver(t *testing.T) {
	if os.Getenv("FLOWKIT_FAKE_CUDA") != "" {
		t.Skip("already running against the fake driver")
	}
	if testing.Short() {
		t.Skip("builds C libraries")
	}
	env := cudafake.Build(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestGPU", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	log := string(out)
	if err != nil {
		t.Fatalf("GPU tests against the fake driver failed: %v\n%s", err, log)
	}
	if strings.Contains(log, "--- SKIP") {
		t.Errorf("GPU tests skipped against the fake driver:\n%s", log)
	}
	passed := regexp.MustCompile(`(?m)^--- PASS: TestGPU`).FindAllString(log, -1)
	if len(passed) < 9 {
		t.Errorf("%d GPU tests passed, want at least 9:\n%s", len(passed), log)
	}
	if testing.Verbose() {
		t.Log(log)
	}
}
