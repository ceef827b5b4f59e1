package data

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeTree writes files (path relative to dir → content) under a new
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

func TestLoadText(t *testing.T) {
	files := map[string]string{
		"testdata/skip.go": "SKIPPED-TESTDATA",
		"notes.txt":        "SKIPPED-EXT",
		"big.go":           strings.Repeat("SKIPPED-BIG", 100),
	}
	var want int
	for i := range 60 {
		name := fmt.Sprintf("pkg%d/f%02d.go", i%3, i)
		files[name] = fmt.Sprintf("package p%d // file %d\n", i%3, i)
		want += len(files[name]) + 1
	}
	dir := writeTree(t, files)
	train, test, err := LoadText(dir, ".go", 500)
	require.NoError(t, err)
	require.Equal(t, 60, train.Files+test.Files, "testdata, other suffixes and files over the limit are left out")
	require.Equal(t, want, len(train.Bytes)+len(test.Bytes), "every file, and a newline after each")
	require.NotContains(t, string(train.Bytes)+string(test.Bytes), "SKIPPED")
	require.Positive(t, test.Files)
	require.Less(t, test.Files, 20, "about a tenth held out")

	// A file's side depends on its path alone: a tree with fewer files
	// puts each where the whole tree did.
	for i := range 60 {
		name := fmt.Sprintf("pkg%d/f%02d.go", i%3, i)
		heldOut := strings.Contains(string(test.Bytes), files[name])
		require.NotEqual(t, heldOut, strings.Contains(string(train.Bytes), files[name]), "%s on one side", name)
	}
	sub, kept := map[string]string{}, 0 // the held-out files and ten others
	for i := range 60 {
		name := fmt.Sprintf("pkg%d/f%02d.go", i%3, i)
		if strings.Contains(string(test.Bytes), files[name]) || kept < 10 {
			sub[name] = files[name]
			kept += btoi(!strings.Contains(string(test.Bytes), files[name]))
		}
	}
	train2, test2, err := LoadText(writeTree(t, sub), ".go", 0)
	require.NoError(t, err)
	require.Equal(t, test.Files, test2.Files)
	require.Equal(t, 10, train2.Files)
	for name, content := range sub {
		require.Equal(t, strings.Contains(string(test.Bytes), content), strings.Contains(string(test2.Bytes), content), name)
		require.Equal(t, strings.Contains(string(train.Bytes), content), strings.Contains(string(train2.Bytes), content), name)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestLoadTextErrors(t *testing.T) {
	_, _, err := LoadText(filepath.Join(t.TempDir(), "missing"), ".go", 0)
	require.ErrorContains(t, err, "no such directory")
	_, _, err = LoadText(t.TempDir(), ".go", 0)
	require.True(t, errors.Is(err, ErrNoText), "%v", err)
	require.ErrorContains(t, err, "0 files named *.go")
	_, _, err = LoadText(writeTree(t, map[string]string{"a.go": "package a\n"}), ".go", 0)
	require.ErrorContains(t, err, "want some of each")
}

func TestTextWindows(t *testing.T) {
	text := &Text{Bytes: []byte("abcdefghij")} // 10 bytes
	require.Equal(t, 3, text.Windows(3), "windows start at 0, 3, 6: each needs its next byte")
	require.Equal(t, 0, text.Windows(10))
	require.Equal(t, 0, text.Windows(0))
	tokens, labels := make([]int32, 3), make([]int32, 3)
	text.Window(2, 3, tokens, labels)
	require.Equal(t, []int32{'g', 'h', 'i'}, tokens)
	require.Equal(t, []int32{'h', 'i', 'j'}, labels)
	text.Window(0, 3, nil, labels)
	require.Equal(t, []int32{'b', 'c', 'd'}, labels)
}

func TestUnigramBits(t *testing.T) {
	train, test := &Text{Bytes: []byte("aab")}, &Text{Bytes: []byte("ab")}
	// add-one: P(a) = 3/259, P(b) = 2/259
	want := -(math.Log2(3.0/259) + math.Log2(2.0/259)) / 2
	require.InDelta(t, want, train.UnigramBits(test), 1e-12)
	require.NotEqual(t, train.Sum(), test.Sum())
	require.Equal(t, train.Sum(), (&Text{Bytes: []byte("aab")}).Sum())
}

func TestLocateText(t *testing.T) {
	dir := t.TempDir()
	got, err := LocateText(dir)
	require.NoError(t, err)
	require.Equal(t, dir, got)
	_, err = LocateText(filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "no such directory")

	t.Setenv(EnvText, dir)
	got, err = LocateText("")
	require.NoError(t, err)
	require.Equal(t, dir, got)
	t.Setenv(EnvText, filepath.Join(dir, "missing"))
	_, err = LocateText("")
	require.ErrorContains(t, err, "$"+EnvText)

	// Go's own source tree: this test runs under the go command.
	t.Setenv(EnvText, "")
	got, err = LocateText("")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(got, "fmt", "print.go"))
}
