package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// clockPings is how many times the clock of another host is read; the
// reading with the shortest round trip is kept.
const clockPings = 8

// clockOffset is another rank's clock minus this process's.
type clockOffset struct {
	offset, uncertainty time.Duration
}

// Clock returns rank r's wall clock minus this process's (add it to a time
// of this process to get r's) and the uncertainty of that offset. It is
// exactly 0, 0 for a rank on the same host (same Options.Hostname), which
// reads the same clock, and for r outside 0..World-1. Otherwise it was
// estimated at setup from several readings of r's clock, keeping the one
// with the shortest round trip; the uncertainty is half that round trip.
func (g *Group) Clock(r int) (offset, uncertainty time.Duration) {
	if r < 0 || r >= len(g.clocks) {
		return 0, 0
	}
	c := g.clocks[r]
	return c.offset, c.uncertainty
}

// measureClocks estimates the clock offset of every rank on another host.
func (g *Group) measureClocks(ctx context.Context, peers []*wirepb.Peer) error {
	ctx, cancel := context.WithTimeout(ctx, g.o.JoinTimeout)
	defer cancel()
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for r, p := range peers {
		if r == g.o.Rank || p.Hostname == g.o.Hostname {
			continue
		}
		wg.Go(func() {
			c, err := readClock(ctx, wirepb.NewWireClient(g.conns[r]))
			if err != nil {
				errs[r] = fmt.Errorf("remote: read the clock of rank %d: %w", r, err)
			}
			g.clocks[r] = c
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readClock estimates the offset of the clock that c reads.
func readClock(ctx context.Context, c wirepb.WireClient) (clockOffset, error) {
	var best clockOffset
	rtt := time.Duration(-1)
	for range clockPings {
		t0 := time.Now()
		t, err := c.Clock(ctx, &wirepb.Empty{})
		if err != nil {
			return clockOffset{}, err
		}
		d := time.Since(t0)
		if rtt < 0 || d < rtt {
			rtt = d
			// The reading is taken halfway through the round trip, give or
			// take half of it.
			mid := t0.Add(d / 2)
			best = clockOffset{offset: time.Unix(0, t.UnixNano).Sub(mid), uncertainty: d / 2}
		}
	}
	return best, nil
}
