package conns

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
)

// RedisOptions builds the go-redis options of cfg: the address, database
// and credentials of BULKACTION_REDIS_URL; REDIS_USERNAME and
// REDIS_PASSWORD over the URL's; TLS for a rediss:// URL or when a
// REDIS_TLS_* file is set, verifying the server against REDIS_TLS_CA_FILE
// (or the system roots) under the URL's host name, with the client
// certificate of REDIS_TLS_CERT_FILE/KEY_FILE. Files are read now, so a
// missing or bad file is an error naming its variable. Errors never hold a
// password. Callers set pool sizes and timeouts.
func RedisOptions(cfg *config.Config) (*redis.Options, error) {
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("%s_REDIS_URL=%s: %w", config.Prefix, config.RedactURL(cfg.RedisURL), ScrubError(cfg, err))
	}
	if cfg.RedisUsername != "" {
		opt.Username = cfg.RedisUsername
	}
	if cfg.RedisPassword != "" {
		opt.Password = cfg.RedisPassword
	}
	if cfg.RedisTLSCAFile == "" && cfg.RedisTLSCertFile == "" && cfg.RedisTLSKeyFile == "" {
		return opt, nil
	}
	if opt.Network == "unix" {
		return nil, fmt.Errorf("%s_REDIS_TLS_* files are set but %s_REDIS_URL is a unix socket", config.Prefix, config.Prefix)
	}
	if opt.TLSConfig == nil { // redis:// with TLS files: TLS all the same
		host, _, err := net.SplitHostPort(opt.Addr)
		if err != nil {
			return nil, fmt.Errorf("%s_REDIS_URL=%s: %w", config.Prefix, config.RedactURL(cfg.RedisURL), err)
		}
		opt.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	pool, certs, err := loadTLS("REDIS", cfg.RedisTLSCAFile, cfg.RedisTLSCertFile, cfg.RedisTLSKeyFile)
	if err != nil {
		return nil, err
	}
	opt.TLSConfig.RootCAs = pool
	opt.TLSConfig.Certificates = certs
	return opt, nil
}

// RedisClient returns the Redis client of cfg: a cluster client of
// REDIS_CLUSTER_ADDRS' seed nodes when it is set (with the credentials and
// TLS settings of [RedisOptions]; MOVED and ASK redirections and TRYAGAIN
// during a slot migration are followed and retried by the client), else a
// client of REDIS_URL's server. minPool is the fewest connections per node
// (the URL's pool_size when larger; 0 = the client's default); dialTimeout
// 0 is the client's default.
func RedisClient(cfg *config.Config, minPool int, dialTimeout time.Duration) (redis.UniversalClient, error) {
	opt, err := RedisOptions(cfg)
	if err != nil {
		return nil, err
	}
	if opt.PoolSize < minPool {
		opt.PoolSize = minPool
	}
	if dialTimeout > 0 {
		opt.DialTimeout = dialTimeout
	}
	addrs := cfg.ClusterAddrs()
	if len(addrs) == 0 {
		return redis.NewClient(opt), nil
	}
	if opt.DB != 0 {
		return nil, fmt.Errorf("%s_REDIS_URL=%s: database %d: a Redis Cluster has database 0 only", config.Prefix, config.RedactURL(cfg.RedisURL), opt.DB)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       addrs,
		Username:    opt.Username,
		Password:    opt.Password,
		TLSConfig:   opt.TLSConfig,
		PoolSize:    opt.PoolSize,
		DialTimeout: opt.DialTimeout,
		// A slot migration or a failover answers TRYAGAIN or CLUSTERDOWN
		// for a moment: retried with backoff rather than surfaced.
		MaxRedirects:    16,
		MaxRetries:      8,
		MinRetryBackoff: 8 * time.Millisecond,
		MaxRetryBackoff: 512 * time.Millisecond,
		// The client learns a failover from a MOVED reply or from reading
		// the slots again; a primary that died answers nothing, so without
		// a short interval every call went to the dead primary for a
		// minute after its replica took over (TestPrimaryFailsOverMidRun).
		// One CLUSTER SLOTS a second per process is cheap.
		ClusterStateReloadInterval: clusterStateReload,
	}), nil
}

// clusterStateReload is how often a Redis Cluster client reads the slots'
// owners again while it is in use.
const clusterStateReload = time.Second

// NatsOptions builds the nats.go options of cfg for a connection named
// "bulkaction <name>": at most one of NATS_USER/NATS_PASSWORD
// (nats.UserInfo), NATS_TOKEN (nats.Token), NATS_NKEY_FILE
// (nats.NkeyOptionFromSeed) or NATS_CREDS_FILE (nats.UserCredentials), and
// TLS when a NATS_TLS_* file is set (nats.RootCAs, nats.ClientCert; the
// files are read again at each reconnect, so rotated certificates are
// picked up) or the URL is tls://. Files are checked now, so a missing or
// bad file is an error naming its variable. Callers add reconnect and
// timeout options.
func NatsOptions(cfg *config.Config, name string) ([]nats.Option, error) {
	if m := cfg.NatsAuthMethods(); len(m) > 1 {
		return nil, fmt.Errorf("NATS authentication: %s are all set; use one method at most", strings.Join(m, ", "))
	}
	opts := []nats.Option{nats.Name("bulkaction " + name)}
	switch {
	case cfg.NatsUser != "" || cfg.NatsPassword != "":
		opts = append(opts, nats.UserInfo(cfg.NatsUser, cfg.NatsPassword))
	case cfg.NatsToken != "":
		opts = append(opts, nats.Token(cfg.NatsToken))
	case cfg.NatsNKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NatsNKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s_NATS_NKEY_FILE=%s: %w", config.Prefix, cfg.NatsNKeyFile, ScrubError(cfg, err))
		}
		opts = append(opts, o)
	case cfg.NatsCredsFile != "":
		o := nats.UserCredentials(cfg.NatsCredsFile)
		if err := checkCreds(o); err != nil {
			return nil, fmt.Errorf("%s_NATS_CREDS_FILE=%s: %w", config.Prefix, cfg.NatsCredsFile, ScrubError(cfg, err))
		}
		opts = append(opts, o)
	}
	if cfg.NatsTLSCAFile != "" || cfg.NatsTLSCertFile != "" || cfg.NatsTLSKeyFile != "" {
		// Load once here for errors that name the variables; nats.go loads
		// the files itself at every (re)connect. Either option turns TLS on.
		if _, _, err := loadTLS("NATS", cfg.NatsTLSCAFile, cfg.NatsTLSCertFile, cfg.NatsTLSKeyFile); err != nil {
			return nil, err
		}
		if cfg.NatsTLSCAFile != "" {
			opts = append(opts, nats.RootCAs(cfg.NatsTLSCAFile))
		}
		if cfg.NatsTLSCertFile != "" {
			opts = append(opts, nats.ClientCert(cfg.NatsTLSCertFile, cfg.NatsTLSKeyFile))
		}
	}
	return opts, nil
}

// checkCreds runs the user-JWT and signature callbacks of a
// nats.UserCredentials option once, so a missing or malformed .creds file
// fails at start rather than at the first connect.
func checkCreds(o nats.Option) error {
	var opts nats.Options
	if err := o(&opts); err != nil {
		return err
	}
	if _, err := opts.UserJWT(); err != nil {
		return err
	}
	if _, err := opts.SignatureCB([]byte("bulkaction")); err != nil {
		return err
	}
	return nil
}

// loadTLS reads the CA file (nil pool = system roots) and the client key
// pair of one server's TLS settings; server is REDIS or NATS. Errors name the
// variable and the path, never the file's content.
func loadTLS(server, caFile, certFile, keyFile string) (*x509.CertPool, []tls.Certificate, error) {
	v := func(s string) string { return config.Prefix + "_" + server + "_TLS_" + s }
	var pool *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", v("CA_FILE"), err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("%s=%s: no PEM certificate in the file", v("CA_FILE"), caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, nil, fmt.Errorf("%s and %s must be set together", v("CERT_FILE"), v("KEY_FILE"))
	}
	var certs []tls.Certificate
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s=%s, %s=%s: %w", v("CERT_FILE"), certFile, v("KEY_FILE"), keyFile, err)
		}
		certs = []tls.Certificate{c}
	}
	return pool, certs, nil
}

// ScrubError returns err with every secret of cfg (passwords and tokens,
// set as settings or inside the URLs) hidden from its text, for errors of
// client libraries that may echo a URL. errors.Is and errors.As still see
// the original error; print the returned one, not what it wraps. A nil err
// gives nil, an err without secrets comes back as it is.
func ScrubError(cfg *config.Config, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := cfg.Redact(msg); clean != msg {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
