package testenv

import (
	"context"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestRedisPrefixesAreDistinct(t *testing.T) {
	a, b := Redis(t), Redis(t)
	if a.Prefix == b.Prefix {
		t.Fatalf("two envs share prefix %q", a.Prefix)
	}
	ctx := context.Background()
	if err := a.Client.Set(ctx, a.Prefix+"k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Client.Exists(ctx, b.Prefix+"k").Result(); n != 0 {
		t.Fatalf("key visible under the other prefix")
	}
}

func TestRedisServerStopStart(t *testing.T) {
	s := NewRedisServer(t)
	ctx := context.Background()
	c := clientFor(t, s.URL())
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping succeeded on a stopped server")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
