package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestTopoShowText(t *testing.T) {
	out, err := run(t, "topo", "show", "dlperf-v100x32")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cluster dlperf-v100x32: 4 nodes, 32 devices, 9 switches, 104 links",
		"node3/gpu7", "V100-SXM2-16GB", "nvlink2 ×2", "ib-edr",
		"bisection bandwidth: 25 GB/s per direction",
		"peak: f32 502 TFLOP/s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTopoShowJSONAndPNG(t *testing.T) {
	png := filepath.Join(t.TempDir(), "c.png")
	out, err := run(t, "topo", "show", "mixed-t4-cpu", "--json", "--png", png)
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(s.Devices) != 2 || s.Devices[1].Cores != 8 || s.Bisection.Bandwidth <= 0 {
		t.Errorf("got %+v", s)
	}
	data, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("got %d bytes, %v; want a PNG", len(data), err)
	}
}

func TestTopoShowErrors(t *testing.T) {
	_, err := run(t, "topo", "show", "dgx-z100")
	if err == nil || !strings.Contains(err.Error(), `unknown cluster "dgx-z100" (presets: dgx-a100,`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("got %v, want one line listing the presets", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("nodes:\n  - name: n\n    devices: [{name: g, type: Q1}]\n"), 0o644)
	if _, err := run(t, "topo", "show", bad); err == nil || !strings.Contains(err.Error(), "bad.yaml:3: nodes[0].devices[0].type: unknown device type") {
		t.Errorf("got %v", err)
	}
	// --png is checked before the cluster is built: a bad folder is
	// refused first, and nothing is printed.
	noDir := filepath.Join(t.TempDir(), "none", "c.png")
	want := "--png " + noDir + ": stat " + filepath.Dir(noDir) + ": no such file or directory"
	for _, cluster := range []string{"dgx-a100", "dgx-z100"} {
		if out, err := run(t, "topo", "show", cluster, "--png", noDir); err == nil || err.Error() != want || strings.Contains(out, "cluster") {
			t.Errorf("topo show %s --png %s: got %v, printing %q; want %s", cluster, noDir, err, out, want)
		}
	}
	// So is its format, and a drawing that fails leaves no file.
	bmp := filepath.Join(t.TempDir(), "c.bmp")
	if out, err := run(t, "topo", "show", "dgx-a100", "--png", bmp); err == nil || !strings.Contains(err.Error(), "--png "+bmp+": want a file ending in .png, .svg") || strings.Contains(out, "cluster") {
		t.Errorf("topo show --png %s: got %v, printing %q", bmp, err, out)
	}
	if _, err := os.Stat(bmp); !os.IsNotExist(err) {
		t.Errorf("%s: got %v, want no file", bmp, err)
	}
	if _, err := run(t, "topo", "show"); err == nil {
		t.Errorf("no argument: got no error")
	}
	// A cluster without "show" is an error that says what to type.
	if _, err := run(t, "topo", "dgx-a100"); err == nil || !strings.Contains(err.Error(), "flowsim topo show dgx-a100") {
		t.Errorf("topo dgx-a100: got %v", err)
	}
	if _, err := run(t, "topo"); err != nil {
		t.Errorf("topo alone shows its help: got %v", err)
	}
}
