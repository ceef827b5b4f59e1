package remote

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// coordinate starts the coordinator of a world of world ranks at master.
func coordinate(t *testing.T, world int, master, token string) *Group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := Coordinate(ctx, Options{Rank: 0, World: world, Master: master, Token: token, JoinTimeout: 10 * time.Second})
	require.NoError(t, err)
	return g
}

// do has every rank do command kind, the coordinator too, and returns
// their replies (the coordinator's at index 0).
func do(t *testing.T, g *Group, kind string, s step) [][]byte {
	t.Helper()
	payload, err := json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, g.Broadcast(kind, payload))
	local, err := act(g, kind, s)
	require.NoError(t, err, "rank 0: %s", kind)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	replies, err := g.Gather(ctx)
	require.NoError(t, err, kind)
	replies[0] = local
	return replies
}

// requireQueued checks that every rank has want messages of run queued.
func requireQueued(t *testing.T, g *Group, run, want int) {
	t.Helper()
	for r, got := range do(t, g, "queued", step{Runs: []int{run}, N: want}) {
		require.Equal(t, strconv.Itoa(want), string(got), "rank %d: messages of run %d queued", r, run)
	}
}

// Three processes send one another messages of every kind, with payloads
// of every size (one over gRPC's default limit of 4 MB), several runs at
// once, and check that each sender's order is kept; messages of runs not
// yet opened wait in the inbox, forgotten runs are dropped.
func TestMeshExchange(t *testing.T) {
	const world, n = 3, 40
	const big = 1<<20 + 1<<16 // float32 values: 4.25 MiB
	master, token := freeAddr(t), "s3cret"
	c := startWorkers(t, world, master, token, map[int][]string{2: {hostnameEnv + "=elsewhere"}})
	g := coordinate(t, world, master, token)

	t.Run("clock", func(t *testing.T) {
		off, unc := g.Clock(1)
		require.Equal(t, [2]time.Duration{0, 0}, [2]time.Duration{off, unc}, "rank 1 is on this host")
		// Rank 2 says it is on another host: its offset is measured, and
		// since it shares this clock, it is 0 within the uncertainty.
		off, unc = g.Clock(2)
		require.Positive(t, unc)
		require.Less(t, unc, time.Second)
		require.LessOrEqual(t, off.Abs(), unc+time.Millisecond, "offset %v, uncertainty %v", off, unc)
	})

	t.Run("exchange", func(t *testing.T) {
		// Runs 0 and 1 are sent at once; run 1 waits in the inbox until
		// run 0 has been read.
		do(t, g, "send", step{Runs: []int{0, 1}, N: n, Big: big})
		do(t, g, "recv", step{Runs: []int{0}, N: n, Big: big})
		requireQueued(t, g, 1, (world-1)*n)
		do(t, g, "recv", step{Runs: []int{1}, N: n, Big: big})
		requireQueued(t, g, 1, 0)
	})

	t.Run("forget", func(t *testing.T) {
		// Run 2 is forgotten before its messages come, run 3 after; run 4,
		// sent after them, shows that they all arrived.
		do(t, g, "forget", step{Runs: []int{2}})
		do(t, g, "send", step{Runs: []int{2, 3}, N: n})
		requireQueued(t, g, 3, (world-1)*n)
		do(t, g, "forget", step{Runs: []int{3}})
		do(t, g, "send", step{Runs: []int{2, 3, 4}, N: n})
		do(t, g, "recv", step{Runs: []int{4}, N: n})
		requireQueued(t, g, 2, 0)
		requireQueued(t, g, 3, 0)
		do(t, g, "closed", step{Runs: []int{2}})
		do(t, g, "closed", step{Runs: []int{3}})
	})

	require.NoError(t, g.Close())
	require.NoError(t, g.Err())
	for r := 1; r < world; r++ {
		require.Equal(t, 0, c.wait(t, r, 10*time.Second), "rank %d's exit code; its output:\n%s", r, c.stderr[r])
	}
}

// A worker that dies mid-run makes the coordinator's Gather and Link.Err
// name it within seconds, and closes the open inboxes, on the coordinator
// and on the other workers.
func TestWorkerKilled(t *testing.T) {
	const world = 3
	master, token := freeAddr(t), "s3cret"
	c := startWorkers(t, world, master, token, nil)
	g := coordinate(t, world, master, token)
	do(t, g, "ping", step{})
	inbox := g.Link().Inbox(7)

	require.NoError(t, c.workers[2].Process.Kill())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := g.Gather(ctx)
	require.ErrorContains(t, err, "rank 2")
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorContains(t, g.Link().Err(), "lost rank 2")
	select {
	case _, ok := <-inbox:
		require.False(t, ok, "got a message, want the inbox closed")
	case <-time.After(5 * time.Second):
		t.Fatal("the inbox is still open")
	}
	require.Error(t, g.Broadcast("ping", nil))
	require.Error(t, g.Link().Send(1, testMessage(0, 1, 7, 0, step{})))

	// Rank 1 noticed too: its Next failed.
	require.Eventually(t, func() bool { return strings.Contains(c.stderr[1].String(), "FAILED: remote: lost rank 2") },
		5*time.Second, 20*time.Millisecond, "rank 1's output:\n%s", c.stderr[1])
	require.NoError(t, g.Close(), "Close of a failed group")
}

// A worker with the wrong token is refused at once, with a clear error;
// the coordinator then gives up waiting for it.
func TestWrongToken(t *testing.T) {
	master := freeAddr(t)
	c := startWorkers(t, 2, master, "wrong", nil)
	start := time.Now()
	_, err := Coordinate(context.Background(), Options{Rank: 0, World: 2, Master: master, Token: "right", JoinTimeout: 2 * time.Second})
	require.EqualError(t, err, "remote: rank 1 never joined the coordinator at "+master+" within 2s")
	require.Less(t, time.Since(start), 4*time.Second)
	require.Equal(t, exitJoin, c.wait(t, 1, 5*time.Second))
	require.Contains(t, c.stderr[1].String(), "JOIN: remote: coordinator at "+master+" runs with another token")
}
