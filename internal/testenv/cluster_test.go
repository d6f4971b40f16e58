package testenv

import (
	"context"
	"fmt"
	"testing"
)

// TestRedisCluster: a cluster of three primaries takes keys in every slot,
// spread over its nodes, through a cluster client.
func TestRedisCluster(t *testing.T) {
	c := NewRedisCluster(t, 3)
	cl := c.Client(t)
	ctx := context.Background()
	for i := range 300 {
		if err := cl.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, s := range c.Nodes {
		n := clientFor(t, s.URL()).DBSize(ctx).Val()
		if n == 0 {
			t.Errorf("node %s holds no key", s.Addr())
		}
		total += int(n)
	}
	if total != 300 {
		t.Fatalf("%d keys over the nodes, want 300", total)
	}
}
