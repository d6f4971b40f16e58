package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// ScriptTimes is the time the redis-server spent in each script (by name,
// or SHA1 when unknown) and the number of calls, from its slow log.
type ScriptTimes map[string]struct {
	Calls int64
	Time  time.Duration
}

// startScriptLog makes the redis-server log every command in its slow log
// (the log holds up to max entries; commands run by scripts are logged too)
// and empties it; stop reads the EVALSHA
// entries, restores the settings and returns the script times. The slow
// log is a diagnostic: it costs the server time of its own.
func (e *Env) startScriptLog(ctx context.Context, max int) (stop func() (ScriptTimes, error), err error) {
	prev, err := e.admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return nil, err
	}
	if err := e.admin.ConfigSet(ctx, "slowlog-max-len", fmt.Sprint(max)).Err(); err != nil {
		return nil, err
	}
	if err := e.admin.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		return nil, err
	}
	if err := e.admin.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return nil, err
	}
	return func() (ScriptTimes, error) {
		defer func() {
			for k, v := range prev {
				_ = e.admin.ConfigSet(context.WithoutCancel(ctx), k, v).Err()
			}
		}()
		logs, err := e.admin.SlowLogGet(ctx, -1).Result()
		if err != nil {
			return nil, err
		}
		if len(logs) >= max {
			return nil, fmt.Errorf("bench: the slow log is full (%d entries): times would be partial", max)
		}
		out := ScriptTimes{}
		for _, l := range logs {
			if len(l.Args) < 2 || !strings.EqualFold(l.Args[0], "evalsha") {
				continue
			}
			name := redisq.ScriptName(l.Args[1])
			if name == "" {
				name = l.Args[1]
			}
			t := out[name]
			t.Calls++
			t.Time += l.Duration
			out[name] = t
		}
		return out, nil
	}, nil
}

// perJob lists the scripts by time, with calls and µs per job.
func (s ScriptTimes) perJob(jobs int) string {
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(s[b].Time, s[a].Time) })
	var sb strings.Builder
	for _, n := range names {
		t := s[n]
		fmt.Fprintf(&sb, " %s=%.3f calls %.1fµs", n, float64(t.Calls)/float64(jobs), float64(t.Time.Microseconds())/float64(jobs))
	}
	return strings.TrimSpace(sb.String())
}
