package remote

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// authKey is the metadata key of the token; gRPC metadata keys are lower case.
const authKey = "authorization"

// bearer is the value of the authorization metadata for token.
func bearer(token string) string { return "Bearer " + token }

// tokenCreds puts the token on every call of a client connection.
type tokenCreds string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{authKey: bearer(string(t))}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// connections are plain TCP (see the package doc).
func (tokenCreds) RequireTransportSecurity() bool { return false }

// guard checks the token of every call a server receives.
type guard struct {
	want [sha256.Size]byte // digest of the expected authorization value
}

func newGuard(token string) *guard {
	return &guard{want: sha256.Sum256([]byte(bearer(token)))}
}

// check refuses a call without the right token. It compares digests, so
// that neither the token's length nor its content shows in the timing.
func (g *guard) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(authKey)
	if len(vals) != 1 {
		return status.Error(codes.Unauthenticated, "remote: no token")
	}
	got := sha256.Sum256([]byte(vals[0]))
	if subtle.ConstantTimeCompare(got[:], g.want[:]) != 1 {
		return status.Error(codes.Unauthenticated, "remote: wrong token")
	}
	return nil
}

func (g *guard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (g *guard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
