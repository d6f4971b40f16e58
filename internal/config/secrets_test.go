package config

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                    "redis://127.0.0.1:6379/0",
		"redis://:s3cret@127.0.0.1:6379/0":            "redis://:xxxxx@127.0.0.1:6379/0",
		"rediss://alice:s3cret@redis.example:6380/2":  "rediss://alice:xxxxx@redis.example:6380/2",
		"redis://alice:p%40ss%2Fw@h:6379/0":           "redis://alice:xxxxx@h:6379/0",
		"redis://alice:p@ss/w@h:6379/0":               "redis://alice:xxxxx@h:6379/0", // unescaped, unparsable
		"redis://alice:s3cret@h:port/0":               "redis://alice:xxxxx@h:port/0", // unparsable
		"unix:///run/redis.sock?db=1":                 "unix:///run/redis.sock?db=1",
		"nats://127.0.0.1:4222":                       "nats://127.0.0.1:4222",
		"nats://tok3n@127.0.0.1:4222":                 "nats://xxxxx@127.0.0.1:4222",
		"tls://u:s3cret@a:4222,tls://u:s3cret@b:4222": "tls://u:xxxxx@a:4222,tls://u:xxxxx@b:4222",
		"u:s3cret@a:4222":                             "u:xxxxx@a:4222",
		"":                                            "",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactHidesEverySecret(t *testing.T) {
	c := Config{
		RedisURL:      "redis://alice:url%2Fpw@h:6379/0",
		RedisPassword: "redis-setting-pw",
		NatsURL:       "nats://nats-url-token@a:4222,nats://bob:nats-url-pw@b:4222",
		NatsPassword:  "nats-setting-pw",
		NatsToken:     "nats-setting-token",
	}
	text := "dial redis://alice:url%2Fpw@h:6379/0 (url/pw) redis-setting-pw; nats://nats-url-token@a:4222,nats://bob:nats-url-pw@b:4222 " +
		"nats-url-pw nats-setting-pw nats-setting-token"
	got := c.Redact(text)
	for _, s := range []string{"url%2Fpw", "url/pw", "redis-setting-pw", "nats-url-token", "nats-url-pw", "nats-setting-pw", "nats-setting-token"} {
		if strings.Contains(got, s) {
			t.Errorf("Redact left %q in %q", s, got)
		}
	}
	if !strings.Contains(got, "redis://alice:xxxxx@h:6379/0") || !strings.Contains(got, "nats://bob:xxxxx@b:4222") {
		t.Errorf("Redact did not keep the redacted URLs readable: %q", got)
	}
}

// TestCredentialSettings checks the credential and TLS settings at Load:
// at most one NATS auth method, user and password together, certificate
// and key together; errors name the variables and hold no secret.
func TestCredentialSettings(t *testing.T) {
	const pw, token = "pw-4f9a1c", "token-8e2b7d"
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // "" = accepted
	}{
		{"user and password", map[string]string{"NATS_USER": "u", "NATS_PASSWORD": pw}, nil},
		{"token", map[string]string{"NATS_TOKEN": token}, nil},
		{"tls files", map[string]string{"NATS_TLS_CA_FILE": "/ca.pem", "REDIS_URL": "rediss://h:6380/0",
			"REDIS_TLS_CERT_FILE": "/c.pem", "REDIS_TLS_KEY_FILE": "/k.pem"}, nil},
		{"user and token", map[string]string{"NATS_USER": "u", "NATS_PASSWORD": pw, "NATS_TOKEN": token},
			[]string{"BULKACTION_NATS_USER", "BULKACTION_NATS_TOKEN"}},
		{"nkey and creds", map[string]string{"NATS_NKEY_FILE": "/a.nk", "NATS_CREDS_FILE": "/a.creds"},
			[]string{"BULKACTION_NATS_NKEY_FILE", "BULKACTION_NATS_CREDS_FILE"}},
		{"URL credentials and creds", map[string]string{"NATS_URL": "nats://u:" + pw + "@h:4222", "NATS_CREDS_FILE": "/a.creds"},
			[]string{"BULKACTION_NATS_URL", "BULKACTION_NATS_CREDS_FILE"}},
		{"password without user", map[string]string{"NATS_PASSWORD": pw}, []string{"BULKACTION_NATS_USER", "BULKACTION_NATS_PASSWORD"}},
		{"user without password", map[string]string{"NATS_USER": "u"}, []string{"BULKACTION_NATS_USER", "BULKACTION_NATS_PASSWORD"}},
		{"nats cert without key", map[string]string{"NATS_TLS_CERT_FILE": "/c.pem"}, []string{"BULKACTION_NATS_TLS_KEY_FILE"}},
		{"redis key without cert", map[string]string{"REDIS_TLS_KEY_FILE": "/k.pem"}, []string{"BULKACTION_REDIS_TLS_CERT_FILE"}},
		{"redis URL not a URL", map[string]string{"REDIS_URL": "redis://u:" + pw + "@h:port/0"}, []string{"BULKACTION_REDIS_URL", "xxxxx"}},
		{"redis URL scheme", map[string]string{"REDIS_URL": "http://u:" + pw + "@h:6379/0"}, []string{"BULKACTION_REDIS_URL", "rediss://"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(Prefix+"_"+k, v)
			}
			_, err := Load()
			if c.want == nil {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %s: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), token) {
				t.Errorf("error holds a secret: %v", err)
			}
		})
	}
}

// TestCredentialsNeedThePrefix checks that credentials are read only from
// BULKACTION_* variables: envconfig would otherwise fall back to the bare
// names, and an unrelated REDIS_PASSWORD or NATS_TOKEN in a container's
// environment would be sent to the servers.
func TestCredentialsNeedThePrefix(t *testing.T) {
	for _, name := range []string{"REDIS_USERNAME", "REDIS_PASSWORD", "REDIS_TLS_CA_FILE", "NATS_TOKEN", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS_FILE", "NATS_NKEY_FILE", "NATS_TLS_CA_FILE"} {
		t.Setenv(name, "from-the-bare-name")
	}
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.RedisUsername != "" || c.RedisPassword != "" || c.RedisTLSCAFile != "" || c.NatsToken != "" || c.NatsUser != "" ||
		c.NatsPassword != "" || c.NatsCredsFile != "" || c.NatsNKeyFile != "" || c.NatsTLSCAFile != "" {
		t.Fatalf("a bare variable was read: %+v", c)
	}
	t.Setenv(Prefix+"_REDIS_PASSWORD", "prefixed")
	if c, err = Load(); err != nil || c.RedisPassword != "prefixed" {
		t.Fatalf("BULKACTION_REDIS_PASSWORD not read: %v %q", err, c.RedisPassword)
	}
}
