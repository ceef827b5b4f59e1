package remote

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// service is a group's gRPC server: Deliver and Clock on every rank, Join
// and Report on the coordinator.
type service struct {
	wirepb.UnimplementedWireServer
	g *Group
}

var _ wirepb.WireServer = (*service)(nil)

// Join admits a worker and keeps its control stream open until the
// coordinator says goodbye, or gives up, or the worker goes away.
func (s *service) Join(req *wirepb.JoinRequest, stream grpc.ServerStreamingServer[wirepb.Command]) error {
	c := s.g.coord
	if c == nil {
		return status.Errorf(codes.FailedPrecondition, "remote: rank %d is not the coordinator", s.g.o.Rank)
	}
	m, err := c.admit(s.g, req, stream)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	select {
	case <-m.done:
		m.end()
		return m.result
	case <-ctx.Done():
		m.end()
		s.g.lost(int(req.Rank), fmt.Errorf("its control stream broke: %w", context.Cause(ctx)))
		return status.FromContextError(ctx.Err()).Err()
	}
}

// Deliver receives another rank's messages.
func (s *service) Deliver(stream grpc.ClientStreamingServer[wirepb.Frame, wirepb.Empty]) error {
	from, err := s.g.accept(stream.Context())
	if err != nil {
		return err
	}
	// The headers tell the sender that its stream was accepted.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		s.g.lost(from, fmt.Errorf("its stream to rank %d broke: %w", s.g.o.Rank, err))
		return err
	}
	return s.g.receive(from, stream)
}

// Report queues a worker's reply for Gather.
func (s *service) Report(_ context.Context, r *wirepb.Reply) (*wirepb.Empty, error) {
	c := s.g.coord
	if c == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "remote: rank %d is not the coordinator", s.g.o.Rank)
	}
	if err := c.queueReply(s.g, r); err != nil {
		return nil, err
	}
	return &wirepb.Empty{}, nil
}

// Clock reads this host's wall clock.
func (s *service) Clock(context.Context, *wirepb.Empty) (*wirepb.Time, error) {
	return &wirepb.Time{UnixNano: time.Now().UnixNano()}, nil
}
