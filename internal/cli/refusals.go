package cli

import (
	"fmt"
	"strings"
	"time"

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

func countWord(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
