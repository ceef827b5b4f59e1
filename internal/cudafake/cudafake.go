package cudafake

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

//go:embed src/*.c src/*.h
var sources embed.FS

// Option changes what the fakes do.
type Option uint8

const (
	// NoopKernels lets every kernel of a loaded module be resolved and
	// launched; a launch is checked and does nothing
	// (FLOWKIT_FAKE_CUDA_KERNELS=noop).
	NoopKernels Option = iota + 1
)

// Build compiles the fake libcuda.so.1, libcublasLt and libcublas (sonames
// .13) into a temporary directory of t and returns the environment
// variables that make a child process load them: LD_LIBRARY_PATH (the
// driver), CUDA_HOME (cuBLAS, in its lib64), FLOWKIT_FAKE_CUDA=1 and those
// the options ask for. Append them to os.Environ(). It skips t, saying why,
// where there is no C compiler ("cc") or no CUDA headers (cuda.h,
// cublas_v2.h, cublasLt.h in $FLOWKIT_CUDA_INCLUDE, $CUDA_HOME/include,
// /usr/local/cuda/include or /usr/include).
func Build(t testing.TB, opts ...Option) (env []string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	var include string
	for _, dir := range []string{os.Getenv("FLOWKIT_CUDA_INCLUDE"), filepath.Join(os.Getenv("CUDA_HOME"), "include"), "/usr/local/cuda/include", "/usr/include"} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "cublasLt.h")); err == nil {
			include = dir
			break
		}
	}
	if include == "" {
		t.Skip("no CUDA headers (cuda.h, cublasLt.h)")
	}

	dir := t.TempDir()
	src, lib, cudaHome := filepath.Join(dir, "src"), filepath.Join(dir, "lib"), filepath.Join(dir, "cuda")
	blasDir := filepath.Join(cudaHome, "lib64")
	for _, d := range []string{src, lib, blasDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files, err := sources.ReadDir("src")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := sources.ReadFile("src/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f.Name()), b, 0o644); err != nil {
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
			"-I", include, "-o", b.out, "-Wl,-soname," + b.soname, filepath.Join(src, b.src), "-lpthread"}
		if b.out != libcuda {
			args = append(args, libcuda)
		}
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %s: %v\n%s", b.src, err, out)
		}
	}
	env = []string{"LD_LIBRARY_PATH=" + lib, "CUDA_HOME=" + cudaHome, "FLOWKIT_FAKE_CUDA=1"}
	for _, o := range opts {
		if o == NoopKernels {
			env = append(env, "FLOWKIT_FAKE_CUDA_KERNELS=noop")
		}
	}
	return env
}

// RunTests runs this test binary's tests named prefix… in a child process
// against the fakes (built with opts) and returns the child's output. It
// skips t inside such a child, under -short, and where Build skips; it
// fails t unless the child passes, skips nothing and passes at least want
// tests.
func RunTests(t *testing.T, prefix string, want int, opts ...Option) string {
	t.Helper()
	if os.Getenv("FLOWKIT_FAKE_CUDA") != "" {
		t.Skip("already running against the fake driver")
	}
	if testing.Short() {
		t.Skip("builds C libraries")
	}
	env := Build(t, opts...)
	cmd := exec.Command(os.Args[0], "-test.run=^"+prefix, "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	log := string(out)
	if err != nil {
		t.Fatalf("%s* against the fake driver failed: %v\n%s", prefix, err, log)
	}
	if strings.Contains(log, "--- SKIP") {
		t.Errorf("%s* skipped tests against the fake driver:\n%s", prefix, log)
	}
	passed := regexp.MustCompile(fmt.Sprintf(`(?m)^--- PASS: %s`, regexp.QuoteMeta(prefix))).FindAllString(log, -1)
	if len(passed) < want {
		t.Errorf("%d %s* tests passed against the fake driver, want at least %d:\n%s", len(passed), prefix, want, log)
	}
	if testing.Verbose() {
		t.Log(log)
	}
	return log
}
