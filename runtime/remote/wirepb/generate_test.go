package wirepb

import (
	"bytes"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The generators and versions that made the checked-in code (see doc.go).
var generators = []struct{ name, version string }{
	{"protoc", "libprotoc 3.21.12"},
	{"protoc-gen-go", "protoc-gen-go v1.36.12"},
	{"protoc-gen-go-grpc", "protoc-gen-go-grpc 1.5.1"},
}

// The generated code is what wire.proto gives, where the same generators
// are installed (on PATH or in GOPATH/bin).
func TestGeneratedFresh(t *testing.T) {
	path := os.Getenv("PATH") + string(os.PathListSeparator) + filepath.Join(build.Default.GOPATH, "bin")
	t.Setenv("PATH", path)
	for _, g := range generators {
		out, err := exec.Command(g.name, "--version").Output()
		if err != nil {
			t.Skipf("%s not installed: %v", g.name, err)
		}
		if got := strings.TrimSpace(string(out)); got != g.version {
			t.Skipf("got %s, want %s", got, g.version)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc", "--go_out="+dir, "--go_opt=paths=source_relative",
		"--go-grpc_out="+dir, "--go-grpc_opt=paths=source_relative", "wire.proto")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	for _, name := range []string{"wire.pb.go", "wire_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate in runtime/remote/wirepb", name)
		}
	}
}
