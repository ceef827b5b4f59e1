package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFakeDriver builds the fake libcuda, libcublas and libcublasLt in
// testdata/fake against NVIDIA's headers, which checks that the prototypes
// the bindings assume are the headers' own, and runs the TestGPU* tests
// against them in a child process. The fakes check the arguments the
// bindings pass (enum values, attribute sizes, leading dimensions, the
// current context on every call) and compute with reference code, so the
// GPU tests themselves are exercised here too. It needs a C compiler and
// the CUDA headers (cuda.h, cublas_v2.h, cublasLt.h); without them it skips.
func TestFakeDriver(t *testing.T) {
	if os.Getenv("FLOWKIT_FAKE_CUDA") != "" {
		t.Skip("already running against the fake driver")
	}
	if testing.Short() {
		t.Skip("builds C libraries")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	var include string
	for _, dir := range []string{filepath.Join(os.Getenv("CUDA_HOME"), "include"), "/usr/local/cuda/include", "/usr/include"} {
		if _, err := os.Stat(filepath.Join(dir, "cublasLt.h")); err == nil {
			include = dir
			break
		}
	}
	if include == "" {
		t.Skip("no CUDA headers (cuda.h, cublasLt.h)")
	}

	dir := t.TempDir()
	lib, cudaHome := filepath.Join(dir, "lib"), filepath.Join(dir, "cuda")
	blasDir := filepath.Join(cudaHome, "lib64")
	for _, d := range []string{lib, blasDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	libcuda := filepath.Join(lib, "libcuda.so.1")
	builds := []struct{ src, out, soname string }{
		{"cuda.c", libcuda, "libcuda.so.1"},
		{"cublaslt.c", filepath.Join(blasDir, "libcublasLt.so.13"), "libcublasLt.so.13"},
		{"cublas.c", filepath.Join(blasDir, "libcublas.so.13"), "libcublas.so.13"},
	}
	for _, b := range builds {
		args := []string{"-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-deprecated-declarations", "-Werror",
			"-I", include, "-o", b.out, "-Wl,-soname," + b.soname, filepath.Join("testdata", "fake", b.src)}
		if b.out != libcuda {
			args = append(args, libcuda)
		}
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %s: %v\n%s", b.src, err, out)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestGPU", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "CUDA_HOME="+cudaHome, "FLOWKIT_FAKE_CUDA=1")
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
