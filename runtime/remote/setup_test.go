package remote

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/peer"
)

// The checks of the setup, with both sides in this process.

func TestEmptyTokenRefused(t *testing.T) {
	ctx := context.Background()
	_, err := Coordinate(ctx, Options{World: 2, Master: "127.0.0.1:0"})
	require.EqualError(t, err, "remote: empty token")
	_, err = Join(ctx, Options{Rank: 1, World: 2, Master: "127.0.0.1:1"})
	require.EqualError(t, err, "remote: empty token")
}

func TestWrongRole(t *testing.T) {
	ctx := context.Background()
	_, err := Coordinate(ctx, Options{Rank: 1, World: 2, Master: "127.0.0.1:0", Token: "t"})
	require.ErrorContains(t, err, "Coordinate is for rank 0")
	_, err = Join(ctx, Options{Rank: 0, World: 2, Master: "127.0.0.1:1", Token: "t"})
	require.ErrorContains(t, err, "Join is for workers")
}

// A worker whose coordinator never comes gives up after the join timeout.
func TestNoCoordinator(t *testing.T) {
	master := freeAddr(t)
	start := time.Now()
	_, err := Join(context.Background(), Options{Rank: 1, World: 2, Master: master, Token: "t", JoinTimeout: 300 * time.Millisecond})
	require.ErrorContains(t, err, "remote: no peer table from the coordinator at "+master+" within 300ms")
	require.Less(t, time.Since(start), 3*time.Second)
}

// The coordinator refuses a worker of another world, and a rank that
// joined already; a world of two then works and closes normally.
func TestJoinChecks(t *testing.T) {
	master, token := freeAddr(t), "t"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		g   *Group
		err error
	}
	coord := make(chan result, 1)
	go func() {
		g, err := Coordinate(ctx, Options{World: 2, Master: master, Token: token, JoinTimeout: 5 * time.Second})
		coord <- result{g, err}
	}()

	_, err := Join(ctx, Options{Rank: 1, World: 3, Master: master, Token: token})
	require.ErrorContains(t, err, "rank 1 says the world has 3 ranks, the coordinator 2")

	w, err := Join(ctx, Options{Rank: 1, World: 2, Master: master, Token: token})
	require.NoError(t, err)
	c := <-coord
	require.NoError(t, c.err)
	g := c.g

	_, err = Join(ctx, Options{Rank: 1, World: 2, Master: master, Token: token})
	require.ErrorContains(t, err, "rank 1 already joined")
	require.NoError(t, g.Err(), "a refused join does not fail the group")

	require.NoError(t, g.Broadcast("hello", []byte("world")))
	kind, payload, err := w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello", kind)
	require.Equal(t, "world", string(payload))
	require.NoError(t, w.ReplyError(errors.New("out of memory")))
	_, err = g.Gather(ctx)
	require.EqualError(t, err, "remote: rank 1 failed: out of memory")
	require.NoError(t, w.Reply([]byte("ok")))
	replies, err := g.Gather(ctx)
	require.NoError(t, err)
	require.Equal(t, [][]byte{nil, []byte("ok")}, replies)

	require.NoError(t, g.Close())
	_, _, err = w.Next(ctx)
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, w.Close())
	require.NoError(t, w.Err())
	require.NoError(t, g.Err())
	require.ErrorIs(t, g.Broadcast("late", nil), ErrClosed)
	require.ErrorIs(t, w.Link().Send(0, testMessage(1, 0, 0, 0, step{})), ErrClosed)
}

// A group of one has nothing to wait for.
func TestWorldOfOne(t *testing.T) {
	g, err := Coordinate(context.Background(), Options{World: 1, Master: freeAddr(t), Token: "t"})
	require.NoError(t, err)
	replies, err := g.Gather(context.Background())
	require.NoError(t, err)
	require.Equal(t, [][]byte{nil}, replies)
	require.Error(t, g.Link().Send(0, testMessage(0, 0, 0, 0, step{})), "no sending to oneself")
	require.NoError(t, g.Close())
}

// A worker may start before the coordinator listens: it keeps trying.
func TestWorkerFirst(t *testing.T) {
	master, token := freeAddr(t), "t"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		g   *Group
		err error
	}
	worker := make(chan result, 1)
	go func() {
		g, err := Join(ctx, Options{Rank: 1, World: 2, Master: master, Token: token, JoinTimeout: 5 * time.Second})
		worker <- result{g, err}
	}()
	time.Sleep(300 * time.Millisecond)
	g, err := Coordinate(ctx, Options{World: 2, Master: master, Token: token, JoinTimeout: 5 * time.Second})
	require.NoError(t, err)
	w := <-worker
	require.NoError(t, w.err)

	require.NoError(t, w.g.Link().Send(0, testMessage(1, 0, 0, 0, step{})))
	m := receive(t, g.Link().Inbox(0), 1)[0]
	require.NoError(t, sameMessage(m, testMessage(1, 0, 0, 0, step{})))
	require.NoError(t, g.Close())
	require.NoError(t, w.g.Close())
}

func TestAdvertised(t *testing.T) {
	from := func(ip string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
	}
	for _, tc := range []struct {
		name, addr, from, want, err string
	}{
		{"loopback, same host", "127.0.0.1:5000", "127.0.0.1", "127.0.0.1:5000", ""},
		{"every interface", "0.0.0.0:5000", "10.1.2.3", "10.1.2.3:5000", ""},
		{"every interface, IPv6", "[::]:5000", "fd00::7", "[fd00::7]:5000", ""},
		{"no host", ":5000", "10.1.2.3", "10.1.2.3:5000", ""},
		{"an address", "10.9.9.9:5000", "10.1.2.3", "10.9.9.9:5000", ""},
		{"loopback, other host", "127.0.0.1:5000", "10.1.2.3", "", "only its own host reaches"},
		{"malformed", "5000", "10.1.2.3", "", "peer address \"5000\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := advertised(from(tc.from), tc.addr)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
