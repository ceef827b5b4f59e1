package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A run's connections are TLS 1.3, server and client authenticated by one
// key that every rank derives from the run's token: a peer that completes
// the handshake holds the key, so it knows the token, which itself never
// crosses the network, and the traffic is encrypted. No certificate
// authority is involved: each side checks that the other's certificate
// carries the run's public key (pinning), nothing else.

// tlsKeyInfo separates the TLS key's derivation from any other use of the
// token.
const tlsKeyInfo = "flowkit remote: TLS key of a run"

// runKey derives the run's ed25519 key from its token (HKDF-SHA256).
func runKey(token string) (ed25519.PrivateKey, error) {
	seed, err := hkdf.Key(sha256.New, []byte(token), nil, tlsKeyInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("remote: deriving the TLS key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// errPeerKey is a handshake refused because the peer's key is not the
// run's: it was given another token.
var errPeerKey = errors.New("remote: the peer's TLS key is not this run's: every rank needs the same token")

// tlsCreds returns the transport credentials of a rank of the run with
// token, for its server and for its clients alike. refused is told of a
// client handshake that failed because the server's key is not the run's.
func tlsCreds(token string, refused func(error)) (credentials.TransportCredentials, error) {
	key, err := runKey(token)
	if err != nil {
		return nil, err
	}
	pub := key.Public().(ed25519.PublicKey)
	// A self-signed certificate with fixed fields: no one checks its
	// dates or names, only its key.
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "flowkit run"},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("remote: the run's TLS certificate: %w", err)
	}
	pinned := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errPeerKey
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("remote: the peer's TLS certificate: %w", err)
		}
		if k, ok := c.PublicKey.(ed25519.PublicKey); !ok || !bytes.Equal(k, pub) {
			return errPeerKey
		}
		return nil
	}
	return keyWatch{credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		// The server asks the client for its certificate; neither side
		// verifies a chain (there is none), both check the key.
		ClientAuth:            tls.RequireAnyClientCert,
		InsecureSkipVerify:    true, //nolint:gosec // the peer's key is pinned in VerifyPeerCertificate
		VerifyPeerCertificate: pinned,
	}), refused}, nil
}

// keyWatch reports client handshakes refused for the server's key: gRPC
// would retry them until the caller's deadline, though a server of another
// token never becomes right.
type keyWatch struct {
	credentials.TransportCredentials
	refused func(error)
}

// ClientHandshake implements credentials.TransportCredentials.
func (k keyWatch) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := k.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if errors.Is(err, errPeerKey) && k.refused != nil {
		k.refused(err)
	}
	return c, info, err
}

// Clone implements credentials.TransportCredentials.
func (k keyWatch) Clone() credentials.TransportCredentials {
	return keyWatch{k.TransportCredentials.Clone(), k.refused}
}

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
// token travels only over the run's TLS connections.
func (tokenCreds) RequireTransportSecurity() bool { return true }

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
