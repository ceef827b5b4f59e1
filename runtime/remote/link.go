package remote

import (
	"errors"
	"fmt"

	"github.com/flowkit/flowkit/runtime"
)

// link is a Group's runtime.Link.
type link struct{ g *Group }

var _ runtime.Link = link{}

// Rank implements runtime.Link.
func (l link) Rank() int { return l.g.o.Rank }

// Size implements runtime.Link.
func (l link) Size() int { return l.g.o.World }

// Send implements runtime.Link. The receiver sees this rank as m's sender,
// whatever m.From says. A failed send fails the link: the peer is gone.
func (l link) Send(to int, m *runtime.Message) error {
	g := l.g
	switch {
	case m == nil:
		return fmt.Errorf("remote: send to rank %d: nil message", to)
	case to < 0 || to >= g.o.World || to == g.o.Rank:
		return fmt.Errorf("remote: send to rank %d: not another rank of 0..%d (this is rank %d)", to, g.o.World-1, g.o.Rank)
	case m.Run < 0:
		return fmt.Errorf("remote: send to rank %d: negative run %d", to, m.Run)
	}
	if err := g.usable(); err != nil {
		return err
	}
	if err := g.out[to].send(m); err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		g.lost(to, fmt.Errorf("its stream from rank %d broke: %w", g.o.Rank, err))
		return fmt.Errorf("remote: send to rank %d: %w", to, err)
	}
	return nil
}

// Inbox implements runtime.Link. The channel is also closed when the run is
// forgotten and when the group is closed; one for a run already forgotten
// is closed from the start.
func (l link) Inbox(run int) <-chan *runtime.Message { return l.g.inbox.open(run) }

// Forget implements runtime.Link.
func (l link) Forget(run int) { l.g.inbox.forget(run) }

// Err implements runtime.Link.
func (l link) Err() error { return l.g.Err() }
