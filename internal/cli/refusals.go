package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// RefusedText puts in words what the pipeline refused of a group's
// submissions after accepting them: "2 messages (5 jobs) refused:
// over_quota 2; the last at 12:01:02 (over_quota): …".
func RefusedText(r *redisq.Refusals) string {
	if r == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s) refused", countWord(r.Messages, "message"), countWord(r.Jobs, "job"))
	if len(r.ByReason) > 0 {
		parts := make([]string, 0, len(r.ByReason))
		for _, c := range r.ByReason {
			parts = append(parts, fmt.Sprintf("%s %d", c.Reason, c.Messages))
		}
		b.WriteString(": " + strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "; the last at %s (%s): %s; submit the refused jobs again",
		r.Last.At.Local().Format(time.TimeOnly), r.Last.Reason, r.Last.Error)
	return b.String()
}

// refusedJSON is the JSON of a group's refusals in a status.
func refusedJSON(r *redisq.Refusals) map[string]any {
	by := make([]map[string]any, 0, len(r.ByReason))
	for _, c := range r.ByReason {
		by = append(by, map[string]any{"reason": c.Reason, "messages": c.Messages, "jobs": c.Jobs})
	}
	return map[string]any{"messages": r.Messages, "jobs": r.Jobs, "lastReason": r.Last.Reason, "lastError": r.Last.Error,
		"lastAt": r.Last.At.UTC().Format(time.RFC3339Nano), "byReason": by}
}

func countWord(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// RefusalsFromAPI is a group's refusals as the HTTP API gives them
// (api.Refusals), for a status read over HTTP; nil for nil.
func RefusalsFromAPI(a *api.Refusals) *redisq.Refusals {
	if a == nil {
		return nil
	}
	r := &redisq.Refusals{Messages: a.Messages, Jobs: a.Jobs,
		Last: redisq.Refusal{Reason: a.LastReason, Error: a.LastError, At: a.LastAt}}
	for _, c := range a.ByReason {
		r.ByReason = append(r.ByReason, redisq.RefusalCount{Reason: c.Reason, Messages: c.Messages, Jobs: c.Jobs})
	}
	for _, e := range a.Recent {
		r.Recent = append(r.Recent, redisq.Refusal{Reason: e.Reason, Error: e.Error, Jobs: e.Jobs, MsgID: e.MessageID, At: e.At})
	}
	if len(r.Recent) > 0 {
		r.Last.MsgID, r.Last.Jobs = r.Recent[0].MsgID, r.Recent[0].Jobs
	}
	return r
}
