package redisq_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestScriptNameNamesWhatRedisRuns: the script calls the server logs (its
// SLOWLOG, every call logged) are named by their SHA1, and a script that
// is not this package's is not.
func TestScriptNameNamesWhatRedisRuns(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	q, err := redisq.New(ctx, rdb, redisq.Config{Prefix: "names:"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.TakeLease(ctx, "replay", "me", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, contracts.Group("acme", "g")); err != nil {
		t.Fatal(err)
	}
	entries, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if len(e.Args) > 1 && strings.EqualFold(e.Args[0], "evalsha") {
			names = append(names, redisq.ScriptName(e.Args[1]))
		}
	}
	for _, want := range []string{"lease", "cancel"} {
		if !slices.Contains(names, want) {
			t.Errorf("scripts run %q, want %s among them", names, want)
		}
	}
	other := sha1.Sum([]byte("return 1"))
	if n := redisq.ScriptName(hex.EncodeToString(other[:])); n != "" {
		t.Fatalf("a foreign script named %q", n)
	}
}
