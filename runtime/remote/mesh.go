package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// rankKey is the metadata key that names the sender of a Deliver stream.
const rankKey = "flowkit-rank"

// outStream is this rank's Deliver stream to rank to.
type outStream struct {
	to     int
	mu     sync.Mutex // one message at a time, in order
	s      grpc.ClientStreamingClient[wirepb.Frame, wirepb.Empty]
	cancel context.CancelCauseFunc
	closed bool
}

// send sends m's frames (encodeFrames), in order after those of the
// messages sent before, and none of another message's between them.
func (o *outStream) send(m *runtime.Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.s == nil {
		return ErrClosed
	}
	err := encodeFrames(m, o.s.Send)
	if err == nil {
		return nil
	}
	o.closed = true
	if errors.Is(err, io.EOF) {
		// The stream ended; its status says why.
		if _, serr := o.s.CloseAndRecv(); serr != nil {
			err = serr
		}
	}
	o.cancel(err)
	return err
}

// close ends the stream and waits for the receiver to confirm that it got
// every frame. It does nothing the second time.
func (o *outStream) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.s == nil {
		o.closed = true
		return nil
	}
	o.closed = true
	_, err := o.s.CloseAndRecv()
	o.cancel(ErrClosed)
	if err != nil {
		return fmt.Errorf("remote: close the stream to rank %d: %w", o.to, err)
	}
	return nil
}

// closeStreams closes every Deliver stream of this rank, in parallel.
func (g *Group) closeStreams() error {
	errs := make([]error, len(g.out))
	var wg sync.WaitGroup
	for r, o := range g.out {
		if o != nil {
			wg.Go(func() { errs[r] = o.close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// connect opens this rank's Deliver stream to every other rank, whose
// addresses peers gives (rank order), and waits until every other rank's
// stream to this one is open too: then a rank that dies breaks a stream of
// every other. It gives up after the join timeout.
func (g *Group) connect(ctx context.Context, peers []*wirepb.Peer) error {
	ctx, cancel := context.WithTimeoutCause(ctx, g.o.JoinTimeout,
		fmt.Errorf("remote: rank %d: the mesh was not up within %v", g.o.Rank, g.o.JoinTimeout))
	defer cancel()
	for r, p := range peers {
		if r == g.o.Rank || g.conns[r] != nil {
			continue
		}
		conn, err := g.dial(p.Address)
		if err != nil {
			return fmt.Errorf("remote: rank %d: %w", r, err)
		}
		g.conns[r] = conn
	}
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for r, p := range peers {
		if r != g.o.Rank {
			wg.Go(func() { errs[r] = g.open(ctx, r, p.Address) })
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	err := g.await(ctx, func() (bool, error) {
		if g.err != nil {
			return false, g.err
		}
		if g.closing {
			return false, ErrClosed
		}
		return len(g.missingStreams()) == 0, nil
	})
	if err != nil && ctx.Err() != nil {
		g.mu.Lock()
		missing := g.missingStreams()
		g.mu.Unlock()
		return fmt.Errorf("%w: no stream from ranks %s", err, joinInts(missing))
	}
	return err
}

// missingStreams lists the ranks whose Deliver stream to this one is not
// open yet. Call with mu held.
func (g *Group) missingStreams() []int {
	var missing []int
	for r, ok := range g.in {
		if !ok && r != g.o.Rank {
			missing = append(missing, r)
		}
	}
	return missing
}

// open opens the Deliver stream to rank r at addr and waits until r
// accepted it.
func (g *Group) open(ctx context.Context, r int, addr string) error {
	o := g.out[r]
	md := metadata.Pairs(rankKey, strconv.Itoa(g.o.Rank))
	sctx, cancel := context.WithCancelCause(metadata.NewOutgoingContext(g.life, md))
	// The stream outlives ctx, which bounds only the opening.
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	s, err := wirepb.NewWireClient(g.conns[r]).Deliver(sctx, grpc.WaitForReady(true))
	if err == nil {
		_, err = s.Header()
	}
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel(err)
		return fmt.Errorf("remote: open the stream to rank %d at %s: %w", r, addr, err)
	}
	o.mu.Lock()
	o.s, o.cancel = s, cancel
	o.mu.Unlock()
	return nil
}

// accept registers the Deliver stream whose context is ctx and returns the
// sender's rank.
func (g *Group) accept(ctx context.Context) (int, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(rankKey)
	if len(vals) != 1 {
		return 0, status.Errorf(codes.InvalidArgument, "remote: stream without its sender's rank (%s metadata)", rankKey)
	}
	r, err := strconv.Atoi(vals[0])
	if err != nil || r < 0 || r >= g.o.World || r == g.o.Rank {
		return 0, status.Errorf(codes.InvalidArgument, "remote: stream from rank %q: not another rank of 0..%d", vals[0], g.o.World-1)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return 0, status.Error(codes.Unavailable, "remote: group closing")
	}
	if g.in[r] {
		return 0, status.Errorf(codes.AlreadyExists, "remote: rank %d already has a stream to rank %d", r, g.o.Rank)
	}
	g.in[r] = true
	g.notify()
	return r, nil
}

// receive puts the frames of rank from's Deliver stream in the inbox until
// the stream ends, a message sent in several frames once its last has
// come. It fails the group if the stream breaks or brings a malformed
// frame.
func (g *Group) receive(from int, s grpc.ClientStreamingServer[wirepb.Frame, wirepb.Empty]) error {
	var a assembly
	for {
		f, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if err := a.pending(); err != nil {
				g.fail(err)
				return status.Error(codes.InvalidArgument, err.Error())
			}
			return s.SendAndClose(&wirepb.Empty{})
		}
		if err != nil {
			g.lost(from, fmt.Errorf("its stream to rank %d broke: %w", g.o.Rank, err))
			return err
		}
		m, err := a.add(from, f)
		if err != nil {
			g.fail(err)
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if m != nil {
			g.inbox.put(m)
		}
	}
}

// joinInts writes rs as "1, 2, 3".
func joinInts(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}
