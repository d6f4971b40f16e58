package cli_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
)

func TestDialNamesTheUnreachableServer(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		need cli.Need
		cfg  config.Config
		want string
	}{
		{cli.NeedRedis, config.Config{RedisURL: "redis://" + closed + "/0"}, "BULKACTION_REDIS_URL"},
		{cli.NeedNATS, config.Config{NatsURL: "nats://" + closed}, "BULKACTION_NATS_URL"},
	} {
		conn, err := cli.Dial(context.Background(), &c.cfg, c.need)
		if err == nil {
			conn.Close()
			t.Fatalf("Dial %v to a closed port succeeded", c.need)
		}
		if !errors.Is(err, cli.ErrNotRunning) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), closed) {
			t.Errorf("Dial %v: %v, want ErrNotRunning naming %s and the address", c.need, err, c.want)
		}
	}
}
