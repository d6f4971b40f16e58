package processor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	var nilRL *processor.RateLimitError
	tests := []struct {
		name  string
		err   error
		want  processor.Outcome
		after time.Duration
	}{
		{"nil", nil, processor.OutcomeSuccess, 0},
		{"plain", base, processor.OutcomeRetry, 0},
		{"wrapped plain", fmt.Errorf("x: %w", base), processor.OutcomeRetry, 0},
		{"deadline", context.DeadlineExceeded, processor.OutcomeRetry, 0},
		{"wrapped deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), processor.OutcomeRetry, 0},
		{"canceled", context.Canceled, processor.OutcomeRetry, 0},
		{"rate limited", processor.RateLimited(3*time.Second, base), processor.OutcomeRateLimited, 3 * time.Second},
		{"rate limited nil cause", processor.RateLimited(time.Millisecond, nil), processor.OutcomeRateLimited, time.Millisecond},
		{"rate limited no preference", processor.RateLimited(0, base), processor.OutcomeRateLimited, 0},
		{"rate limited negative", processor.RateLimited(-time.Second, base), processor.OutcomeRateLimited, 0},
		{"wrapped rate limited", fmt.Errorf("api: %w", processor.RateLimited(time.Minute, base)), processor.OutcomeRateLimited, time.Minute},
		{"nil *RateLimitError", nilRL, processor.OutcomeRateLimited, 0},
		{"skip retry", processor.ErrSkipRetry, processor.OutcomeFailed, 0},
		{"wrapped skip retry", fmt.Errorf("bad input: %w", processor.ErrSkipRetry), processor.OutcomeFailed, 0},
		{"permanent", processor.Permanent(base), processor.OutcomeFailed, 0},
		{"wrapped permanent", fmt.Errorf("x: %w", processor.Permanent(base)), processor.OutcomeFailed, 0},
		{"permanent deadline", processor.Permanent(context.DeadlineExceeded), processor.OutcomeFailed, 0},
		{"permanent rate limited", processor.Permanent(processor.RateLimited(time.Second, base)), processor.OutcomeFailed, 0},
		{"rate limited permanent", processor.RateLimited(time.Second, processor.Permanent(base)), processor.OutcomeFailed, 0},
		{"panic", &processor.PanicError{Value: "x"}, processor.OutcomeFailed, 0},
		{"wrapped panic", fmt.Errorf("job: %w", &processor.PanicError{Value: 1}), processor.OutcomeFailed, 0},
		{"no processor", fmt.Errorf("%w \"t\"", processor.ErrNoProcessor), processor.OutcomeFailed, 0},
		{"joined", errors.Join(base, processor.ErrSkipRetry), processor.OutcomeFailed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, after := processor.Classify(tt.err)
			if got != tt.want || after != tt.after {
				t.Fatalf("Classify(%v) = %v, %v; want %v, %v", tt.err, got, after, tt.want, tt.after)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	if processor.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	cause := fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	err := processor.Permanent(cause)
	if !errors.Is(err, processor.ErrSkipRetry) {
		t.Error("Permanent(err) does not match ErrSkipRetry")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Error("Permanent(err) hides what err wraps")
	}
	if errors.Unwrap(err) != cause {
		t.Errorf("Unwrap = %v, want the cause", errors.Unwrap(err))
	}
	if err.Error() != cause.Error() {
		t.Errorf("Error() = %q, want %q", err, cause)
	}
	var rl *processor.RateLimitError
	if errors.As(processor.Permanent(processor.RateLimited(time.Second, nil)), &rl); rl == nil {
		t.Error("errors.As cannot find a RateLimitError under Permanent")
	}
}

func TestRateLimitError(t *testing.T) {
	t.Parallel()
	cause := errors.New("429 from api")
	err := processor.RateLimited(1500*time.Millisecond, cause)
	var rl *processor.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("RateLimited returned %T, want *RateLimitError", err)
	}
	if rl.RetryAfter != 1500*time.Millisecond || rl.Err != cause {
		t.Fatalf("fields = %+v", rl)
	}
	if !errors.Is(err, cause) {
		t.Error("Unwrap does not return the cause")
	}
	if got, want := err.Error(), "rate limited (retry after 1.5s): 429 from api"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := processor.RateLimited(0, nil).Error(), "rate limited"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if errors.Is(err, processor.ErrSkipRetry) {
		t.Error("a rate-limited error must not be permanent")
	}
}

func TestPanicError(t *testing.T) {
	t.Parallel()
	pe := &processor.PanicError{Value: "kaboom"}
	if !strings.Contains(pe.Error(), "kaboom") {
		t.Errorf("Error() = %q does not include the value", pe.Error())
	}
	if pe.Unwrap() != nil {
		t.Error("Unwrap of a non-error value != nil")
	}
	pe = &processor.PanicError{Value: io.EOF}
	if !errors.Is(pe, io.EOF) {
		t.Error("a panic with an error value does not unwrap to it")
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	for o, want := range map[processor.Outcome]string{
		processor.OutcomeSuccess:     "success",
		processor.OutcomeRetry:       "retry",
		processor.OutcomeRateLimited: "rate_limited",
		processor.OutcomeFailed:      "failed",
		0:                            "Outcome(0)",
		42:                           "Outcome(42)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
