package remote

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// worker is a worker's part of a group: its control stream from the
// coordinator. The fields after control are guarded by the group's mu.
type worker struct {
	control grpc.ServerStreamingClient[wirepb.Command]
	cancel  context.CancelCauseFunc // ends the control stream

	commands []*wirepb.Payload // broadcasts not yet taken by Next
	bye      bool              // the coordinator closed the group
	closeErr error             // from closing the streams after the goodbye
}

// Join is a worker's part of the setup: it serves the other ranks at
// o.Listen, joins the coordinator at o.Master (waiting up to o.JoinTimeout
// for it to listen, since workers may start first), and returns once the
// mesh of Deliver streams is up. ctx bounds the setup only.
func Join(ctx context.Context, o Options) (*Group, error) {
	o, err := o.check()
	if err != nil {
		return nil, err
	}
	if o.Rank == 0 {
		return nil, errors.New("remote: Join is for workers (rank ≥ 1); rank 0 calls Coordinate")
	}
	g, err := newGroup(o)
	if err != nil {
		return nil, err
	}
	g.worker = &worker{}
	addr, err := g.serve(o.Listen)
	if err != nil {
		g.end()
		return nil, err
	}
	if err := g.worker.setup(ctx, g, addr); err != nil {
		g.abort(0)
		return nil, err
	}
	return g, nil
}

// setup joins the coordinator, learns the peer table from it and opens the
// mesh; addr is where this worker serves the other ranks.
func (w *worker) setup(ctx context.Context, g *Group, addr string) error {
	conn, err := g.dial(g.o.Master)
	if err != nil {
		return err
	}
	g.conns[0] = conn
	peers, err := w.join(ctx, g, addr)
	if err != nil {
		return err
	}
	go w.readControl(g)
	if err := g.connect(ctx, peers); err != nil {
		return err
	}
	return g.measureClocks(ctx, peers)
}

// join sends the join request and waits for the peer table.
func (w *worker) join(ctx context.Context, g *Group, addr string) ([]*wirepb.Peer, error) {
	sctx, cancel := context.WithCancelCause(g.life)
	w.cancel = cancel
	ctx, stopTimer := context.WithTimeout(ctx, g.o.JoinTimeout)
	defer stopTimer()
	// The control stream outlives ctx, which bounds only the join.
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	g.mu.Lock()
	g.stopJoin = cancel
	g.mu.Unlock()
	req := &wirepb.JoinRequest{Rank: int32(g.o.Rank), World: int32(g.o.World), Address: addr, Hostname: g.o.Hostname}
	stream, err := wirepb.NewWireClient(g.conns[0]).Join(sctx, req, grpc.WaitForReady(true))
	var first *wirepb.Command
	if err == nil {
		first, err = stream.Recv()
	}
	g.mu.Lock()
	g.stopJoin = nil
	g.mu.Unlock()
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if cause := context.Cause(sctx); errors.Is(cause, errPeerKey) {
		err = cause
	}
	if err != nil {
		return nil, w.joinError(ctx, g, err)
	}
	w.control = stream
	peers := first.GetPeers().GetPeers()
	if err := checkPeers(peers, g.o.World); err != nil {
		return nil, fmt.Errorf("remote: the coordinator at %s sent a bad peer table: %w", g.o.Master, err)
	}
	return peers, nil
}

// joinError says why joining failed.
func (w *worker) joinError(ctx context.Context, g *Group, err error) error {
	switch {
	case errors.Is(err, errPeerKey):
		return fmt.Errorf("remote: coordinator at %s runs with another token: %w", g.o.Master, err)
	case status.Code(err) == codes.Unauthenticated:
		return fmt.Errorf("remote: coordinator at %s refused the token: %w", g.o.Master, err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("remote: no peer table from the coordinator at %s within %v: %w", g.o.Master, g.o.JoinTimeout, err)
	}
	return fmt.Errorf("remote: join the coordinator at %s: %w", g.o.Master, err)
}

// checkPeers checks that peers has one peer per rank, in order.
func checkPeers(peers []*wirepb.Peer, world int) error {
	if len(peers) != world {
		return fmt.Errorf("%d peers for %d ranks", len(peers), world)
	}
	for r, p := range peers {
		if int(p.Rank) != r || p.Address == "" {
			return fmt.Errorf("entry %d is rank %d at %q", r, p.Rank, p.Address)
		}
	}
	return nil
}

// readControl takes the coordinator's commands until its goodbye; a
// control stream that ends otherwise means the coordinator is gone.
func (w *worker) readControl(g *Group) {
	for {
		c, err := w.control.Recv()
		if err != nil {
			g.lost(0, fmt.Errorf("its control stream broke: %w", err))
			return
		}
		switch body := c.Body.(type) {
		case *wirepb.Command_Payload:
			g.mu.Lock()
			w.commands = append(w.commands, body.Payload)
			g.notify()
			g.mu.Unlock()
		case *wirepb.Command_Bye:
			w.goodbye(g)
			return
		default:
			g.fail(fmt.Errorf("remote: the coordinator sent an unexpected %T command", body))
			return
		}
	}
}

// goodbye is the coordinator's normal end of the run: the worker closes its
// streams, then Next returns io.EOF. Its open Inbox channels close: a Run
// still in progress (the coordinator gave up on it: an error, an
// interrupt) fails at once rather than waiting for messages that will
// not come.
func (w *worker) goodbye(g *Group) {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	err := g.closeStreams()
	g.inbox.shutdown()
	g.mu.Lock()
	w.bye = true
	w.closeErr = err
	g.notify()
	g.mu.Unlock()
}

// leave ends the worker's part before the coordinator closed the group.
func (w *worker) leave(g *Group) error {
	w.cancel(ErrClosed)
	return g.closeStreams()
}

// Next returns the coordinator's next Broadcast. It returns io.EOF once the
// coordinator closed the group normally, and an error when the group
// failed (the coordinator or another rank went away) or ctx is done.
// Workers only.
func (g *Group) Next(ctx context.Context) (kind string, payload []byte, err error) {
	w := g.worker
	if w == nil {
		return "", nil, fmt.Errorf("remote: Next: rank %d is the coordinator", g.o.Rank)
	}
	var p *wirepb.Payload
	err = g.await(ctx, func() (bool, error) {
		switch {
		case g.err != nil:
			return false, g.err
		case len(w.commands) > 0:
			p = w.commands[0]
			w.commands[0] = nil
			w.commands = w.commands[1:]
			return true, nil
		case w.bye:
			return false, io.EOF
		case g.closed:
			return false, ErrClosed
		}
		return false, nil
	})
	if err != nil {
		return "", nil, err
	}
	return p.Kind, p.Data, nil
}

// Reply sends payload to the coordinator, for its next Gather. Workers
// only.
func (g *Group) Reply(payload []byte) error {
	return g.report(&wirepb.Reply{Rank: int32(g.o.Rank), Data: payload})
}

// ReplyError tells the coordinator that this worker failed, why being
// err's text: its next Gather returns an error naming this rank. Workers
// only.
func (g *Group) ReplyError(err error) error {
	if err == nil {
		return errors.New("remote: ReplyError with a nil error")
	}
	return g.report(&wirepb.Reply{Rank: int32(g.o.Rank), Error: err.Error()})
}

func (g *Group) report(r *wirepb.Reply) error {
	if g.worker == nil {
		return fmt.Errorf("remote: reply: rank %d is the coordinator", g.o.Rank)
	}
	if err := g.usable(); err != nil {
		return err
	}
	if _, err := wirepb.NewWireClient(g.conns[0]).Report(g.life, r); err != nil {
		return fmt.Errorf("remote: reply to the coordinator at %s: %w", g.o.Master, err)
	}
	return nil
}
