package cudafake

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

//go:embed src/*.c src/*.h src/emu/*
var sources embed.FS

// Option changes what the fakes do.
type Option struct {
	kernels string // FLOWKIT_FAKE_CUDA_KERNELS
	dir     string // the kernel sources, for "emu"
}

// NoopKernels lets every kernel of a loaded module be resolved and
// launched; a launch is checked and does nothing
// (FLOWKIT_FAKE_CUDA_KERNELS=noop).
var NoopKernels = Option{kernels: "noop"}

// EmulatedKernels runs the kernels of the .cu files in dir on the host:
// Build compiles them with the emulator (src/emu) into a library the fake
// driver loads (FLOWKIT_FAKE_CUDA_KERNELS=emu), and a launch of an entry of
// a loaded PTX module runs the kernel of that name, every CUDA thread on a
// fiber. The entries are those of the .ptx file beside each .cu file. It
// needs a C++ compiler ("c++") and an amd64 host.
func EmulatedKernels(dir string) Option { return Option{kernels: "emu", dir: dir} }

// ErrUnavailable is what BuildDir's error wraps where the machine lacks
// what the fakes need: a compiler or the CUDA headers.
var ErrUnavailable = errors.New("cannot build the fake CUDA libraries here")

// Build is BuildDir into a temporary directory of t. It skips t, saying
// why, where BuildDir's error is ErrUnavailable, and fails it on others.
func Build(t testing.TB, opts ...Option) (env []string) {
	t.Helper()
	env, err := BuildDir(t.TempDir(), opts...)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// BuildDir compiles the fake libcuda.so.1, libcublasLt and libcublas
// (sonames .13) into dir and returns the environment variables that make a
// process load them: LD_LIBRARY_PATH (the driver), CUDA_HOME (cuBLAS, in
// its lib64), FLOWKIT_FAKE_CUDA=1 and those the options ask for. Append
// them to os.Environ(). The error wraps ErrUnavailable where there is no C
// compiler ("cc"), no CUDA headers (cuda.h, cublas_v2.h, cublasLt.h in
// $FLOWKIT_CUDA_INCLUDE, $CUDA_HOME/include, /usr/local/cuda/include or
// /usr/include), or what EmulatedKernels needs.
func BuildDir(dir string, opts ...Option) (env []string, err error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return nil, fmt.Errorf("%w: no C compiler (cc)", ErrUnavailable)
	}
	var include string
	for _, d := range []string{os.Getenv("FLOWKIT_CUDA_INCLUDE"), filepath.Join(os.Getenv("CUDA_HOME"), "include"), "/usr/local/cuda/include", "/usr/include"} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "cublasLt.h")); err == nil {
			include = d
			break
		}
	}
	if include == "" {
		return nil, fmt.Errorf("%w: no CUDA headers (cuda.h, cublasLt.h; set $FLOWKIT_CUDA_INCLUDE)", ErrUnavailable)
	}

	src, lib, cudaHome := filepath.Join(dir, "src"), filepath.Join(dir, "lib"), filepath.Join(dir, "cuda")
	blasDir := filepath.Join(cudaHome, "lib64")
	for _, d := range []string{lib, blasDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	tree, err := fs.Sub(sources, "src")
	if err != nil {
		return nil, err
	}
	if err := os.CopyFS(src, tree); err != nil {
		return nil, err
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
			return nil, fmt.Errorf("cc %s: %v\n%s", b.src, err, out)
		}
	}
	env = []string{"LD_LIBRARY_PATH=" + lib, "CUDA_HOME=" + cudaHome, "FLOWKIT_FAKE_CUDA=1"}
	for _, o := range opts {
		env = append(env, "FLOWKIT_FAKE_CUDA_KERNELS="+o.kernels)
		if o.kernels == "emu" {
			emu, err := buildEmulator(o.dir, filepath.Join(src, "emu"), filepath.Join(dir, "emu"))
			if err != nil {
				return nil, err
			}
			env = append(env, "FLOWKIT_FAKE_CUDA_EMU="+emu)
		}
	}
	return env, nil
}

// RunTests runs this test binary's top-level tests whose names match
// pattern (a regular expression anchored at the start, as a prefix) in a
// child process against the fakes (built with opts) and returns the child's
// output. It skips t inside such a child, under -short, where Build
// skips, and in the GPU check ($FLOWKIT_REQUIRE_GPU set: the tests run on
// the GPU there); it fails t unless the child passes, skips nothing and passes at
// least want tests.
func RunTests(t *testing.T, pattern string, want int, opts ...Option) string {
	t.Helper()
	if os.Getenv("FLOWKIT_FAKE_CUDA") != "" {
		t.Skip("already running against the fake driver")
	}
	if testing.Short() {
		t.Skip("builds C libraries")
	}
	if os.Getenv("FLOWKIT_REQUIRE_GPU") != "" {
		t.Skip("the GPU check ($FLOWKIT_REQUIRE_GPU): the tests run on the GPU instead")
	}
	env := Build(t, opts...)
	name := regexp.MustCompile("^(?:" + pattern + ")")
	cmd := exec.Command(os.Args[0], "-test.run=^(?:"+pattern+")", "-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	log := string(out)
	if err != nil {
		t.Fatalf("%s against the fake driver failed: %v\n%s", pattern, err, log)
	}
	if strings.Contains(log, "--- SKIP") {
		t.Errorf("%s: tests skipped against the fake driver:\n%s", pattern, log)
	}
	passed := 0
	for _, m := range regexp.MustCompile(`(?m)^--- PASS: (\S+)`).FindAllStringSubmatch(log, -1) {
		if name.MatchString(m[1]) {
			passed++
		}
	}
	if passed < want {
		t.Errorf("%d tests matching %s passed against the fake driver, want at least %d:\n%s", passed, pattern, want, log)
	}
	if testing.Verbose() {
		t.Log(log)
	}
	return log
}
