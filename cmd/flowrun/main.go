// Command flowrun executes flowkit graphs and plans on real devices: it
// trains models through the runtime and reports what it measured.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 3)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go interrupts.handle(signals, cancel)
	root := &cobra.Command{
		Use:   "flowrun",
		Short: "Run flowkit graphs and plans on real devices",
		Long: `flowrun executes flowkit's training graphs on real devices with real kernels
and reports what it measured.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newEvalCmd(), newSampleCmd(), newExecCmd(), newCalibrateCmd(), newDevicesCmd(), newWorkerCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flowrun:", err)
		os.Exit(1)
	}
}

// interrupts is what an interrupt (Ctrl-C, or the SIGTERM a scheduler
// sends before it kills a job) does: by default the first cancels the
// command's context; a command that can stop cleanly asks for it with
// Graceful. The next cancels, and the one after that exits at once, so
// that nothing can hang on an interrupt.
var interrupts = &interruptHandler{stop: make(chan struct{})}

type interruptHandler struct {
	mu   sync.Mutex
	how  string        // what a graceful stop does, said at the first interrupt ("": none asked for)
	stop chan struct{} // closed by the first interrupt if a graceful stop was asked for
}

// Graceful asks that the first interrupt close the channel it returns,
// saying how the command stops (e.g. "stopping after the step in flight"),
// instead of cancelling the command's context.
func (h *interruptHandler) Graceful(how string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.how = how
	return h.stop
}

// handle acts on the signals a process receives until it exits.
func (h *interruptHandler) handle(signals <-chan os.Signal, cancel context.CancelFunc) {
	sig := <-signals
	h.mu.Lock()
	how := h.how
	h.mu.Unlock()
	if how != "" {
		fmt.Fprintf(os.Stderr, "\nflowrun: %v: %s (interrupt again to stop at once)\n", sig, how)
		close(h.stop)
		sig = <-signals
	}
	fmt.Fprintf(os.Stderr, "\nflowrun: %v: stopping\n", sig)
	cancel()
	<-signals
	fmt.Fprintln(os.Stderr, "flowrun: exiting")
	os.Exit(130)
}
