package builtin

import (
	"context"
	"fmt"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// maxSleepMs bounds every duration of a "sleep" payload: 24 hours.
const maxSleepMs = 24 * 60 * 60 * 1000

// sleepPayload is the payload of a "sleep" job.
type sleepPayload struct {
	Ms                int64   `json:"ms"`
	JitterMs          int64   `json:"jitterMs"`
	FailRate          float64 `json:"failRate"`
	RateLimitRate     float64 `json:"rateLimitRate"`
	RetryAfterMs      *int64  `json:"retryAfterMs"`
	PermanentFailRate float64 `json:"permanentFailRate"`
}

// Sleep returns the "sleep" processor, which simulates work. Its payload is a JSON object, every
// field optional:
//
//	{"ms":N, "jitterMs":J, "failRate":F, "rateLimitRate":R, "retryAfterMs":M, "permanentFailRate":P}
//
// It sleeps N ms plus a uniform jitter in [0, J) ms (both 0 to 86400000, default 0), returning the
// context's error (a retryable error) if ctx ends first. Then it draws one number u in [0, 1) and
//
//   - u < F: returns a retryable error;
//   - F <= u < F+R: returns [processor.RateLimited] with a retry-after of M ms (0 to 86400000; absent
//     means Options.DefaultRetryAfter, 0 means the worker's own backoff);
//   - F+R <= u < F+R+P: returns a [processor.Permanent] error;
//   - otherwise succeeds.
//
// So F, R and P are exactly the probabilities of each outcome; each must be in [0, 1] and their sum
// at most 1. Injected errors wrap [ErrInjected]. Randomness comes from Options.Rand: the jitter draw
// (only when J > 0) comes before the outcome draw (only when F+R+P > 0).
//
// An invalid payload (a field of the wrong type or out of range, an unknown field, not a JSON object)
// fails permanently with a [*PayloadError] naming the field. An empty payload sleeps 0 ms and
// succeeds.
func Sleep(opts Options) processor.Processor {
	return &sleeper{rand: opts.rand(), retryAfter: opts.retryAfter()}
}

type sleeper struct {
	rand       func() float64
	retryAfter time.Duration
}

// sumSlack tolerates rounding in F+R+P (0.1+0.2+0.7 is not exactly 1 in float64).
const sumSlack = 1e-9

func parseSleep(payload []byte) (sleepPayload, error) {
	var p sleepPayload
	if len(payload) == 0 {
		return p, nil
	}
	if err := decodeObject(TypeSleep, payload, &p, true); err != nil {
		return p, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"ms", p.Ms}, {"jitterMs", p.JitterMs}} {
		if f.v < 0 || f.v > maxSleepMs {
			return p, invalid(TypeSleep, f.name, "must be between 0 and %d, got %d", maxSleepMs, f.v)
		}
	}
	if p.RetryAfterMs != nil && (*p.RetryAfterMs < 0 || *p.RetryAfterMs > maxSleepMs) {
		return p, invalid(TypeSleep, "retryAfterMs", "must be between 0 and %d, got %d", maxSleepMs, *p.RetryAfterMs)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"failRate", p.FailRate}, {"rateLimitRate", p.RateLimitRate}, {"permanentFailRate", p.PermanentFailRate}} {
		if !(f.v >= 0 && f.v <= 1) {
			return p, invalid(TypeSleep, f.name, "must be between 0 and 1, got %v", f.v)
		}
	}
	if sum := p.FailRate + p.RateLimitRate + p.PermanentFailRate; sum > 1+sumSlack {
		return p, invalid(TypeSleep, "", "failRate + rateLimitRate + permanentFailRate must be at most 1, got %v", sum)
	}
	return p, nil
}

func (s *sleeper) Process(ctx context.Context, job *processor.Job) error {
	p, err := parseSleep(job.Payload)
	if err != nil {
		return err
	}

	d := time.Duration(p.Ms) * time.Millisecond
	if p.JitterMs > 0 {
		d += time.Duration(s.rand() * float64(time.Duration(p.JitterMs)*time.Millisecond))
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("builtin: sleep of %s interrupted: %w", d, ctx.Err())
		case <-t.C:
		}
	}

	if p.FailRate+p.RateLimitRate+p.PermanentFailRate <= 0 {
		return nil
	}
	u := s.rand()
	switch {
	case u < p.FailRate:
		return fmt.Errorf("builtin: sleep: %w (failRate %v)", ErrInjected, p.FailRate)
	case u < p.FailRate+p.RateLimitRate:
		after := s.retryAfter
		if p.RetryAfterMs != nil {
			after = time.Duration(*p.RetryAfterMs) * time.Millisecond
		}
		return processor.RateLimited(after, fmt.Errorf("builtin: sleep: %w (rateLimitRate %v)", ErrInjected, p.RateLimitRate))
	case u < p.FailRate+p.RateLimitRate+p.PermanentFailRate:
		return processor.Permanent(fmt.Errorf("builtin: sleep: %w (permanentFailRate %v)", ErrInjected, p.PermanentFailRate))
	}
	return nil
}
