package config

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Redacted replaces a secret wherever bulkaction prints a setting.
const Redacted = "xxxxx"

// RedactURL returns raw with the password of its user info replaced by
// [Redacted] ("redis://alice:xxxxx@host:6379/0"). User info without a
// password ("nats://s3cr3t@host", a NATS token) is replaced as a whole. A
// comma-separated list of URLs (NATS_URL) is redacted entry by entry. It
// works on text, so an unparsable URL is redacted too; a URL without user
// info comes back unchanged.
func RedactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

// redactOne redacts the user info of one URL: everything between "://" (or
// the start) and the last "@", unless the authority is empty ("unix:///…").
func redactOne(u string) string {
	start := 0
	if i := strings.Index(u, "://"); i >= 0 {
		start = i + len("://")
	}
	rest := u[start:]
	if strings.HasPrefix(rest, "/") {
		return u
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	info := rest[:at]
	if user, _, ok := strings.Cut(info, ":"); ok {
		info = user + ":" + Redacted
	} else {
		info = Redacted
	}
	return u[:start] + info + rest[at:]
}

// urlSecrets returns the secrets in the user info of raw (a comma-separated
// list for NATS): passwords, and with tokenIfNoPassword the user info of an
// entry that has no password (a NATS token). Both the text as written and
// its unescaped form are returned.
func urlSecrets(raw string, tokenIfNoPassword bool) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
	}
	for _, p := range strings.Split(raw, ",") {
		start := 0
		if i := strings.Index(p, "://"); i >= 0 {
			start = i + len("://")
		}
		rest := p[start:]
		if strings.HasPrefix(rest, "/") {
			continue
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		info := rest[:at]
		if _, pass, ok := strings.Cut(info, ":"); ok {
			add(pass)
		} else if tokenIfNoPassword {
			add(info)
		}
	}
	return out
}

// Secrets returns every secret the configuration holds: the Redis and NATS
// passwords and the NATS token, whether set as settings or inside the URLs.
// [Config.Redact] hides them in any text.
func (c *Config) Secrets() []string {
	var s []string
	for _, v := range []string{c.RedisPassword, c.NatsPassword, c.NatsToken} {
		if v != "" {
			s = append(s, v)
		}
	}
	s = append(s, urlSecrets(c.RedisURL, false)...)
	s = append(s, urlSecrets(c.NatsURL, true)...)
	return s
}

// Redact returns text with every secret of c (see [Config.Secrets])
// replaced by [Redacted], and the user info of the Redis and NATS URLs
// redacted as [RedactURL] does. Use it on any text that may echo a setting:
// an error from a client library, a log line.
func (c *Config) Redact(text string) string {
	for _, u := range []string{c.RedisURL, c.NatsURL} {
		if u != "" {
			if r := RedactURL(u); r != u {
				text = strings.ReplaceAll(text, u, r)
			}
		}
	}
	secrets := c.Secrets()
	// Longest first, so a secret that contains another is replaced whole.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		text = strings.ReplaceAll(text, s, Redacted)
	}
	return text
}

// validateConnections checks the credential and TLS settings: at most one
// NATS auth method, user and password together, certificate and key
// together. Errors name the variables, never their values.
func (c *Config) validateConnections() error {
	v := func(name string) string { return Prefix + "_" + name }
	if c.RedisURL == "" {
		return fmt.Errorf("config: %s is empty", v("REDIS_URL"))
	}
	if u, err := url.Parse(c.RedisURL); err != nil {
		return fmt.Errorf("config: %s=%s: not a URL", v("REDIS_URL"), RedactURL(c.RedisURL))
	} else if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		return fmt.Errorf("config: %s=%s: the scheme must be redis://, rediss:// (TLS) or unix://", v("REDIS_URL"), RedactURL(c.RedisURL))
	}
	if strings.TrimSpace(c.NatsURL) == "" {
		return fmt.Errorf("config: %s is empty", v("NATS_URL"))
	}
	for _, p := range []struct{ certVar, keyVar, cert, key string }{
		{"REDIS_TLS_CERT_FILE", "REDIS_TLS_KEY_FILE", c.RedisTLSCertFile, c.RedisTLSKeyFile},
		{"NATS_TLS_CERT_FILE", "NATS_TLS_KEY_FILE", c.NatsTLSCertFile, c.NatsTLSKeyFile},
	} {
		if (p.cert == "") != (p.key == "") {
			return fmt.Errorf("config: %s and %s must be set together", v(p.certVar), v(p.keyVar))
		}
	}
	if (c.NatsUser == "") != (c.NatsPassword == "") {
		return fmt.Errorf("config: %s and %s must be set together", v("NATS_USER"), v("NATS_PASSWORD"))
	}
	if m := c.NatsAuthMethods(); len(m) > 1 {
		return fmt.Errorf("config: NATS authentication: %s are all set; use one method at most", strings.Join(m, ", "))
	}
	return nil
}

// NatsAuthMethods names the NATS auth methods that are configured, by their
// variables; more than one is a configuration error.
func (c *Config) NatsAuthMethods() []string {
	v := func(name string) string { return Prefix + "_" + name }
	var m []string
	if c.NatsUser != "" || c.NatsPassword != "" {
		m = append(m, v("NATS_USER")+"/"+v("NATS_PASSWORD"))
	}
	if c.NatsToken != "" {
		m = append(m, v("NATS_TOKEN"))
	}
	if c.NatsNKeyFile != "" {
		m = append(m, v("NATS_NKEY_FILE"))
	}
	if c.NatsCredsFile != "" {
		m = append(m, v("NATS_CREDS_FILE"))
	}
	for _, p := range strings.Split(c.NatsURL, ",") {
		if redactOne(p) != p {
			m = append(m, "credentials in "+v("NATS_URL"))
			break
		}
	}
	return m
}
