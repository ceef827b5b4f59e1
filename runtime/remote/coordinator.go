package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// coordinator is rank 0's part of a group: the workers' control streams
// and replies. Its fields are guarded by the group's mu.
type coordinator struct {
	members []*member         // per rank: nil until it joined, and for rank 0
	replies [][]*wirepb.Reply // per rank: the replies not yet gathered
}

// member is a worker that joined: its request and its control stream.
type member struct {
	rank     int
	hostname string
	address  string // where it serves the other ranks

	mu     sync.Mutex // one command at a time
	stream grpc.ServerStreamingServer[wirepb.Command]
	ended  bool // the Join call returned: nothing can be sent any more

	once   sync.Once
	done   chan struct{} // closed to end the Join call, with result
	result error
}

// send sends c on m's control stream.
func (m *member) send(c *wirepb.Command) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return errors.New("its control stream ended")
	}
	return m.stream.Send(c)
}

// finish ends m's Join call with result (nil: success).
func (m *member) finish(result error) {
	m.once.Do(func() {
		m.result = result
		close(m.done)
	})
}

// end records that m's Join call returns.
func (m *member) end() {
	m.mu.Lock()
	m.ended = true
	m.mu.Unlock()
}

// Coordinate is rank 0's part of the setup: it listens at o.Master, waits
// until every worker has joined, sends them the peer table, and returns
// once the mesh of Deliver streams is up. ctx bounds the setup only.
func Coordinate(ctx context.Context, o Options) (*Group, error) {
	o, err := o.check()
	if err != nil {
		return nil, err
	}
	if o.Rank != 0 {
		return nil, fmt.Errorf("remote: Coordinate is for rank 0, not rank %d (workers Join)", o.Rank)
	}
	g, err := newGroup(o)
	if err != nil {
		return nil, err
	}
	g.coord = &coordinator{members: make([]*member, o.World), replies: make([][]*wirepb.Reply, o.World)}
	if _, err := g.serve(o.Master); err != nil {
		g.end()
		return nil, err
	}
	if err := g.coord.setup(ctx, g); err != nil {
		g.coord.dismiss(g, status.Error(codes.Aborted, err.Error()))
		g.abort(abortWait)
		return nil, err
	}
	return g, nil
}

// setup waits for the workers, sends them the peer table and opens the mesh.
func (c *coordinator) setup(ctx context.Context, g *Group) error {
	if err := c.awaitJoins(ctx, g); err != nil {
		return err
	}
	peers := make([]*wirepb.Peer, g.o.World)
	peers[0] = &wirepb.Peer{Rank: 0, Address: g.o.Master, Hostname: g.o.Hostname}
	for r, m := range c.members[1:] {
		peers[r+1] = &wirepb.Peer{Rank: int32(m.rank), Address: m.address, Hostname: m.hostname}
	}
	table := &wirepb.Command{Body: &wirepb.Command_Peers{Peers: &wirepb.PeerTable{Peers: peers}}}
	for _, m := range c.members[1:] {
		if err := m.send(table); err != nil {
			return fmt.Errorf("remote: send the peer table to rank %d: %w", m.rank, err)
		}
	}
	if err := g.connect(ctx, peers); err != nil {
		return err
	}
	return g.measureClocks(ctx, peers)
}

// awaitJoins waits until every worker joined, or the join timeout passed.
func (c *coordinator) awaitJoins(ctx context.Context, g *Group) error {
	ctx, cancel := context.WithTimeout(ctx, g.o.JoinTimeout)
	defer cancel()
	err := g.await(ctx, func() (bool, error) {
		if g.err != nil {
			return false, g.err
		}
		return len(c.missing()) == 0, nil
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	g.mu.Lock()
	missing := c.missing()
	g.mu.Unlock()
	if len(missing) == 1 {
		return fmt.Errorf("remote: rank %d never joined the coordinator at %s within %v", missing[0], g.o.Master, g.o.JoinTimeout)
	}
	return fmt.Errorf("remote: ranks %s never joined the coordinator at %s within %v", joinInts(missing), g.o.Master, g.o.JoinTimeout)
}

// missing lists the workers that have not joined. Call with mu held.
func (c *coordinator) missing() []int {
	var missing []int
	for r, m := range c.members[1:] {
		if m == nil {
			missing = append(missing, r+1)
		}
	}
	return missing
}

// admit checks a worker's join request and records it.
func (c *coordinator) admit(g *Group, req *wirepb.JoinRequest, stream grpc.ServerStreamingServer[wirepb.Command]) (*member, error) {
	r := int(req.Rank)
	if int(req.World) != g.o.World {
		return nil, status.Errorf(codes.InvalidArgument, "remote: rank %d says the world has %d ranks, the coordinator %d", r, req.World, g.o.World)
	}
	if r < 1 || r >= g.o.World {
		return nil, status.Errorf(codes.InvalidArgument, "remote: rank %d is not a worker's rank (1..%d)", r, g.o.World-1)
	}
	addr, err := advertised(stream.Context(), req.Address)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "remote: rank %d: %v", r, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing || g.err != nil {
		return nil, status.Error(codes.Unavailable, "remote: the coordinator is shutting down")
	}
	if old := c.members[r]; old != nil {
		return nil, status.Errorf(codes.AlreadyExists, "remote: rank %d already joined (serving at %s)", r, old.address)
	}
	m := &member{rank: r, hostname: req.Hostname, address: addr, stream: stream, done: make(chan struct{})}
	c.members[r] = m
	g.notify()
	return m, nil
}

// advertised is where the other ranks reach a worker whose join came from
// the peer in ctx and that says it serves at addr. A worker that serves every
// interface (":0") is reached at the address it joined from; one that
// serves only its loopback cannot be reached from another host.
func advertised(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("peer address %q: %w", addr, err)
	}
	var from net.IP
	if p, ok := peer.FromContext(ctx); ok {
		if tcp, ok := p.Addr.(*net.TCPAddr); ok {
			from = tcp.IP
		}
	}
	ip := net.ParseIP(host)
	switch {
	case from == nil:
		return addr, nil
	case host == "" || ip != nil && ip.IsUnspecified():
		return net.JoinHostPort(from.String(), port), nil
	case ip != nil && ip.IsLoopback() && !from.IsLoopback():
		return "", fmt.Errorf("it serves its peers at %s, which only its own host reaches, but joined from %s; give it a Listen address the other hosts reach", addr, from)
	}
	return addr, nil
}

// queueReply records a worker's reply for Gather.
func (c *coordinator) queueReply(g *Group, rep *wirepb.Reply) error {
	r := int(rep.Rank)
	if r < 1 || r >= g.o.World {
		return status.Errorf(codes.InvalidArgument, "remote: reply from rank %d: not a worker's rank (1..%d)", r, g.o.World-1)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return status.Error(codes.Unavailable, "remote: the coordinator closed the group")
	}
	c.replies[r] = append(c.replies[r], rep)
	g.notify()
	return nil
}

// dismiss ends the Join call of every worker that joined with err.
func (c *coordinator) dismiss(g *Group, err error) {
	g.mu.Lock()
	members := append([]*member(nil), c.members...)
	g.mu.Unlock()
	for _, m := range members {
		if m != nil {
			m.finish(err)
		}
	}
}

// close is the normal end of the run: the coordinator closes its streams,
// then says goodbye to every worker, which closes its own streams in turn.
func (c *coordinator) close(g *Group) error {
	err := g.closeStreams()
	bye := &wirepb.Command{Body: &wirepb.Command_Bye{Bye: &wirepb.Bye{}}}
	for _, m := range c.members[1:] {
		if serr := m.send(bye); serr != nil {
			err = errors.Join(err, fmt.Errorf("remote: say goodbye to rank %d: %w", m.rank, serr))
		}
		m.finish(nil)
	}
	return err
}

// Broadcast sends kind and payload to every worker, in rank order; each
// receives it from Next. Coordinator only.
func (g *Group) Broadcast(kind string, payload []byte) error {
	if g.coord == nil {
		return fmt.Errorf("remote: Broadcast: rank %d is not the coordinator", g.o.Rank)
	}
	if err := g.usable(); err != nil {
		return err
	}
	cmd := &wirepb.Command{Body: &wirepb.Command_Payload{Payload: &wirepb.Payload{Kind: kind, Data: payload}}}
	for _, m := range g.coord.members[1:] {
		if err := m.send(cmd); err != nil {
			return fmt.Errorf("remote: broadcast %q to rank %d: %w", kind, m.rank, err)
		}
	}
	return nil
}

// Gather returns the next reply of every worker, indexed by rank (index 0,
// the coordinator, is nil). It returns an error instead when a worker's
// next reply is an error (ReplyError; that reply alone is consumed), when
// the group fails (a worker went away: the error names it), or when ctx is
// done. Coordinator only.
func (g *Group) Gather(ctx context.Context) ([][]byte, error) {
	c := g.coord
	if c == nil {
		return nil, fmt.Errorf("remote: Gather: rank %d is not the coordinator", g.o.Rank)
	}
	var out [][]byte
	err := g.await(ctx, func() (bool, error) {
		for r, q := range c.replies {
			if len(q) > 0 && q[0].Error != "" {
				c.replies[r] = q[1:]
				return false, fmt.Errorf("remote: rank %d failed: %s", r, q[0].Error)
			}
		}
		if g.err != nil {
			return false, g.err
		}
		if g.closed {
			return false, ErrClosed
		}
		for _, q := range c.replies[1:] {
			if len(q) == 0 {
				return false, nil
			}
		}
		out = make([][]byte, g.o.World)
		for r, q := range c.replies[1:] {
			out[r+1] = q[0].Data
			c.replies[r+1] = q[1:]
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// usable is nil while the group can be used, else why not.
func (g *Group) usable() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	if g.closed || g.closing {
		return ErrClosed
	}
	return nil
}
