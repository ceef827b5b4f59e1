package remote

import (
	"context"
	"crypto/ed25519"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flowkit/flowkit/runtime/remote/wirepb"
)

// Every rank derives the same key from the same token, and another key
// from another token.
func TestRunKeyFromToken(t *testing.T) {
	a1, err := runKey("secret")
	require.NoError(t, err)
	a2, _ := runKey("secret")
	b, _ := runKey("secreT")
	require.True(t, a1.Equal(a2))
	require.False(t, a1.Public().(ed25519.PublicKey).Equal(b.Public()))
}

// A client that speaks plain gRPC, even with the right token in its
// metadata, gets no call through: the coordinator speaks TLS only.
func TestPlaintextRefused(t *testing.T) {
	master := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Coordinate(ctx, Options{World: 2, Master: master, Token: "right", JoinTimeout: 3 * time.Second})
		done <- err
	}()
	for { // until the coordinator listens
		c, err := net.Dial("tcp", master)
		if err == nil {
			c.Close()
			break
		}
		require.NoError(t, ctx.Err(), "the coordinator never listened")
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("passthrough:///"+master, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, authKey, bearer("right")), 2*time.Second)
	defer ccancel()
	stream, callErr := wirepb.NewWireClient(conn).Join(cctx, &wirepb.JoinRequest{Rank: 1, World: 2, Address: "127.0.0.1:1"})
	if callErr == nil {
		_, callErr = stream.Recv()
	}
	require.Error(t, callErr)
	require.Equal(t, codes.Unavailable, status.Code(callErr), "%v", callErr)
	require.ErrorContains(t, <-done, "rank 1 never joined")
}
