package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// idemTest is the Idempotency-Key handling with the Redis a test reads
// its records in.
type idemTest struct {
	*idempotency
	rdb    redis.UniversalClient
	prefix string
}

// redisKey is the Redis key of an Idempotency-Key's record.
func (i *idemTest) redisKey(r *http.Request, k string) string {
	id := i.key(r, k)
	return i.prefix + "idempotency:" + id.Scope + ":" + id.Hash
}

// idemServer serves h behind the Idempotency-Key handling on real Redis
// and HTTP, turning a panic into a 500 as the gateway does.
func idemServer(t *testing.T, h http.HandlerFunc) (*idemTest, *httptest.Server) {
	t.Helper()
	r := testenv.Redis(t)
	q, err := redisq.New(context.Background(), r.Client, redisq.Config{Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	i := &idemTest{idempotency: &idempotency{store: q.Idempotency(), ttl: time.Hour,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}, rdb: r.Client, prefix: r.Prefix}
	wrapped := i.wrap(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		wrapped(w, r)
	}))
	t.Cleanup(srv.Close)
	return i, srv
}

func idemPost(t *testing.T, srv *httptest.Server, body string, keys ...string) (*http.Response, string) {
	t.Helper()
	resp, b, err := post(srv, body, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func post(srv *httptest.Server, body string, keys ...string) (*http.Response, string, error) {
	req, err := http.NewRequest("POST", srv.URL+"/v1/groups/g/seal", strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	if keys != nil {
		req.Header["Idempotency-Key"] = keys
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// TestIdempotencyKeyEmptyRefused: an empty (or repeated) Idempotency-Key
// header is a 400 problem naming the header, not a request without one.
func TestIdempotencyKeyEmptyRefused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	_, srv := idemServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusAccepted)
	})
	for _, keys := range [][]string{{""}, {"a", "b"}} {
		resp, body := idemPost(t, srv, "x", keys...)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("Idempotency-Key %q: %d %s %s", keys, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var p Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != "Idempotency-Key" {
			t.Fatalf("Idempotency-Key %q: problem %s, want one naming the header", keys, body)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
	if resp, _ := idemPost(t, srv, "x"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("no header: %d", resp.StatusCode)
	}
}

// TestIdempotencyPanicLetsKeyGo: a handler that panics stops its lock's
// renewer and frees the key, so that a retry runs at once instead of
// waiting for a lock renewed forever and getting 409.
func TestIdempotencyPanicLetsKeyGo(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	i, srv := idemServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if calls.Add(1) == 1 {
			panic("handler bug")
		}
		w.WriteHeader(http.StatusAccepted)
	})
	if resp, _ := idemPost(t, srv, "x", "k-panic"); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("first: %d, want 500", resp.StatusCode)
	}
	rk := i.redisKey(httptest.NewRequest("POST", "/", nil), "k-panic")
	if n, err := i.rdb.Exists(context.Background(), rk).Result(); err != nil || n != 0 {
		t.Fatalf("the lock of the panicked request is still held (%d, %v)", n, err)
	}
	start := time.Now()
	resp, body := idemPost(t, srv, "x", "k-panic")
	if resp.StatusCode != http.StatusAccepted || time.Since(start) > 5*time.Second {
		t.Fatalf("retry: %d %s after %v, want 202 at once", resp.StatusCode, body, time.Since(start))
	}
}

// TestIdempotencyCompletionOwnerChecked: a request whose lock expired and
// was taken by another request with the same key does not overwrite that
// request's record when it completes.
func TestIdempotencyCompletionOwnerChecked(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	i, srv := idemServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		<-release
		w.WriteHeader(http.StatusAccepted)
	})
	rk := i.redisKey(httptest.NewRequest("POST", "/", nil), "k-owner")
	done := make(chan int, 1)
	go func() {
		resp, _, err := post(srv, "first body", "k-owner")
		if err != nil {
			done <- 0
			return
		}
		done <- resp.StatusCode
	}()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := i.rdb.Exists(ctx, rk).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request took no lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first request's lock expires and a second request takes the key.
	other := fmt.Sprintf(`{"state":"running","owner":"%s"}`, "another-request")
	if err := i.rdb.Set(ctx, rk, other, idemLock).Err(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if code := <-done; code != http.StatusAccepted {
		t.Fatalf("first: %d", code)
	}
	got, err := i.rdb.Get(ctx, rk).Result()
	if errors.Is(err, redis.Nil) || err != nil || got != other {
		t.Fatalf("the key's record is %q (%v), want the other request's lock %q", got, err, other)
	}
}
