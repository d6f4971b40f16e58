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

// AdmitObserver is an [Observer] that is also told of every admission
// script call that leased jobs: how many, and the Redis time (ms) the
// script ran at, which is when they count toward the limits. Give one as
// [Config.Observer] to follow admissions exactly (the cluster bench's
// sliding windows).
type AdmitObserver interface {
	Observer
	ObserveAdmit(nowMs int64, jobs int)
}

// run runs a script and wraps its error with the script's name.
func (q *Queue) run(ctx context.Context, name string, s *redis.Script, keys []string, args ...any) (any, error) {
	return runScript(ctx, q.rdb, q.obs, name, s, keys, args...)
}

// runScript runs a script on rdb, reports its duration to obs (nil = none)
// and wraps its error with the script's name; a call refused because its
// slot is moving is made again until the slot has moved.
func runScript(ctx context.Context, rdb redis.Scripter, obs Observer, name string, s *redis.Script, keys []string, args ...any) (any, error) {
	var waited time.Duration
	for attempt := 0; ; attempt++ {
		start := time.Now()
		v, err := s.Run(ctx, rdb, keys, args...).Result()
		if obs != nil {
			obs.ObserveLua(name, time.Since(start))
		}
		if err == nil || errors.Is(err, redis.Nil) {
			return v, nil
		}
		if !slotMoving(err) || waited >= slotMoveWait {
			return nil, fmt.Errorf("redisq: %s script: %w", name, err)
		}
		// The script wrote nothing (lib.lua's slot check): call it again
		// once the slot has moved.
		pause := slotMoveBackoff(attempt)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisq: %s script: %w", name, err)
		case <-time.After(pause):
		}
		waited += pause
	}
}

// slotMoveWait is how long a script call is tried again while its Redis
// Cluster slot moves between primaries, beyond the client's own retries of
// TRYAGAIN; a slot's move takes about a second per few thousand keys.
const slotMoveWait = time.Minute

// slotMoveBackoff is the pause before the attempt+1st call of a script whose
// slot is moving: 10 ms, doubling up to 500 ms.
func slotMoveBackoff(attempt int) time.Duration {
	return min(10*time.Millisecond<<min(attempt, 6), 500*time.Millisecond)
}

// slotMoving reports whether err is a script refused, or stopped by
// lib.lua's slot check before any write, because its slot is moving
// between Redis Cluster primaries.
func slotMoving(err error) bool {
	if err == nil {
		return false
	}
	return redis.IsTryAgainError(err) || strings.Contains(err.Error(), "Script attempted to access a non local key")
}
