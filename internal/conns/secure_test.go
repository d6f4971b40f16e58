package conns_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
)

// secret returns a value no text would hold by chance.
func secret(t testing.TB, what string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b)
}

// mustNotLeak fails the test when text holds one of secrets.
func mustNotLeak(t testing.TB, where, text string, secrets ...string) {
	t.Helper()
	t.Logf("%s: %s", where, text)
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds the secret %q: %s", where, s, text)
		}
	}
}

func pingRedis(t testing.TB, cfg *config.Config) error {
	t.Helper()
	opt, err := conns.RedisOptions(cfg)
	if err != nil {
		return err
	}
	opt.DialTimeout, opt.MaxRetries = 3*time.Second, -1
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return conns.ScrubError(cfg, c.Ping(ctx).Err())
}

// TestRedisOptionsTLSAndACL connects to a real redis-server that accepts
// only TLS with client certificates, and has a default-user password
// (requirepass) and an ACL user: the right credentials, CA and client
// certificate connect, whether given as settings or in the URL; a wrong
// password, a missing client certificate or an unrelated CA fail, and the
// error holds no password.
func TestRedisOptionsTLSAndACL(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	defPW, alicePW, wrong := secret(t, "defpw"), secret(t, "alicepw"), secret(t, "wrong")
	addr := startTLSRedis(t, p, "--requirepass", defPW, "--user", "alice", "on", ">"+alicePW, "~*", "&*", "+@all")
	tlsFiles := func(c config.Config) *config.Config {
		c.RedisTLSCAFile, c.RedisTLSCertFile, c.RedisTLSKeyFile = p.CAFile, p.ClientCert, p.ClientKey
		return &c
	}
	for _, c := range []struct {
		name string
		cfg  *config.Config
		ok   bool
	}{
		{"acl user as settings", tlsFiles(config.Config{RedisURL: "rediss://" + addr + "/0", RedisUsername: "alice", RedisPassword: alicePW}), true},
		{"acl user in the URL", tlsFiles(config.Config{RedisURL: "rediss://alice:" + alicePW + "@" + addr + "/0"}), true},
		{"requirepass in the URL", tlsFiles(config.Config{RedisURL: "rediss://:" + defPW + "@" + addr + "/0"}), true},
		{"settings override the URL", tlsFiles(config.Config{RedisURL: "rediss://bob:" + wrong + "@" + addr + "/0", RedisUsername: "alice", RedisPassword: alicePW}), true},
		{"TLS files turn TLS on for redis://", tlsFiles(config.Config{RedisURL: "redis://localhost:" + strings.Split(addr, ":")[1] + "/0", RedisPassword: defPW}), true},
		{"wrong password", tlsFiles(config.Config{RedisURL: "rediss://" + addr + "/0", RedisUsername: "alice", RedisPassword: wrong}), false},
		{"wrong password in the URL", tlsFiles(config.Config{RedisURL: "rediss://alice:" + wrong + "@" + addr + "/0"}), false},
		{"no password", tlsFiles(config.Config{RedisURL: "rediss://" + addr + "/0"}), false},
		{"no client certificate", &config.Config{RedisURL: "rediss://" + addr + "/0", RedisPassword: defPW, RedisTLSCAFile: p.CAFile}, false},
		{"unrelated CA", &config.Config{RedisURL: "rediss://" + addr + "/0", RedisPassword: defPW,
			RedisTLSCAFile: p.OtherCAFile, RedisTLSCertFile: p.ClientCert, RedisTLSKeyFile: p.ClientKey}, false},
		{"no TLS", &config.Config{RedisURL: "redis://:" + defPW + "@" + addr + "/0"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := pingRedis(t, c.cfg)
			if c.ok && err != nil {
				t.Fatalf("ping: %v", err)
			}
			if !c.ok {
				if err == nil {
					t.Fatal("ping succeeded")
				}
				mustNotLeak(t, "error", err.Error(), defPW, alicePW, wrong)
			}
		})
	}
}

// TestRedisOptionsBadSettings checks the errors of settings that cannot
// work: they name the variable and hold no password.
func TestRedisOptionsBadSettings(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	pw := secret(t, "pw")
	junk := writeFile(t, t.TempDir(), "junk.pem", []byte("not a certificate"))
	for _, c := range []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"unparsable URL", config.Config{RedisURL: "redis://u:" + pw + "@127.0.0.1:port/0"}, "BULKACTION_REDIS_URL"},
		{"bad scheme", config.Config{RedisURL: "http://u:" + pw + "@127.0.0.1:6379/0"}, "BULKACTION_REDIS_URL"},
		{"missing CA file", config.Config{RedisURL: "rediss://127.0.0.1:6379/0", RedisTLSCAFile: filepath.Join(t.TempDir(), "none.pem")}, "BULKACTION_REDIS_TLS_CA_FILE"},
		{"CA file without a certificate", config.Config{RedisURL: "rediss://127.0.0.1:6379/0", RedisTLSCAFile: junk}, "BULKACTION_REDIS_TLS_CA_FILE"},
		{"certificate without key", config.Config{RedisURL: "rediss://127.0.0.1:6379/0", RedisTLSCertFile: p.ClientCert}, "BULKACTION_REDIS_TLS_KEY_FILE"},
		{"key of another certificate", config.Config{RedisURL: "rediss://127.0.0.1:6379/0", RedisTLSCertFile: p.ClientCert, RedisTLSKeyFile: p.ServerKey}, "BULKACTION_REDIS_TLS_CERT_FILE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := conns.RedisOptions(&c.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error does not name %s: %v", c.want, err)
			}
			mustNotLeak(t, "error", err.Error(), pw)
		})
	}
}

// natsAuth is one NATS auth method: how the server is set up, and the
// settings that pass and fail it.
type natsAuth struct {
	name   string
	server func(*server.Options)
	right  func(*config.Config)
	wrong  func(*config.Config)
	// secrets must not appear in errors.
	secrets []string
}

func natsAuthMethods(t *testing.T) []natsAuth {
	t.Helper()
	dir := t.TempDir()
	pw, wrongPW := secret(t, "natspw"), secret(t, "wrongpw")
	token, wrongToken := secret(t, "token"), secret(t, "wrongtoken")

	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	otherKP, _ := nkeys.CreateUser()
	otherSeed, _ := otherKP.Seed()
	seedFile := writeFile(t, dir, "user.nk", useed)
	otherSeedFile := writeFile(t, dir, "other.nk", otherSeed)

	// Decentralized auth: an operator, an account it signs, a user the
	// account signs; the server trusts the operator and knows the account.
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	if _, err := oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(signer nkeys.KeyPair, name string) string {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		ujwt, err := jwt.NewUserClaims(pub).Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		b, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, dir, name, b)
	}
	credsFile := creds(akp, "user.creds")
	strangerKP, _ := nkeys.CreateAccount() // an account the server does not know
	strangerCreds := creds(strangerKP, "stranger.creds")

	return []natsAuth{
		{
			name:    "user and password",
			server:  func(o *server.Options) { o.Users = []*server.User{{Username: "alice", Password: pw}} },
			right:   func(c *config.Config) { c.NatsUser, c.NatsPassword = "alice", pw },
			wrong:   func(c *config.Config) { c.NatsUser, c.NatsPassword = "alice", wrongPW },
			secrets: []string{pw, wrongPW},
		},
		{
			name:    "token",
			server:  func(o *server.Options) { o.Authorization = token },
			right:   func(c *config.Config) { c.NatsToken = token },
			wrong:   func(c *config.Config) { c.NatsToken = wrongToken },
			secrets: []string{token, wrongToken},
		},
		{
			name:    "nkey",
			server:  func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: upub}} },
			right:   func(c *config.Config) { c.NatsNKeyFile = seedFile },
			wrong:   func(c *config.Config) { c.NatsNKeyFile = otherSeedFile },
			secrets: []string{string(useed), string(otherSeed)},
		},
		{
			name: "creds",
			server: func(o *server.Options) {
				res := &server.MemAccResolver{}
				if err := res.Store(apub, ajwt); err != nil {
					t.Fatal(err)
				}
				o.TrustedOperators = []*jwt.OperatorClaims{oc}
				o.AccountResolver = res
				o.JetStream = false // the account has no JetStream limits; auth is what is tested
			},
			right:   func(c *config.Config) { c.NatsCredsFile = credsFile },
			wrong:   func(c *config.Config) { c.NatsCredsFile = strangerCreds },
			secrets: []string{string(useed)},
		},
	}
}

// TestNatsOptionsAuthMethods connects to an embedded nats-server with TLS
// (client certificates required) for each auth method: the right
// credentials connect and round-trip a request; wrong ones, and the right
// ones without the client certificate, fail with an error that holds no
// secret.
func TestNatsOptionsAuthMethods(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	for _, m := range natsAuthMethods(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			url := startTLSNats(t, p, m.server)
			base := config.Config{NatsURL: url, NatsTLSCAFile: p.CAFile, NatsTLSCertFile: p.ClientCert, NatsTLSKeyFile: p.ClientKey}

			right := base
			m.right(&right)
			nc, err := connectNats(&right)
			if err != nil {
				t.Fatalf("right credentials: %v", err)
			}
			if !nc.TLSRequired() {
				t.Error("connection is not TLS")
			}
			if err := nc.FlushTimeout(5 * time.Second); err != nil {
				t.Errorf("flush: %v", err)
			}
			nc.Close()

			wrong := base
			m.wrong(&wrong)
			if nc, err := connectNats(&wrong); err == nil {
				nc.Close()
				t.Error("wrong credentials connected")
			} else {
				mustNotLeak(t, "wrong credentials' error", err.Error(), m.secrets...)
			}

			noCert := right
			noCert.NatsTLSCertFile, noCert.NatsTLSKeyFile = "", ""
			if nc, err := connectNats(&noCert); err == nil {
				nc.Close()
				t.Error("connected without a client certificate")
			} else {
				mustNotLeak(t, "no-certificate error", err.Error(), m.secrets...)
			}

			otherCA := right
			otherCA.NatsTLSCAFile = p.OtherCAFile
			if nc, err := connectNats(&otherCA); err == nil {
				nc.Close()
				t.Error("connected trusting an unrelated CA")
			}
		})
	}
}

func connectNats(cfg *config.Config) (*nats.Conn, error) {
	opts, err := conns.NatsOptions(cfg, "test")
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.NatsURL, append(opts, nats.Timeout(5*time.Second))...)
	return nc, conns.ScrubError(cfg, err)
}

// TestNatsOptionsBadSettings checks the errors of settings that cannot
// work: they name the variables and hold no secret.
func TestNatsOptionsBadSettings(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dir := t.TempDir()
	pw, token := secret(t, "pw"), secret(t, "token")
	junk := writeFile(t, dir, "junk", []byte("neither a seed nor a JWT"))
	for _, c := range []struct {
		name string
		cfg  config.Config
		want []string
	}{
		{"two methods", config.Config{NatsUser: "u", NatsPassword: pw, NatsToken: token},
			[]string{"BULKACTION_NATS_USER", "BULKACTION_NATS_TOKEN"}},
		{"URL credentials and a token", config.Config{NatsURL: "nats://u:" + pw + "@127.0.0.1:4222", NatsToken: token},
			[]string{"BULKACTION_NATS_URL", "BULKACTION_NATS_TOKEN"}},
		{"missing nkey file", config.Config{NatsNKeyFile: filepath.Join(dir, "none.nk")}, []string{"BULKACTION_NATS_NKEY_FILE"}},
		{"bad nkey file", config.Config{NatsNKeyFile: junk}, []string{"BULKACTION_NATS_NKEY_FILE"}},
		{"missing creds file", config.Config{NatsCredsFile: filepath.Join(dir, "none.creds")}, []string{"BULKACTION_NATS_CREDS_FILE"}},
		{"bad creds file", config.Config{NatsCredsFile: junk}, []string{"BULKACTION_NATS_CREDS_FILE"}},
		{"bad CA file", config.Config{NatsTLSCAFile: junk}, []string{"BULKACTION_NATS_TLS_CA_FILE"}},
		{"key without certificate", config.Config{NatsTLSKeyFile: p.ClientKey}, []string{"BULKACTION_NATS_TLS_CERT_FILE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := conns.NatsOptions(&c.cfg, "test")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %s: %v", w, err)
				}
			}
			mustNotLeak(t, "error", err.Error(), pw, token)
		})
	}
}

// TestConnectWithTLSAndCredentials runs conns.Connect against both servers
// with TLS and credentials on: Redis with an ACL user, NATS with a user and
// password (JetStream on); the streams are provisioned.
func TestConnectWithTLSAndCredentials(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	redisPW, natsPW := secret(t, "redispw"), secret(t, "natspw")
	raddr := startTLSRedis(t, p, "--user", "bulk", "on", ">"+redisPW, "~*", "&*", "+@all", "--user", "default", "off")
	nurl := startTLSNats(t, p, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bulk", Password: natsPW}}
	})
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisUsername, cfg.RedisPassword = "rediss://localhost:"+strings.Split(raddr, ":")[1]+"/0", "bulk", redisPW
	cfg.RedisTLSCAFile, cfg.RedisTLSCertFile, cfg.RedisTLSKeyFile = p.CAFile, p.ClientCert, p.ClientKey
	cfg.NatsURL, cfg.NatsUser, cfg.NatsPassword = nurl, "bulk", natsPW
	cfg.NatsTLSCAFile, cfg.NatsTLSCertFile, cfg.NatsTLSKeyFile = p.CAFile, p.ClientCert, p.ClientKey
	cfg.StreamStorage = "memory"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := conns.Connect(ctx, cfg, "test", nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer c.Close()
	if _, err := c.JS.Stream(ctx, c.Names.StreamSubmit()); err != nil {
		t.Errorf("stream %s: %v", c.Names.StreamSubmit(), err)
	}
	if err := c.Queue.Ping(ctx); err != nil {
		t.Errorf("queue ping: %v", err)
	}

	// The same with a wrong Redis password and then a wrong NATS password:
	// Connect fails, naming neither password.
	bad := *cfg
	bad.RedisPassword = secret(t, "wrong")
	if c, err := conns.Connect(ctx, &bad, "test", nil); err == nil {
		c.Close()
		t.Error("wrong Redis password connected")
	} else {
		mustNotLeak(t, "Connect error", err.Error(), bad.RedisPassword, redisPW, natsPW)
	}
	bad = *cfg
	bad.NatsPassword = secret(t, "wrong")
	if c, err := conns.Connect(ctx, &bad, "test", nil); err == nil {
		c.Close()
		t.Error("wrong NATS password connected")
	} else {
		mustNotLeak(t, "Connect error", err.Error(), bad.NatsPassword, redisPW, natsPW)
	}
}

// TestCredsFileParsing checks the .creds path without a server: a creds
// file with a JWT and a seed is accepted, one with only a JWT is an error
// naming the variable.
func TestCredsFileParsing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	akp, _ := nkeys.CreateAccount()
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	ujwt, err := jwt.NewUserClaims(pub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	full, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	good := writeFile(t, dir, "good.creds", full)
	if _, err := conns.NatsOptions(&config.Config{NatsCredsFile: good}, "test"); err != nil {
		t.Fatalf("good creds: %v", err)
	}
	jwtOnly := strings.SplitAfter(string(full), "------END NATS USER JWT------")[0] + "\n"
	bad := writeFile(t, dir, "jwt-only.creds", []byte(jwtOnly))
	_, err = conns.NatsOptions(&config.Config{NatsCredsFile: bad}, "test")
	if err == nil || !strings.Contains(err.Error(), "BULKACTION_NATS_CREDS_FILE") {
		t.Fatalf("creds without a seed: %v, want an error naming BULKACTION_NATS_CREDS_FILE", err)
	}
	mustNotLeak(t, "error", err.Error(), string(seed))
}
