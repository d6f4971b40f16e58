package cli_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and localhost
// (its own CA) and its key to dir and returns the server's TLS config and
// the certificate file, to be given as the CA file.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, caFile
}

// TestDialUsesCredentialsAndTLS dials a TLS Redis with an ACL user and a
// TLS NATS with a token: Dial connects with the credential and TLS
// settings, and refused credentials are ErrRejected errors that hold no
// secret.
func TestDialUsesCredentialsAndTLS(t *testing.T) {
	t.Parallel()
	tc, caFile := selfSigned(t)
	const redisPW, natsToken = "redis-pw-5b1e93", "nats-token-c07a42"
	mr := miniredis.NewMiniRedis()
	mr.RequireUserAuth("alice", redisPW)
	if err := mr.StartTLS(tc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Close)
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		TLS: true, TLSConfig: tc, TLSTimeout: 5, Authorization: natsToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	good := config.Config{
		RedisURL: "rediss://" + mr.Addr() + "/0", RedisUsername: "alice", RedisPassword: redisPW, RedisTLSCAFile: caFile,
		RedisPrefix: "t:", NatsURL: "tls://127.0.0.1:" + strconv.Itoa(ns.Addr().(*net.TCPAddr).Port),
		NatsToken: natsToken, NatsTLSCAFile: caFile, SubjectPrefix: "bulkaction",
	}
	ctx := context.Background()
	c, err := cli.Dial(ctx, &good, cli.NeedRedis|cli.NeedNATS)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if !c.NC.TLSRequired() {
		t.Error("NATS connection without TLS")
	}
	c.Close()

	for _, bad := range []struct {
		need cli.Need
		set  func(*config.Config)
	}{
		{cli.NeedRedis, func(c *config.Config) { c.RedisPassword = "wrong-redis-pw-77d1" }},
		{cli.NeedNATS, func(c *config.Config) { c.NatsToken = "wrong-nats-token-19fe" }},
	} {
		cfg := good
		bad.set(&cfg)
		c, err := cli.Dial(ctx, &cfg, bad.need)
		if err == nil {
			c.Close()
			t.Fatalf("Dial %v with wrong credentials succeeded", bad.need)
		}
		t.Logf("Dial %v: %v", bad.need, err)
		if !errors.Is(err, cli.ErrRejected) {
			t.Errorf("Dial %v: %v, want ErrRejected", bad.need, err)
		}
		for _, s := range []string{redisPW, natsToken, cfg.RedisPassword, cfg.NatsToken} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("Dial %v: error holds the secret %q: %v", bad.need, s, err)
			}
		}
	}

	cfg := good
	cfg.RedisTLSCAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := cli.Dial(ctx, &cfg, cli.NeedRedis); err == nil || !strings.Contains(err.Error(), "BULKACTION_REDIS_TLS_CA_FILE") {
		t.Errorf("Dial with a missing CA file: %v, want an error naming BULKACTION_REDIS_TLS_CA_FILE", err)
	}
}

// TestDialErrorsHideSecrets dials a closed port, and parses an unparsable
// URL, with a password in the URL: the errors name the server by its
// redacted URL and never hold the password.
func TestDialErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	const pw = "url-pw-0d6c2a"
	for _, c := range []struct {
		need cli.Need
		cfg  config.Config
		want string
	}{
		{cli.NeedRedis, config.Config{RedisURL: "redis://alice:" + pw + "@" + closed + "/0"}, "redis://alice:xxxxx@" + closed},
		{cli.NeedRedis, config.Config{RedisURL: "redis://alice:" + pw + "@127.0.0.1:port/0"}, "redis://alice:xxxxx@127.0.0.1:port"},
		{cli.NeedNATS, config.Config{NatsURL: "nats://alice:" + pw + "@" + closed}, "nats://alice:xxxxx@" + closed},
		{cli.NeedNATS, config.Config{NatsURL: "nats://" + pw + "@" + closed}, "nats://xxxxx@" + closed},
		{cli.NeedNATS, config.Config{NatsURL: "nats://alice:" + pw + "@127.0.0.1:port"}, "nats://alice:xxxxx@127.0.0.1:port"},
	} {
		conn, err := cli.Dial(context.Background(), &c.cfg, c.need)
		if err == nil {
			conn.Close()
			t.Fatalf("Dial %v succeeded", c.need)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Dial %v: error holds the password: %v", c.need, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Dial %v: %v, want it to name %s", c.need, err, c.want)
		}
	}
}
