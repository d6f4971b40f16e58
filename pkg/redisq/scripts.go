package redisq

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// scriptNames maps each script's SHA1 to its name ([ScriptName]).
var scriptNames = map[string]string{}

// loadScript builds a script from lua/<name>.lua with the shared helpers of
// lua/lib.lua in front of it, and then those of lua/<lib>.lua of each of
// libs (helpers only some scripts use, such as zcopy).
func loadScript(name string, libs ...string) *redis.Script {
	var b strings.Builder
	for _, part := range append(append([]string{"lib"}, libs...), name) {
		src, err := luaFS.ReadFile("lua/" + part + ".lua")
		if err != nil {
			panic(err)
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	s := redis.NewScript(b.String())
	scriptNames[s.Hash()] = name
	return s
}

var (
	enqueueScript         = loadScript("enqueue")
	admitScript           = loadScript("admit", "zcopy")
	scheduleRefreshScript = loadScript("schedule_refresh")
	rescheduleScript      = loadScript("reschedule")
	recordScript          = loadScript("record")
	sealScript            = loadScript("seal")
	cancelScript          = loadScript("cancel")
	releaseScript         = loadScript("release")
	reclaimScript         = loadScript("reclaim")
	claimScript           = loadScript("claim")
	retryScript           = loadScript("retry")
	correctScript         = loadScript("correct")
	pauseScript           = loadScript("pause")
	resumeScript          = loadScript("resume")
	progressScript        = loadScript("progress")
	quotasScript          = loadScript("correct_quotas")
	destReportScript      = loadScript("dest_report")
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
