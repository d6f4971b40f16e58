package devenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A relative data directory (the default ./.bulkaction/dev) must work:
// redis-server changes into its --dir before opening its log file.
func TestRedisChildWithRelativeDir(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is required (make redis installs it)")
	}
	wd, _ := os.Getwd()
	tmp := t.TempDir()
	if err := os.Chdir(tmp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) })
	e, err := Start(context.Background(), Options{Dir: "rel/dev", NatsURL: "nats://unused", RedisPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.RedisKind != RedisChild {
		t.Fatalf("kind %s", e.RedisKind)
	}
	opt, _ := redis.ParseURL(e.RedisURL)
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "rel/dev/redis/redis.log")); err != nil {
		t.Fatalf("log not under the data dir: %v", err)
	}
}
