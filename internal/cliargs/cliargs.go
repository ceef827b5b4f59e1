// Package cliargs checks the positional arguments of flowsim's and
// flowrun's commands, with errors that say what the argument is (cobra's
// own say only how many it wanted).
package cliargs

import (
	"fmt"

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
