package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote"
	"github.com/flowkit/flowkit/units"
)

func newWorkerCmd() *cobra.Command {
	var listen, tokenFile string
	var spawned bool // started by --procs, which says where the ranks are
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Serve as one rank of a multi-process run that 'flowrun exec' coordinates",
		Long: `Join a multi-process run as rank $RANK of $WORLD_SIZE: dial the coordinator
('flowrun exec PLAN' running as rank 0) at $MASTER_ADDR:$MASTER_PORT, receive
the plan and the devices this rank runs, and run them as the coordinator
says, exchanging tensors with the other ranks over gRPC streams. The worker
exits when the coordinator ends the run (or disappears).

These are the variables torchrun, Slurm (with a small wrapper) and Kubernetes
indexed jobs set. Every rank needs the same secret, from $FLOWRUN_TOKEN or
--token-file; a worker serves its peers on --listen, which binds to loopback
unless you name another address.

'flowrun exec --procs N' starts N−1 workers on this host itself, each in a
process group of its own, out of the reach of the terminal's Ctrl-C: the
coordinator ends them.

Rank 0 decides when the run stops. A worker's first interrupt (the SIGTERM
a scheduler sends every rank of a job it is about to kill, or this pod
alone that it evicts) asks rank 0 to stop as at its own first interrupt:
a training run with --save stops after the same steps on every rank,
saves, and ends the run; one without ends at once. The second stops the
worker at once.`,
		Example: `  # on each of two hosts (rank 0 runs flowrun exec):
  export WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 FLOWRUN_TOKEN=$(cat secret)
  RANK=0 flowrun exec plan.json --compare
  RANK=1 flowrun worker --listen 10.0.0.2:0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd.Context(), listen, tokenFile, spawned)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address this worker serves its peers on (port 0: any free port)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the run's shared secret (default: $FLOWRUN_TOKEN)")
	cmd.Flags().BoolVar(&spawned, procsFlag, false, "started by --procs: no word of joining")
	_ = cmd.Flags().MarkHidden(procsFlag)
	return cmd
}

// procsFlag is the hidden flag of the workers --procs starts.
const procsFlag = "spawned-by-procs"

func runWorker(ctx context.Context, listen, tokenFile string, spawned bool) error {
	o, err := remote.FromEnv()
	if err != nil {
		return err
	}
	if o.Rank == 0 {
		return errors.New("RANK=0 is the coordinator: run 'flowrun exec PLAN' there")
	}
	if o.Token, err = readToken(tokenFile); err != nil {
		return err
	}
	o.Listen = listen
	if !spawned { // a launcher's rank: say where it waits, and how long
		fmt.Fprintf(os.Stderr, "flowrun: rank %d of %d: joining the coordinator at %s (for up to %v)\n", o.Rank, o.World, o.Master, cmp.Or(o.JoinTimeout, remote.DefaultJoinTimeout))
	}
	g, err := remote.Join(ctx, o) // an interrupt meanwhile cancels ctx: there is no run to stop yet
	if err != nil {
		return err
	}
	stop := interrupts.Graceful("asking rank 0 to stop the run on every rank")
	defer g.Close()
	var (
		p      *plans.Plan
		runner *runtime.PlanRunner
		feed   runtime.Feeder
	)
	for {
		kind, payload, err := g.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var reply workerReply
		switch kind {
		case cmdSetup:
			var s workerSetup
			if err := decodeGob(payload, &s); err != nil {
				return fmt.Errorf("setup from the coordinator: %w", err)
			}
			if p, err = plans.Decode(bytes.NewReader(s.Plan)); err != nil {
				reply.Err = err.Error()
				break
			}
			if runner, err = runtime.NewRankRunner(p, s.Ranks, g.Link()); err != nil {
				reply.Err = err.Error()
				break
			}
			runner.Stall = s.Stall
			runner.Stop = stop
			if feed, err = s.Feed.feeder(p); err != nil {
				reply.Err = err.Error()
			}
		case cmdRun:
			var r workerRun
			if err := decodeGob(payload, &r); err != nil {
				return fmt.Errorf("run from the coordinator: %w", err)
			}
			if runner == nil {
				reply.Err = "run before setup"
				break
			}
			res, err := runner.Run(ctx, r.Iters, feed)
			if err != nil {
				reply.Err = err.Error()
				break
			}
			reply.Part = res.Part
		case cmdEcho:
			var e workerEcho
			if err := decodeGob(payload, &e); err != nil {
				return fmt.Errorf("echo from the coordinator: %w", err)
			}
			if g.Rank() == 1 {
				if err := echo(ctx, g.Link(), e); err != nil {
					return err
				}
			}
		case cmdResume:
			var r workerResume
			if err := decodeGob(payload, &r); err != nil {
				return fmt.Errorf("resume from the coordinator: %w", err)
			}
			if runner == nil {
				reply.Err = "resume before setup"
				break
			}
			w := runtime.NewStore(r.Seed)
			err := w.Put(r.Tensors...)
			if err == nil {
				err = runner.Resume(&runtime.Checkpoint{Model: r.Model, Seed: r.Seed, Step: r.Step, Weights: w})
			}
			if err != nil {
				reply.Err = err.Error()
			}
		case cmdStore:
			if runner == nil {
				reply.Err = "store before setup"
				break
			}
			s, err := runner.Store()
			if err != nil {
				reply.Err = err.Error()
				break
			}
			reply.Tensors = s.Tensors()
		default:
			reply.Err = fmt.Sprintf("unknown command %q", kind)
		}
		b, err := encodeGob(reply)
		if err != nil {
			return err
		}
		if err := g.Reply(b); err != nil {
			return err
		}
	}
}

// echo sends the next e.Count messages of run e.Run back to rank 0; with
// e.Exchange, it sends rank 0 a message of e.Size bytes e.Count times, each
// as rank 0 sends one to it, the next once rank 0's has arrived.
func echo(ctx context.Context, link runtime.Link, e workerEcho) error {
	inbox := link.Inbox(e.Run)
	defer link.Forget(e.Run)
	var own *runtime.Message
	if e.Exchange {
		if e.Size < 4 || e.Size%4 != 0 || e.Size > maxLinkMessage {
			return fmt.Errorf("echo: exchange of %d bytes: want a positive multiple of 4 up to %v", e.Size, units.Bytes(maxLinkMessage))
		}
		own = &runtime.Message{Run: e.Run, Kind: runtime.MsgData, F: make([]float32, e.Size/4)}
	}
	for range e.Count {
		if own != nil {
			if err := link.Send(0, own); err != nil {
				return err
			}
		}
		select {
		case m, ok := <-inbox:
			if !ok {
				return fmt.Errorf("echo: %w", link.Err())
			}
			if own == nil {
				if err := link.Send(0, m); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
