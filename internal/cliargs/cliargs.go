// Package cliargs checks the positional arguments of flowsim's and
// flowrun's commands, with errors that say what the argument is (cobra's
// own say only how many it wanted), and the files their flags name.
package cliargs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// One wants exactly one argument, what it is: "a plan file (from
// 'flowsim plan')".
func One(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch len(args) {
		case 1:
			return nil
		case 0:
			return fmt.Errorf("give %s", what)
		default:
			return fmt.Errorf("want one argument, %s; got %d: %q", what, len(args), args)
		}
	}
}

// AtLeastOne wants one or more arguments, each what it is.
func AtLeastOne(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("give %s", what)
		}
		return nil
	}
}

// Output checks that path, the file a flag names for a command's output,
// can be written, so that a command fails before its work, not after it:
// that it is not a directory, and that its directory exists. An empty
// path (no output asked for) passes.
func Output(flag, path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s %s: is a directory", flag, path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, path, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory", flag, path, dir)
	}
	return nil
}

// OutputDir checks that dir, the folder a flag names for a command's
// outputs, can be made or written into before the command's work, which
// creates it (os.MkdirAll) only after: that it is a directory if it
// exists, and that the nearest part of its path that exists is one if it
// does not. An empty dir (no output asked for) passes.
func OutputDir(flag, dir string) error {
	if dir == "" {
		return nil
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && filepath.Dir(p) != p:
			continue // made by MkdirAll, if what holds it is a directory
		case err != nil:
			return fmt.Errorf("%s %s: %w", flag, dir, err)
		case !fi.IsDir() && p == filepath.Clean(dir):
			return fmt.Errorf("%s %s: is not a directory", flag, dir)
		case !fi.IsDir():
			return fmt.Errorf("%s %s: %s is not a directory", flag, dir, p)
		}
		return nil
	}
}
