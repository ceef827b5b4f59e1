package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/flowkit/flowkit/runtime"
	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// ErrClosed is returned by the methods of a Group, and its Link's Send,
// once the group was closed.
var ErrClosed = errors.New("remote: group closed")

// closeWait bounds how long Close waits for the other ranks to close their
// streams to this one in a normal shutdown.
const closeWait = 10 * time.Second

// abortWait bounds how long a failed setup waits for the other ranks to
// receive its answers before it closes their connections.
const abortWait = time.Second

// keepaliveTime and keepaliveTimeout are how often a server pings an idle
// connection and how long it waits for the answer, so that a host that
// vanished without closing its connections (power, network) is noticed.
const (
	keepaliveTime    = 15 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// window is the HTTP/2 flow-control window of every stream and connection,
// fixed: 16 of the transport's 1 MiB frames may be in flight. gRPC's
// default starts at 64 KiB and grows by estimating the bandwidth-delay
// product; between two processes on loopback, one way, 16 MiB took
// 34–40 ms with it and 28–34 ms with this window, 1 MiB 2.7–3.6 ms and
// 2.3–3.2 ms ('flowrun calibrate link', six runs of each side by side,
// 2026-12-02, with ioBuffer below; a window fixed at 64 KiB: 90 ms).
// Flow control bounds no memory here anyway: a rank reads its streams as
// fast as frames come and queues them unbounded (inbox.go), so that ranks
// sending to each other cannot deadlock.
const window = 16 << 20

// ioBuffer is the size of every connection's read and write buffers,
// twice gRPC's default, for fewer system calls per frame: with the window
// above, 16 MiB one way took 27–31 ms against 31–34 ms with the default.
const ioBuffer = 64 << 10

// A Group is this process's part in a multi-process run: its server, its
// connections to the other ranks and the streams over them.
type Group struct {
	o      Options
	creds  credentials.TransportCredentials // the run's TLS, keyed by its token (tlsCreds)
	server *grpc.Server
	life   context.Context // the streams' context, cancelled when the group ends
	end    context.CancelFunc
	inbox  *inbox
	conns  []*grpc.ClientConn // per rank: the connection to it, nil for this rank
	out    []*outStream       // per rank: the Deliver stream to it, nil for this rank
	clocks []clockOffset      // per rank: see Clock

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever the state below changes
	err     error         // the first failure
	closing bool          // shutting down normally: broken streams are no failure
	closed  bool          // Close was called
	in      []bool        // per rank: its Deliver stream to this rank was accepted

	coord    *coordinator            // rank 0 only
	worker   *worker                 // other ranks only
	stopJoin context.CancelCauseFunc // while a worker joins: ends the join (keyRefused)
}

func newGroup(o Options) (*Group, error) {
	life, end := context.WithCancel(context.Background())
	g := &Group{
		o:       o,
		life:    life,
		end:     end,
		inbox:   newInbox(),
		conns:   make([]*grpc.ClientConn, o.World),
		out:     make([]*outStream, o.World),
		clocks:  make([]clockOffset, o.World),
		changed: make(chan struct{}),
		in:      make([]bool, o.World),
	}
	for r := range g.out {
		if r != o.Rank {
			g.out[r] = &outStream{to: r}
		}
	}
	var err error
	if g.creds, err = tlsCreds(o.Token, g.keyRefused); err != nil {
		end()
		return nil, err
	}
	return g, nil
}

// keyRefused stops the join in progress, if any: a peer's TLS key was not
// the run's (tlsCreds).
func (g *Group) keyRefused(err error) {
	g.mu.Lock()
	stop := g.stopJoin
	g.mu.Unlock()
	if stop != nil {
		stop(err)
	}
}

// Link returns the group's link: Send, Inbox and Forget over the mesh of
// Deliver streams.
func (g *Group) Link() runtime.Link { return link{g} }

// Rank is this process's rank.
func (g *Group) Rank() int { return g.o.Rank }

// World is the number of ranks.
func (g *Group) World() int { return g.o.World }

// Err is why the group failed, nil while it works (and after a normal
// Close).
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// notify wakes everything waiting in await. Call with mu held.
func (g *Group) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// await calls cond, with mu held, until it says done or returns an error,
// each time the group's state changed; it gives up when ctx is done.
func (g *Group) await(ctx context.Context, cond func() (bool, error)) error {
	for {
		g.mu.Lock()
		done, err := cond()
		changed := g.changed
		g.mu.Unlock()
		if done || err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// fail records the group's first failure, unless it is shutting down
// normally, and closes every Inbox channel.
func (g *Group) fail(err error) {
	g.mu.Lock()
	if g.err != nil || g.closing {
		g.mu.Unlock()
		return
	}
	g.err = err
	g.notify()
	g.mu.Unlock()
	g.inbox.shutdown()
}

// lost fails the group because rank r went away.
func (g *Group) lost(r int, why error) {
	who := fmt.Sprintf("rank %d", r)
	if r == 0 {
		who = "rank 0 (the coordinator)"
	}
	g.fail(fmt.Errorf("remote: lost %s: %w", who, why))
}

// serve starts the group's gRPC server at addr and returns the address it
// listens at.
func (g *Group) serve(addr string) (string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("remote: listen at %s: %w", addr, err)
	}
	gd := newGuard(g.o.Token)
	g.server = grpc.NewServer(
		grpc.Creds(g.creds),
		grpc.ForceServerCodecV2(newServerCodec()),
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.ChainUnaryInterceptor(gd.unary),
		grpc.ChainStreamInterceptor(gd.stream),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.ReadBufferSize(ioBuffer), grpc.WriteBufferSize(ioBuffer),
	)
	wirepb.RegisterWireServer(g.server, &service{g: g})
	bound := lis.Addr().String()
	go func() {
		if err := g.server.Serve(lis); err != nil {
			g.fail(fmt.Errorf("remote: serving at %s: %w", bound, err))
		}
	}()
	return bound, nil
}

// dial returns a connection to the server at addr. It connects lazily and
// retries quickly, since the other side may not listen yet.
func (g *Group) dial(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(g.creds),
		grpc.WithPerRPCCredentials(tokenCreds(g.o.Token)),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		grpc.WithReadBufferSize(ioBuffer), grpc.WithWriteBufferSize(ioBuffer),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("remote: connect to %s: %w", addr, err)
	}
	return conn, nil
}

// Close ends the group. On the coordinator it is the normal end of the
// run: every worker's Next then returns io.EOF, and no rank reports a
// failure. A worker that closes before the coordinator does leaves the
// run, which the coordinator reports as the loss of that rank. Close
// returns an error when a peer did not confirm that it received all that
// this rank sent it; none when the group had already failed (Err says
// why). Open Inbox channels are closed.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	failed := g.err != nil
	alreadyClosing := g.closing // a worker that received the coordinator's goodbye
	g.closing = true
	g.notify()
	g.mu.Unlock()

	var err error
	switch {
	case failed:
		g.shutdown(0)
	case g.coord != nil:
		err = g.coord.close(g)
		g.shutdown(closeWait)
	case alreadyClosing:
		// Let the goodbye finish closing the streams.
		_ = g.await(context.Background(), func() (bool, error) { return g.worker.bye, nil })
		g.mu.Lock()
		err = g.worker.closeErr
		g.mu.Unlock()
		g.shutdown(closeWait)
	default:
		err = g.worker.leave(g)
		g.shutdown(0)
	}
	if failed {
		return nil
	}
	return err
}

// shutdown stops the server, waiting up to wait for the calls in progress
// to end, then cancels the streams and closes the connections.
func (g *Group) shutdown(wait time.Duration) {
	if g.server != nil {
		stopped := make(chan struct{})
		go func() {
			g.server.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(wait):
			g.server.Stop()
			<-stopped
		}
	}
	g.end()
	for _, c := range g.conns {
		if c != nil {
			c.Close()
		}
	}
	g.inbox.shutdown()
}

// abort ends a group whose setup failed.
func (g *Group) abort(wait time.Duration) {
	g.mu.Lock()
	g.closing = true
	g.closed = true
	g.notify()
	g.mu.Unlock()
	g.shutdown(wait)
}
