package cuda

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"
)

// symbol is one C entry point to resolve: its exported name and where to
// store its address. Optional symbols leave the address 0 when missing.
type symbol struct {
	name     string
	addr     *uintptr
	optional bool
}

// openFirst dlopens the first candidate that loads. The error lists every
// attempt briefly: missing files by path, other failures with dlerror's text.
func openFirst(candidates []string) (handle uintptr, path string, err error) {
	var missing, failed []string
	for _, c := range candidates {
		if filepath.IsAbs(c) {
			if _, err := os.Stat(c); errors.Is(err, fs.ErrNotExist) {
				missing = append(missing, c)
				continue
			}
		}
		h, err := dlopen(c)
		if err == nil {
			return h, c, nil
		}
		failed = append(failed, err.Error())
	}
	var parts []string
	if len(failed) > 0 {
		parts = append(parts, strings.Join(failed, "; "))
	}
	if len(missing) > 0 {
		parts = append(parts, "not found: "+strings.Join(missing, ", "))
	}
	return 0, "", errors.New(strings.Join(parts, "; "))
}

// resolve looks up every symbol in the library at handle.
func resolve(handle uintptr, lib string, syms []symbol) error {
	var missing []string
	for _, s := range syms {
		a, err := dlsym(handle, s.name)
		if err != nil || a == 0 {
			if !s.optional {
				missing = append(missing, s.name)
			}
			continue
		}
		*s.addr = a
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing symbols %s", lib, strings.Join(missing, ", "))
	}
	return nil
}

// driverCandidates is the search order for libcuda: the dynamic loader's own
// path first, then the places drivers are installed in containers and WSL.
func driverCandidates() []string {
	c := []string{"libcuda.so.1", "libcuda.so"}
	for _, dir := range []string{"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib"} {
		c = append(c, filepath.Join(dir, "libcuda.so.1"))
	}
	return c
}

// blasSonameVersions are the cuBLAS major versions tried, newest first.
var blasSonameVersions = []string{"13", "12", "11"}

// blasDirs lists the directories searched for cuBLAS in order; "" stands for
// the dynamic loader's default path. After the toolkit's folders come the
// folders pip wheels install cuBLAS into (nvidia/cublas/lib, and
// nvidia/cu13/lib for CUDA 13 wheels) under the system Pythons, the user's,
// an active virtual environment's, and those of every bin folder on PATH
// (a venv's python3 need not be activated to be first on PATH). getenv and
// glob are parameters so that the order can be tested.
func blasDirs(getenv func(string) string, glob func(string) ([]string, error)) []string {
	var dirs []string
	if h := getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "lib64"))
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "")
	prefixes := []string{"/usr", "/usr/local"}
	if home := getenv("HOME"); home != "" {
		prefixes = append(prefixes, filepath.Join(home, ".local"))
	}
	if venv := getenv("VIRTUAL_ENV"); venv != "" {
		prefixes = append(prefixes, venv)
	}
	for _, dir := range filepath.SplitList(getenv("PATH")) {
		if filepath.IsAbs(dir) && filepath.Base(dir) == "bin" {
			prefixes = append(prefixes, filepath.Dir(dir))
		}
	}
	for _, prefix := range prefixes {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			for _, sub := range []string{"nvidia/cublas/lib", "nvidia/cu13/lib"} {
				matches, _ := glob(filepath.Join(prefix, "lib/python3*", pkgs, sub))
				dirs = append(dirs, matches...)
			}
		}
	}
	seen := make(map[string]bool)
	return slices.DeleteFunc(dirs, func(d string) bool {
		dup := seen[d]
		seen[d] = true
		return dup
	})
}

// blasPair is one place to load cuBLAS from: libcublasLt first (libcublas
// depends on it and the pair must match), then libcublas.
type blasPair struct{ lt, blas string }

func blasCandidates(dirs []string) []blasPair {
	var c []blasPair
	for _, dir := range dirs {
		for _, v := range blasSonameVersions {
			c = append(c, blasPair{
				lt:   filepath.Join(dir, "libcublasLt.so."+v),
				blas: filepath.Join(dir, "libcublas.so."+v),
			})
		}
	}
	return c
}

// goString copies the NUL-terminated C string at p.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := cPointer(p)
	n := 0
	for *(*byte)(unsafe.Add(ptr, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}

// cPointer converts the address of C memory, which the garbage collector
// neither moves nor frees, to a pointer. Converting through memory rather
// than with unsafe.Pointer(p) keeps vet's unsafeptr check, which cannot know
// that p is not Go memory, quiet.
func cPointer(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
