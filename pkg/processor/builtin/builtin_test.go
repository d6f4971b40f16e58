package builtin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	builtin.Register(m, builtin.Options{})
	if got, want := m.Types(), []string{"http", "noop", "sleep"}; !slices.Equal(got, want) {
		t.Fatalf("Types() = %v, want %v", got, want)
	}
	ctx := context.Background()
	if err := m.Process(ctx, &processor.Job{Type: builtin.TypeNoop, Payload: []byte(`{"anything":1}`)}); err != nil {
		t.Errorf("noop: %v", err)
	}
	if err := m.Process(ctx, &processor.Job{Type: builtin.TypeSleep, Payload: []byte(`{"failRate":1}`)}); !errors.Is(err, builtin.ErrInjected) {
		t.Errorf("sleep through the mux: %v, want an injected failure", err)
	}
	var pe *builtin.PayloadError
	if err := m.Process(ctx, &processor.Job{Type: builtin.TypeHTTP, Payload: []byte(`{}`)}); !errors.As(err, &pe) || pe.Field != "url" {
		t.Errorf("http without url: %v, want a payload error on url", err)
	}

	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "multiple registrations") {
			t.Errorf("second Register: panic %v, want a duplicate registration panic", r)
		}
	}()
	builtin.Register(m, builtin.Options{})
}

func TestNoop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := builtin.Noop().Process(ctx, &processor.Job{}); err != nil {
		t.Fatalf("noop = %v, want nil even with a cancelled context", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for u, ok := range map[string]bool{
		"": true, "http://example.test/hook": true, "https://example.test": true,
		"ftp://example.test": false, "/relative": false, "http://": false, "://bad": false,
	} {
		err := builtin.Options{DefaultURL: u, AllowedHosts: []string{"example.test"}}.Validate()
		if (err == nil) != ok {
			t.Errorf("Validate(DefaultURL %q) = %v, want ok=%v", u, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "DefaultURL") {
			t.Errorf("Validate error %q does not name DefaultURL", err)
		}
	}
}

func ExampleRegister() {
	mux := processor.NewMux()
	builtin.Register(mux, builtin.Options{Rand: func() float64 { return 0.25 }})
	fmt.Println(mux.Types())

	for _, payload := range []string{
		`{"ms":1}`,
		`{"failRate":0.5}`,
		`{"failRate":0.2,"rateLimitRate":0.2,"retryAfterMs":1500}`,
		`{"permanentFailRate":1}`,
		`{"ms":-5}`,
	} {
		err := mux.Process(context.Background(), &processor.Job{Type: "sleep", Payload: []byte(payload)})
		outcome, after := processor.Classify(err)
		fmt.Println(outcome, after)
	}
	// Output:
	// [http noop sleep]
	// success 0s
	// retry 0s
	// rate_limited 1.5s
	// failed 0s
	// failed 0s
}
