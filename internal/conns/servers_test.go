package conns_test

// Real servers with TLS for the tests of this package: a private CA with
// server and client certificates (crypto/x509, ECDSA) in t.TempDir(), a
// redis-server child with TLS only, and an embedded nats-server with TLS and
// one auth method.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bulkaction/bulkaction/internal/testkit"
)

// pki is a test CA with one server and one client certificate, as PEM files.
type pki struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCAFile is a CA that signed none of them.
	OtherCAFile string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{}
	caKey, caCert, caPEM := newCA(t, "bulkaction test CA")
	p.CAFile = writeFile(t, dir, "ca.pem", caPEM)
	_, _, otherPEM := newCA(t, "unrelated CA")
	p.OtherCAFile = writeFile(t, dir, "other-ca.pem", otherPEM)
	certPEM, keyPEM := newLeaf(t, caKey, caCert, "localhost", x509.ExtKeyUsageServerAuth)
	p.ServerCert = writeFile(t, dir, "server.pem", certPEM)
	p.ServerKey = writeFile(t, dir, "server-key.pem", keyPEM)
	certPEM, keyPEM = newLeaf(t, caKey, caCert, "bulkaction-client", x509.ExtKeyUsageClientAuth)
	p.ClientCert = writeFile(t, dir, "client.pem", certPEM)
	p.ClientKey = writeFile(t, dir, "client-key.pem", keyPEM)
	return p
}

var serial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(serial.Add(1)) }

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// newLeaf issues a certificate for localhost and 127.0.0.1.
func newLeaf(t testing.TB, caKey *ecdsa.PrivateKey, ca *x509.Certificate, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// needRedisServer skips the test when redis-server is not installed, and
// fails it instead under CI=true (as internal/testenv does: CI must not
// pass by skipping).
func needRedisServer(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found on PATH (CI=true): install it (Debian: `apt-get install -y redis-server`, or `make redis`)")
		}
		t.Skip("redis-server not found on PATH")
	}
}

// startTLSRedis starts a redis-server child that accepts TLS only on a free
// loopback port, verifying client certificates against p's CA, with the
// extra configuration args (e.g. "--requirepass", "pw"). It is killed when
// the test ends. It returns host:port.
func startTLSRedis(t testing.TB, p *pki, args ...string) string {
	t.Helper()
	needRedisServer(t)
	dir := t.TempDir()
	port := testkit.FreePort(t)
	all := append([]string{
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", p.ServerCert, "--tls-key-file", p.ServerKey, "--tls-ca-cert-file", p.CAFile,
		"--tls-auth-clients", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
	}, args...)
	cmd := exec.Command("redis-server", all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Ready when a TLS handshake with the client certificate completes.
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server exited; log:\n%s", log)
		default:
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr,
			&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}) //nolint:gosec // readiness probe only
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server on %s did not answer: %v; log:\n%s", addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startTLSNats starts an embedded nats-server with JetStream and TLS
// (client certificates verified against p's CA) on a free loopback port;
// auth sets its authentication. It is shut down when the test ends. It
// returns the server's tls:// URL (without credentials).
func startTLSNats(t testing.TB, p *pki, auth func(*server.Options)) string {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: p.ServerCert, KeyFile: p.ServerKey, CaFile: p.CAFile, Verify: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
		TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 5,
	}
	if auth != nil {
		auth(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return "tls://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Addr().(*net.TCPAddr).Port))
}
