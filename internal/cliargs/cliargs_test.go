package cliargs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArgs(t *testing.T) {
	one := One("a plan file")
	require.NoError(t, one(nil, []string{"p.json"}))
	require.EqualError(t, one(nil, nil), "give a plan file")
	require.EqualError(t, one(nil, []string{"a", "b"}), `want one argument, a plan file; got 2: ["a" "b"]`)
	some := AtLeastOne("the shards' JSON files")
	require.NoError(t, some(nil, []string{"a", "b"}))
	require.EqualError(t, some(nil, nil), "give the shards' JSON files")
}

func TestOutput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.json")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tt := range []struct{ path, err string }{
		{"", ""},
		{file, ""},
		{filepath.Join(dir, "new.json"), ""},
		{dir, "-o " + dir + ": is a directory"},
		{filepath.Join(dir, "none", "p.json"), "-o " + filepath.Join(dir, "none", "p.json") + ": stat " + filepath.Join(dir, "none") + ": no such file or directory"},
		{filepath.Join(file, "p.json"), "-o " + filepath.Join(file, "p.json") + ": " + file + " is not a directory"},
	} {
		err := Output("-o", tt.path)
		if tt.err == "" {
			require.NoError(t, err, tt.path)
			continue
		}
		require.EqualError(t, err, tt.err)
	}
}

func TestOutputDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tt := range []struct{ path, err string }{
		{"", ""},
		{dir, ""},
		{filepath.Join(dir, "new"), ""},
		{filepath.Join(dir, "new", "deeper") + "/", ""},
		{file, "--pprof " + file + ": is not a directory"},
		{filepath.Join(file, "p"), "--pprof " + filepath.Join(file, "p") + ": " + file + " is not a directory"},
		{filepath.Join(file, "p", "q"), "--pprof " + filepath.Join(file, "p", "q") + ": " + file + " is not a directory"},
	} {
		err := OutputDir("--pprof", tt.path)
		if tt.err == "" {
			require.NoError(t, err, tt.path)
			continue
		}
		require.EqualError(t, err, tt.err)
	}
	require.NoDirExists(t, filepath.Join(dir, "new"), "checking makes nothing")
}
