package remote

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime"
)

// receive reads n messages from c, failing the test after a second.
func receive(t *testing.T, c <-chan *runtime.Message, n int) []*runtime.Message {
	t.Helper()
	var got []*runtime.Message
	for range n {
		select {
		case m, ok := <-c:
			require.True(t, ok, "channel closed after %d messages, want %d", len(got), n)
			got = append(got, m)
		case <-time.After(time.Second):
			t.Fatalf("got %d messages, want %d", len(got), n)
		}
	}
	return got
}

// requireClosed checks that c is closed, with nothing left in it.
func requireClosed(t *testing.T, c <-chan *runtime.Message) {
	t.Helper()
	select {
	case m, ok := <-c:
		require.False(t, ok, "got %+v, want a closed channel", m)
	case <-time.After(time.Second):
		t.Fatal("channel not closed")
	}
}

func TestInboxBuffersBeforeOpen(t *testing.T) {
	in := newInbox()
	for i := range 3 {
		in.put(&runtime.Message{Run: 5, Firing: i})
	}
	c := in.open(5)
	require.Equal(t, c, in.open(5), "a second open returns the same channel")
	in.put(&runtime.Message{Run: 5, Firing: 3})
	for i, m := range receive(t, c, 4) {
		require.Equal(t, i, m.Firing)
	}
	in.shutdown()
	requireClosed(t, c)
	requireClosed(t, in.open(6))
}

func TestInboxForget(t *testing.T) {
	in := newInbox()
	in.put(&runtime.Message{Run: 1})
	c := in.open(1)
	in.put(&runtime.Message{Run: 2})
	in.forget(1)
	in.forget(2)
	requireClosed(t, c)
	in.put(&runtime.Message{Run: 2})
	require.Zero(t, in.queued(2), "a forgotten run's messages are dropped")
	requireClosed(t, in.open(2))
	in.put(&runtime.Message{Run: 3})
	require.Equal(t, 1, in.queued(3), "other runs are kept")
	require.Len(t, in.runs, 1)
}

// Putting never blocks, whether or not anyone reads.
func TestInboxPutNeverBlocks(t *testing.T) {
	in := newInbox()
	_ = in.open(0)
	done := make(chan struct{})
	go func() {
		for i := range 10000 {
			in.put(&runtime.Message{Run: i % 2})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("put blocked")
	}
}

func TestRunSet(t *testing.T) {
	s := runSet{above: map[int]struct{}{}}
	for _, r := range []int{2, 0, 5, 1} {
		s.add(r)
	}
	require.Equal(t, 3, s.below)
	require.Len(t, s.above, 1, "runs added in order are not kept one by one")
	for r := range 7 {
		require.Equal(t, r <= 2 || r == 5, s.has(r), "has(%d)", r)
	}
}
