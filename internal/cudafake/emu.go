package cudafake

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
)

// entryRE finds a PTX module's kernels.
var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)

// buildEmulator compiles the .cu files of dir, with the emulator's sources
// in emu, into a shared library under out and returns its path. Each .cu
// file becomes one C++ translation unit (a .cu file's helpers may share
// names with another's) that includes it and lists its kernels, the
// .entry names of the PTX beside it.
func buildEmulator(dir, emu, out string) (string, error) {
	if runtime.GOARCH != "amd64" {
		return "", fmt.Errorf("%w: the kernel emulator switches fibers in x86-64 assembly; this is %s", ErrUnavailable, runtime.GOARCH)
	}
	cxx, err := exec.LookPath("c++")
	if err != nil {
		return "", fmt.Errorf("%w: no C++ compiler (c++) for the kernel emulator", ErrUnavailable)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", err
	}
	cus, err := filepath.Glob(filepath.Join(dir, "*.cu"))
	if err != nil {
		return "", err
	}
	if len(cus) == 0 {
		return "", fmt.Errorf("kernel emulator: no .cu files in %s", dir)
	}
	// Read every source once here, so that go test's cache, which sees the
	// files this process opens but not the compiler's, knows them.
	headers, err := filepath.Glob(filepath.Join(dir, "*.cuh"))
	if err != nil {
		return "", err
	}
	for _, f := range append(headers, cus...) {
		if _, err := os.ReadFile(f); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	flags := []string{"-std=c++17", "-O1", "-fPIC", "-fno-strict-aliasing", "-Wall", "-Werror", "-Wno-unknown-pragmas",
		"-I", emu, "-I", dir}
	units := []string{filepath.Join(emu, "emu.cc")}
	for _, cu := range cus {
		name := strings.TrimSuffix(filepath.Base(cu), ".cu")
		ptx, err := os.ReadFile(filepath.Join(dir, name+".ptx"))
		if err != nil {
			return "", fmt.Errorf("kernel emulator: %s has no PTX beside it: %w", cu, err)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "// The kernels of %s for the emulator; written by cudafake.\n", filepath.Base(cu))
		fmt.Fprintf(&b, "#include %q\n#include \"entry.h\"\n\nstatic const emu::Entry entries[] = {\n", filepath.Base(cu))
		entries := entryRE.FindAllSubmatch(ptx, -1)
		for _, m := range entries {
			fmt.Fprintf(&b, "\tEMU_ENTRY(%s),\n", m[1])
		}
		if len(entries) == 0 {
			return "", fmt.Errorf("kernel emulator: %s.ptx has no .entry", name)
		}
		b.WriteString("};\nstatic emu::Registrar reg(entries, sizeof entries / sizeof *entries);\n")
		unit := filepath.Join(out, name+".emu.cc")
		if err := os.WriteFile(unit, b.Bytes(), 0o644); err != nil {
			return "", err
		}
		units = append(units, unit)
	}

	// One compiler per core: the units take seconds each.
	objs := make([]string, len(units))
	errs := make([]error, len(units))
	sem := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, unit := range units {
		objs[i] = filepath.Join(out, fmt.Sprintf("%d.o", i))
		args := append(append([]string{}, flags...), "-c", "-o", objs[i], unit)
		if i > 0 {
			args = append(args, "-include", filepath.Join(emu, "emu.h"))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if b, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("c++ %s: %v\n%s", filepath.Base(unit), err, b)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("kernel emulator: %w", err)
	}
	lib := filepath.Join(out, "libflowkit_kernels_emu.so")
	args := append([]string{"-shared", "-o", lib}, objs...)
	if b, err := exec.Command(cxx, append(args, "-lpthread")...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("kernel emulator: linking: %v\n%s", err, b)
	}
	return lib, nil
}
