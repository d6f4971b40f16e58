package redisq

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// loadScript builds a script from lua/<name>.lua with the shared helpers of
// lua/lib.lua in front of it.
func loadScript(name string) *redis.Script {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	body, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(lib) + "\n" + string(body))
}

var (
	enqueueScript  = loadScript("enqueue")
	admitScript    = loadScript("admit")
	recordScript   = loadScript("record")
	sealScript     = loadScript("seal")
	cancelScript   = loadScript("cancel")
	releaseScript  = loadScript("release")
	reclaimScript  = loadScript("reclaim")
	claimScript    = loadScript("claim")
	retryScript    = loadScript("retry")
	correctScript  = loadScript("correct")
	pauseScript    = loadScript("pause")
	resumeScript   = loadScript("resume")
	progressScript = loadScript("progress")
	quotasScript   = loadScript("correct_quotas")
)

// Observer receives the duration of every script call (for metrics). The
// zero Observer (nil) observes nothing.
type Observer interface {
	ObserveLua(script string, d time.Duration)
}

// run runs a script and wraps its error with the script's name.
func (q *Queue) run(ctx context.Context, name string, s *redis.Script, keys []string, args ...any) (any, error) {
	start := time.Now()
	v, err := s.Run(ctx, q.rdb, keys, args...).Result()
	if q.obs != nil {
		q.obs.ObserveLua(name, time.Since(start))
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisq: %s script: %w", name, err)
	}
	return v, nil
}
