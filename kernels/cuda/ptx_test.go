package cuda

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// entry is a kernel as its PTX declares it.
type entry struct {
	params     []string // ".u64", ".u32", ".f32", …
	maxThreads int      // from .maxntid (__launch_bounds__), 0 if none
	minBlocks  int      // from .minnctapersm (__launch_bounds__' second argument), 0 if none
}

var (
	entryRE  = regexp.MustCompile(`^\.visible \.entry (\w+)\($`)
	paramRE  = regexp.MustCompile(`^\s*\.param (\.\w+) \w+,?$`)
	maxntidR = regexp.MustCompile(`^\.maxntid (\d+), (\d+), (\d+)$`)
	minctaR  = regexp.MustCompile(`^\.minnctapersm (\d+)$`)
)

// parsePTX returns the entry points of a PTX file.
func parsePTX(src []byte) (map[string]*entry, error) {
	entries := map[string]*entry{}
	var cur *entry
	inParams := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := entryRE.FindStringSubmatch(line); m != nil {
			cur = &entry{}
			entries[m[1]] = cur
			inParams = true
			continue
		}
		if cur == nil {
			continue
		}
		if inParams {
			if m := paramRE.FindStringSubmatch(line); m != nil {
				cur.params = append(cur.params, m[1])
				continue
			}
			if strings.TrimSpace(line) == ")" {
				inParams = false
				continue
			}
			return nil, fmt.Errorf("unexpected line in a parameter list: %q", line)
		}
		if m := maxntidR.FindStringSubmatch(line); m != nil {
			cur.maxThreads = 1
			for _, d := range m[1:] {
				v, _ := strconv.Atoi(d)
				cur.maxThreads *= v
			}
		}
		if m := minctaR.FindStringSubmatch(line); m != nil {
			cur.minBlocks, _ = strconv.Atoi(m[1])
		}
	}
	return entries, sc.Err()
}

// embeddedEntries parses every embedded PTX module.
func embeddedEntries(t *testing.T) map[string]map[string]*entry {
	t.Helper()
	mods := map[string]map[string]*entry{}
	files, err := fs.Glob(ptxFiles, "*.ptx")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := ptxFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e, err := parsePTX(src)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		mods[strings.TrimSuffix(f, ".ptx")] = e
	}
	return mods
}

// TestSignatures checks every kernel the wrappers declare against the
// compiled PTX: it exists, in its module, with parameters of the declared
// types in the declared order, and every PTX entry point is declared.
// Together with the argument check of every launch, this is what keeps a
// wrapper from handing a kernel arguments it does not expect.
func TestSignatures(t *testing.T) {
	mods := embeddedEntries(t)
	declared := map[string]bool{}
	for _, k := range registry {
		declared[k.module+"."+k.name] = true
		e, ok := mods[k.module][k.name]
		if !ok {
			t.Errorf("%s: not in %s.ptx", k.name, k.module)
			continue
		}
		var want []string
		for _, p := range k.params {
			want = append(want, p.ptx())
		}
		if got := strings.Join(e.params, " "); got != strings.Join(want, " ") {
			t.Errorf("%s: PTX parameters %q, want %q (declared %v)", k.name, got, strings.Join(want, " "), k.params)
		}
		if e.maxThreads == 0 {
			t.Errorf("%s: no __launch_bounds__", k.name)
		}
	}
	for mod, entries := range mods {
		for name := range entries {
			if !declared[mod+"."+name] {
				t.Errorf("%s.ptx: entry %s has no wrapper", mod, name)
			}
		}
	}
}

// ptxVersion returns the "Cuda compilation tools" line of nvcc's output or
// of a PTX header.
func ptxVersion(text string) string {
	for line := range strings.Lines(text) {
		if i := strings.Index(line, "Cuda compilation tools"); i >= 0 {
			return strings.TrimSpace(line[i:])
		}
	}
	return ""
}

// TestPTXFresh regenerates the PTX where the nvcc that made the committed
// files is installed, and requires the same bytes.
func TestPTXFresh(t *testing.T) {
	if _, err := exec.LookPath("nvcc"); err != nil {
		t.Skip("nvcc not installed: cannot check that the PTX is fresh")
	}
	out, err := exec.Command("nvcc", "--version").Output()
	if err != nil {
		t.Skipf("nvcc --version: %v", err)
	}
	committed, err := os.ReadFile("elementwise.ptx")
	if err != nil {
		t.Fatal(err)
	}
	have, want := ptxVersion(string(out)), ptxVersion(string(committed))
	if have != want {
		t.Skipf("nvcc is %q, the PTX was made by %q: regenerating would differ", have, want)
	}
	dir := t.TempDir()
	if out, err := exec.Command("sh", "gen.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.ptx"))
	cus, _ := filepath.Glob("*.cu")
	if len(files) != len(cus) {
		t.Errorf("gen.sh made %d PTX files from %d .cu files", len(files), len(cus))
	}
	for _, f := range files {
		got, _ := os.ReadFile(f)
		old, err := os.ReadFile(filepath.Base(f))
		if err != nil || !bytes.Equal(got, old) {
			t.Errorf("%s is stale: run go generate ./kernels/cuda", filepath.Base(f))
		}
	}
}

var (
	ptxasFuncRE  = regexp.MustCompile(`Compiling entry function '(\w+)'`)
	ptxasRegsRE  = regexp.MustCompile(`Used (\d+) registers`)
	ptxasSpillRE = regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
)

// TestPTXAssembles runs ptxas for sm_90 (the H100 and H200) on every
// module and fails on spills and on kernels of more than 128 registers a
// thread (fewer than 16 warps a multiprocessor) unless their
// __launch_bounds__ declare fewer warps (fp32 flash attention's, the
// correctness path, which may take more rather than spill; bf16 dK, dV of
// 128-wide heads, whose blocks shared memory bounds to 8 warps anyway);
// it logs each kernel's registers.
func TestPTXAssembles(t *testing.T) {
	if _, err := exec.LookPath("ptxas"); err != nil {
		t.Skip("ptxas not installed")
	}
	mods := embeddedEntries(t) // the same files, embedded
	files, _ := filepath.Glob("*.ptx")
	for _, f := range files {
		out, err := exec.Command("ptxas", "-arch=sm_90", "-v", "-o", os.DevNull, f).CombinedOutput()
		if err != nil {
			t.Errorf("ptxas %s: %v\n%s", f, err, out)
			continue
		}
		entries := mods[strings.TrimSuffix(f, ".ptx")]
		var fn string
		for line := range strings.Lines(string(out)) {
			if m := ptxasFuncRE.FindStringSubmatch(line); m != nil {
				fn = m[1]
			}
			if m := ptxasSpillRE.FindStringSubmatch(line); m != nil && (m[1] != "0" || m[2] != "0") {
				t.Errorf("%s: %s spills: %s", f, fn, strings.TrimSpace(line))
			}
			if m := ptxasRegsRE.FindStringSubmatch(line); m != nil {
				regs, _ := strconv.Atoi(m[1])
				t.Logf("%-24s %3d registers", fn, regs)
				e := entries[fn]
				if regs > 128 && (e == nil || e.minBlocks == 0 || e.minBlocks*e.maxThreads >= 16*32) {
					t.Errorf("%s: %d registers: fewer than 16 warps a multiprocessor, which its __launch_bounds__ do not declare", fn, regs)
				}
			}
		}
	}
}
