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

	"github.com/flowkit/flowkit/internal/cliargs"
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
	cliargs.CPUProfile(root, "flowrun")
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
// that nothing can hang on an interrupt. Another process of the run can
// ask for the first step (Ask): rank 0, for a worker interrupted.
var interrupts = &interruptHandler{stop: make(chan struct{}), asked: make(chan string, 1)}

type interruptHandler struct {
	mu    sync.Mutex
	how   string        // what a graceful stop does, said at the first interrupt ("": none asked for)
	stop  chan struct{} // closed by the first interrupt if a graceful stop was asked for
	asked chan string   // who asks for the first step (Ask)
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

// Ask has the command stop as at its first interrupt, for who (e.g.
// "rank 2 was interrupted"), unless an interrupt already did. It never
// blocks.
func (h *interruptHandler) Ask(who string) {
	select {
	case h.asked <- who:
	default:
	}
}

// The steps of interruptHandler.handle.
const (
	stepGraceful = iota + 1 // close stop
	stepCancel              // cancel the command's context
	stepExit                // exit at once
)

// handle acts on the signals a process receives, and on requests (Ask),
// until it exits. The n-th signal takes the n-th step (the first the
// graceful stop, if one was asked for, else cancelling); a request takes
// the first; a step already taken is not taken again, so that a process
// that another asked to stop still takes two more signals of its own to
// exit.
func (h *interruptHandler) handle(signals <-chan os.Signal, cancel context.CancelFunc) {
	taken, n := 0, 0
	for {
		var why string
		step, signal := stepGraceful, false
		select {
		case sig := <-signals:
			n++
			why, step, signal = sig.String(), n, true
		case who := <-h.asked:
			why = who
		}
		h.mu.Lock()
		how := h.how
		h.mu.Unlock()
		if how == "" {
			step++
		}
		step = min(step, stepExit)
		switch {
		case step <= taken:
			if signal {
				fmt.Fprintf(os.Stderr, "\nflowrun: %s: already stopping (interrupt again to stop at once)\n", why)
			}
			continue
		case step == stepGraceful:
			again := "again" // the next signal of this process cancels
			if !signal {
				again = "twice"
			}
			fmt.Fprintf(os.Stderr, "\nflowrun: %s: %s (interrupt %s to stop at once)\n", why, how, again)
			close(h.stop)
		case step == stepCancel:
			fmt.Fprintf(os.Stderr, "\nflowrun: %s: stopping\n", why)
			cancel()
		default:
			fmt.Fprintln(os.Stderr, "flowrun: exiting")
			os.Exit(130)
		}
		taken = step
	}
}
