package cliargs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// --cpuprofile writes a profile of the command, also of one that fails,
// and a path it cannot write is refused before the command runs.
func TestCPUProfile(t *testing.T) {
	dir := t.TempDir()
	for _, fail := range []bool{false, true} {
		ran := false
		root := &cobra.Command{Use: "prog", SilenceUsage: true, SilenceErrors: true}
		CPUProfile(root, "prog")
		root.AddCommand(&cobra.Command{Use: "work", RunE: func(*cobra.Command, []string) error {
			ran = true
			if fail {
				return errors.New("failed")
			}
			return nil
		}})
		path := filepath.Join(dir, "cpu.prof")
		root.SetArgs([]string{"work", "--cpuprofile", path})
		err := root.Execute()
		require.Equal(t, fail, err != nil)
		require.True(t, ran)
		f, err := os.Open(path)
		require.NoError(t, err)
		_, err = profile.Parse(f)
		f.Close()
		require.NoError(t, err, "a CPU profile")
		require.NoError(t, os.Remove(path))

		ran = false
		root.SetArgs([]string{"work", "--cpuprofile", filepath.Join(dir, "missing", "cpu.prof")})
		require.ErrorContains(t, root.Execute(), "--cpuprofile: open ")
		require.False(t, ran)
	}
}
