package cliargs

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// CPUProfile gives root and its commands --cpuprofile FILE: a CPU profile
// of the command, written whether it succeeds or fails (go tool pprof).
// prog names the program in the message of a profile that could not be
// written. It sets root's PersistentPreRunE, which a command's own
// PersistentPreRunE would replace.
func CPUProfile(root *cobra.Command, prog string) {
	var path string
	stop := func() error { return nil }
	cobra.OnFinalize(func() { // after the command, failed or not
		err := stop()
		stop = func() error { return nil }
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: cpu profile: %v\n", prog, err)
		}
	})
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		stop = func() error {
			pprof.StopCPUProfile()
			return f.Close()
		}
		return nil
	}
	root.PersistentFlags().StringVar(&path, "cpuprofile", "", "write a CPU profile of the command to this file (go tool pprof)")
}
