package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDriverCandidates(t *testing.T) {
	got := driverCandidates()
	want := []string{
		"libcuda.so.1", "libcuda.so",
		"/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"/usr/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBLASSearchOrder(t *testing.T) {
	env := map[string]string{
		"CUDA_HOME": "/opt/cuda", "HOME": "/home/u", "VIRTUAL_ENV": "/srv/venv",
		"PATH": "/opt/torch/.venv/bin:/usr/local/bin:/usr/bin:relative/bin:/sbin",
	}
	glob := func(pattern string) ([]string, error) {
		found := map[string][]string{
			"/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib":     {"/usr/local/lib/python3.12/dist-packages/nvidia/cublas/lib"},
			"/home/u/.local/lib/python3*/site-packages/nvidia/cublas/lib": {"/home/u/.local/lib/python3.11/site-packages/nvidia/cublas/lib"},
			"/srv/venv/lib/python3*/site-packages/nvidia/cu13/lib":        {"/srv/venv/lib/python3.12/site-packages/nvidia/cu13/lib"},
			"/opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib": {"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib"},
		}
		return found[pattern], nil
	}
	dirs := blasDirs(func(k string) string { return env[k] }, glob)
	wantDirs := []string{
		"/opt/cuda/lib64", "/usr/local/cuda/lib64", "",
		"/usr/local/lib/python3.12/dist-packages/nvidia/cublas/lib",
		"/home/u/.local/lib/python3.11/site-packages/nvidia/cublas/lib",
		"/srv/venv/lib/python3.12/site-packages/nvidia/cu13/lib",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib",
	}
	if !slices.Equal(dirs, wantDirs) {
		t.Fatalf("dirs %q, want %q", dirs, wantDirs)
	}
	c := blasCandidates(dirs[:3])
	want := []blasPair{
		{"/opt/cuda/lib64/libcublasLt.so.13", "/opt/cuda/lib64/libcublas.so.13"},
		{"/opt/cuda/lib64/libcublasLt.so.12", "/opt/cuda/lib64/libcublas.so.12"},
		{"/opt/cuda/lib64/libcublasLt.so.11", "/opt/cuda/lib64/libcublas.so.11"},
		{"/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublas.so.13"},
		{"/usr/local/cuda/lib64/libcublasLt.so.12", "/usr/local/cuda/lib64/libcublas.so.12"},
		{"/usr/local/cuda/lib64/libcublasLt.so.11", "/usr/local/cuda/lib64/libcublas.so.11"},
		{"libcublasLt.so.13", "libcublas.so.13"},
		{"libcublasLt.so.12", "libcublas.so.12"},
		{"libcublasLt.so.11", "libcublas.so.11"},
	}
	if !slices.Equal(c, want) {
		t.Errorf("candidates %q, want %q", c, want)
	}
	if d := blasDirs(func(string) string { return "" }, glob); d[0] != "/usr/local/cuda/lib64" {
		t.Errorf("without CUDA_HOME the search starts at %q", d[0])
	}
}

func TestOpenFirstListsAttempts(t *testing.T) {
	_, _, err := openFirst([]string{"/nonexistent/libx.so.1", "libflowkit-nonexistent.so.1"})
	if err == nil {
		t.Fatal("opened a library that does not exist")
	}
	for _, want := range []string{"libflowkit-nonexistent.so.1", "not found: /nonexistent/libx.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestNotAvailable runs where there is no driver: Init, Open and NewBLAS
// must fail with ErrNotAvailable and say why, not crash.
func TestNotAvailable(t *testing.T) {
	if err := Init(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	err := Init()
	if !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("Init: got %v, want ErrNotAvailable", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "cuda: not available: ") ||
		!strings.Contains(msg, "libcuda") && !strings.Contains(msg, "cuInit") {
		t.Errorf("Init: error %q does not say what was missing", err)
	}
	t.Log(err)
	if _, err := Open(0); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("Open: got %v, want ErrNotAvailable", err)
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("DeviceCount: got %v, want ErrNotAvailable", err)
	}
	if _, err := DriverVersion(); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("DriverVersion: got %v, want ErrNotAvailable", err)
	}
	var c Context // unusable, but must not crash
	if _, err := c.NewBLAS(); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("NewBLAS: got %v, want ErrNotAvailable", err)
	}
	if _, err := c.NewBLASLt(); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("NewBLASLt: got %v, want ErrNotAvailable", err)
	}
}

// TestBLASSymbolsResolve checks, where cuBLAS is installed, that every entry
// point this package uses exists in it. Nothing is called.
func TestBLASSymbolsResolve(t *testing.T) {
	path, err := findBLAS(blasDirs(os.Getenv, filepath.Glob))
	if err != nil {
		if errors.Is(err, ErrNotAvailable) && !strings.Contains(err.Error(), "missing symbols") {
			t.Skipf("no cuBLAS here: %v", err)
		}
		t.Fatal(err)
	}
	t.Logf("resolved every symbol in %s", path)
}

func TestBLASNotFoundMessage(t *testing.T) {
	_, err := findBLAS([]string{"/nonexistent/a", "/nonexistent/b"})
	want := "cuda: not available: cuBLAS: no libcublasLt.so.{13,12,11} in /nonexistent/a, /nonexistent/b"
	if err == nil || err.Error() != want || !errors.Is(err, ErrNotAvailable) {
		t.Errorf("got %v, want %q", err, want)
	}
}
