// Command flowrun executes flowkit graphs and plans on real devices: it
// trains models through the runtime and reports what it measured.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := &cobra.Command{
		Use:   "flowrun",
		Short: "Run flowkit graphs and plans on real devices",
		Long: `flowrun executes flowkit's training graphs on real devices with real kernels
and reports what it measured.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newEvalCmd(), newExecCmd(), newCalibrateCmd(), newDevicesCmd(), newWorkerCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flowrun:", err)
		os.Exit(1)
	}
}
