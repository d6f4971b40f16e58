package pipelinetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// LeakedKey is a key of a group that will never expire although it should
// ([GroupKeysWithoutTTL]).
type LeakedKey struct {
	// Key is the Redis key.
	Key string
	// Group is its group "<tenant>:<gid>".
	Group string
	// Why is the group's state: COMPLETED, CANCELLED, abandoned, or "no
	// meta" (the group's meta is gone while this key stays).
	Why string
}

func (l LeakedKey) String() string { return fmt.Sprintf("%s (group %s %s)", l.Key, l.Group, l.Why) }

// GroupKeysWithoutTTL scans the keys under prefix (SCAN, 1000 a step) and
// returns every key of a group that has no TTL although the group ended
// (its meta's status COMPLETED or CANCELLED), was abandoned (abandonedAt
// set), or has no meta any more: the chaos check T9 ("no key of an ended
// group without a TTL"). A group's keys are P group:<t>:<g>:<suffix> (meta,
// jobs, ids, progress, failures, retry links), its job hashes P
// job:<t>:<g>:<jid> and its congestion keys P congestion:<t>:<g>:<suffix>;
// the indexes and every shared key are not group keys. The result is sorted
// by key.
func GroupKeysWithoutTTL(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]LeakedKey, error) {
	byGroup := map[string][]string{}
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, escapeGlob(prefix)+"*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("pipelinetest: scan: %w", err)
		}
		for _, k := range keys {
			if g, ok := groupOfKey(strings.TrimPrefix(k, prefix)); ok {
				byGroup[g] = append(byGroup[g], k)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	var out []LeakedKey
	for g, keys := range byGroup {
		m, err := rdb.HMGet(ctx, prefix+"group:"+g+":meta", "status", "abandonedAt").Result()
		if err != nil {
			return nil, fmt.Errorf("pipelinetest: meta of %s: %w", g, err)
		}
		why := ""
		switch status, _ := m[0].(string); {
		case m[0] == nil:
			why = "no meta"
		case status == string(contracts.StateCompleted) || status == string(contracts.StateCancelled):
			why = status
		case m[1] != nil:
			why = "abandoned"
		default:
			continue // alive: its keys are meant to last
		}
		pipe := rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			ttls[i] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, fmt.Errorf("pipelinetest: TTLs of %s: %w", g, err)
		}
		for i, k := range keys {
			// -1: no TTL; -2 (gone since the scan) is fine.
			if ttls[i].Val() == -1 || ttls[i].Val() == -1*time.Millisecond {
				out = append(out, LeakedKey{Key: k, Group: g, Why: why})
			}
		}
	}
	slices.SortFunc(out, func(a, b LeakedKey) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// groupOfKey returns the group "<tenant>:<gid>" of a key without its
// prefix, if it is a group's key: group:<t>:<g>:<x>, job:<t>:<g>:<jid> or
// congestion:<t>:<g>:<x> (tokens never contain ':').
func groupOfKey(k string) (string, bool) {
	for _, kind := range []string{"group:", "job:", "congestion:"} {
		if rest, ok := strings.CutPrefix(k, kind); ok {
			parts := strings.Split(rest, ":")
			if len(parts) != 3 {
				return "", false
			}
			return parts[0] + ":" + parts[1], true
		}
	}
	return "", false
}

// escapeGlob escapes the glob characters of s for SCAN MATCH.
func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
	return r.Replace(s)
}

// CheckGroupTTLs fails t, listing them, if [GroupKeysWithoutTTL] finds keys.
func CheckGroupTTLs(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	leaked, err := GroupKeysWithoutTTL(context.Background(), rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaked {
		t.Errorf("T9: key without a TTL: %s", l)
	}
}

// WorkStreamsHeld returns the unsettled messages of SUBMIT, READY and
// RESULT of names ([natsutil.Unsettled]), by stream kind.
func WorkStreamsHeld(ctx context.Context, js jetstream.JetStream, names contracts.Names) (map[string]uint64, error) {
	out := map[string]uint64{}
	for kind, name := range map[string]string{"SUBMIT": names.StreamSubmit(), "READY": names.StreamReady(), "RESULT": names.StreamResult()} {
		n, err := natsutil.Unsettled(ctx, js, name)
		if err != nil {
			return nil, fmt.Errorf("pipelinetest: %w", err)
		}
		out[kind] = n
	}
	return out, nil
}

// WaitWorkStreamsEmpty waits until SUBMIT, READY and RESULT of names hold
// no message (the last acknowledgements may follow a group's final event by
// a moment), failing t with what they hold after timeout (0 means
// testkit.DefaultTimeout).
func WaitWorkStreamsEmpty(t testing.TB, js jetstream.JetStream, names contracts.Names, timeout time.Duration) {
	t.Helper()
	if timeout <= 0 {
		timeout = testkit.DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	for {
		held, err := WorkStreamsHeld(context.Background(), js, names)
		if err == nil && held["SUBMIT"]+held["READY"]+held["RESULT"] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("work streams not empty after %s: %v (err %v)", timeout, held, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
