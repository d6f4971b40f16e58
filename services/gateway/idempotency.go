package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Idempotency-Key handling (seed 004, docs/api.md#idempotency): the first
// request with a key takes a lock in Redis, runs, and stores its response
// with the fingerprint of the request (method, path, query, body) for the
// TTL. A later request with the key and the same fingerprint gets the
// stored response again with Idempotent-Replayed: true; with another
// fingerprint, 409. A request that comes while the first still runs waits
// for its response (up to idemWait), then answers as above, or 409 if the
// first is still running. A 5xx response is not kept, so the request can
// be retried with the same key.

const (
	// MaxIdempotencyKey is the longest Idempotency-Key accepted.
	MaxIdempotencyKey = 255
	// idemLock is how long a running request's lock lasts without being
	// renewed (it is renewed every idemLock/3 while the request runs).
	idemLock = 30 * time.Second
	// idemWait is how long a request waits for a running one with its key.
	idemWait = 30 * time.Second
	// idemPoll is the interval at which a waiting request looks again.
	idemPoll = 50 * time.Millisecond
)

type idempotency struct {
	store *redisq.Idempotency
	ttl   time.Duration
	log   *slog.Logger
}

// fingerprinter hashes a request's method, path, query and body as the
// handler reads it.
type fingerprinter struct {
	r   io.ReadCloser
	h   hash.Hash
	eof bool // the body was read to its end
}

func newFingerprinter(r *http.Request) *fingerprinter {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery + "\n"))
	return &fingerprinter{r: r.Body, h: h}
}

func (f *fingerprinter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	f.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		f.eof = true
	}
	return n, err
}

// whole reports whether the handler read the whole body; it peeks at most
// one byte past what was read.
func (f *fingerprinter) whole() bool {
	if f.eof {
		return true
	}
	var b [1]byte
	n, err := f.Read(b[:])
	return n == 0 && errors.Is(err, io.EOF)
}

func (f *fingerprinter) Close() error { return f.r.Close() }

// sum reads what the handler left of the body and returns the hash.
func (f *fingerprinter) sum() (string, error) {
	if _, err := io.Copy(io.Discard, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(f.h.Sum(nil)), nil
}

// recorder buffers a response so it can be stored before it is sent.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}

// key names the record of an Idempotency-Key, per tenant (or admin).
func (i *idempotency) key(r *http.Request, k string) redisq.IdempotencyKey {
	p := principal(r)
	scope := "t:" + p.Tenant
	if p.Admin {
		scope = "admin"
	}
	sum := sha256.Sum256([]byte(k))
	return redisq.IdempotencyKey{Scope: scope, Hash: hex.EncodeToString(sum[:16])}
}

func (i *idempotency) wrap(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		vs, sent := r.Header["Idempotency-Key"]
		if !sent {
			next(w, r)
			return
		}
		if detail := checkIdemKey(vs); detail != "" {
			writeProblem(w, r, http.StatusBadRequest, slugIdemInvalid, "bad Idempotency-Key",
				FieldError{Field: "Idempotency-Key", Detail: detail,
					Limit: "one header of 1 to 255 printable ASCII characters"})
			return
		}
		k := vs[0]
		ctx := r.Context()
		rk := i.key(r, k)
		fp := newFingerprinter(r)
		r.Body = fp
		owner := randomID()
		got, err := i.store.Lock(ctx, rk, owner, idemLock)
		clock(r).mark("idem")
		if err != nil {
			i.unavailable(w, r, err)
			return
		}
		if !got {
			i.replay(w, r, rk, fp)
			return
		}
		// Keep the lock while the request runs. The renewer stops however
		// the handler ends, and a handler that panics lets the key go, so
		// that a retry runs instead of waiting for a lock renewed forever.
		rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		go i.renew(rctx, rk, owner)
		finished := false
		defer func() {
			if !finished {
				stop()
				i.release(rk, owner)
			}
		}()
		rec := &recorder{header: http.Header{}}
		next(rec, r)
		finished = true
		stop()
		// A response is kept only for a request whose whole body the
		// handler read (so its fingerprint is the request's): one rejected
		// early, at line 5 of a large upload, is not read to its end just
		// to be fingerprinted, and simply runs again when repeated.
		whole := fp.whole()
		sum := hex.EncodeToString(fp.h.Sum(nil))
		if rec.code == 0 || rec.code >= 500 || !whole || ctx.Err() != nil {
			// Nothing to keep: the handler wrote nothing (the client went
			// away), failed, or did not read the whole body. The key is
			// free for a retry.
			i.release(rk, owner)
		} else {
			done := redisq.IdempotencyRecord{State: redisq.IdempotencyDone, Fingerprint: sum, Status: rec.code,
				ContentType: rec.header.Get("Content-Type"), Body: rec.body.Bytes()}
			// Stored only while the lock is still this request's: one whose
			// lock expired and was taken by another request with the key
			// must not overwrite that request's record.
			stored, err := i.store.Complete(context.WithoutCancel(ctx), rk, owner, done, i.ttl)
			clock(r).mark("idem")
			switch {
			case err != nil:
				i.log.Warn("idempotent response not stored", "err", err)
			case !stored:
				i.log.Warn("idempotent response not stored: the Idempotency-Key's lock expired while the request ran",
					"status", rec.code)
			}
		}
		if rec.code == 0 {
			return
		}
		for name, vs := range rec.header {
			w.Header()[name] = vs
		}
		w.WriteHeader(rec.code)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// replay answers a request whose key is taken: the stored response, 409,
// or after waiting for a running request, one of those.
func (i *idempotency) replay(w http.ResponseWriter, r *http.Request, rk redisq.IdempotencyKey, fp *fingerprinter) {
	sum, err := fp.sum()
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body could not be read")
		return
	}
	ctx := r.Context()
	deadline := time.Now().Add(idemWait)
	for {
		rec, found, err := i.store.Get(ctx, rk)
		if err == nil && !found {
			// The first request failed (5xx) and let its key go: this one
			// may run it, but the body is spent; ask for a retry.
			w.Header().Set("Retry-After", "1")
			writeProblem(w, r, http.StatusConflict, slugIdemInFlight,
				"the first request with this Idempotency-Key failed; retry this request")
			return
		}
		if err != nil {
			i.unavailable(w, r, err)
			return
		}
		if rec.State == redisq.IdempotencyDone {
			if rec.Fingerprint != sum {
				writeProblem(w, r, http.StatusConflict, slugIdemConflict,
					"this Idempotency-Key was used with another request (method, path, query or body differ)")
				return
			}
			if rec.ContentType != "" {
				w.Header().Set("Content-Type", rec.ContentType)
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(rec.Status)
			_, _ = w.Write(rec.Body)
			return
		}
		if time.Now().After(deadline) {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, r, http.StatusConflict, slugIdemInFlight,
				"a request with this Idempotency-Key is still running; retry later")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(idemPoll):
		}
	}
}

// renew extends the lock while it is still this request's.
func (i *idempotency) renew(ctx context.Context, rk redisq.IdempotencyKey, owner string) {
	loop.Every(ctx, idemLock/3, func(ctx context.Context) {
		_, _ = i.store.Renew(ctx, rk, owner, idemLock)
	})
}

// release deletes the lock if it is still this request's.
func (i *idempotency) release(rk redisq.IdempotencyKey, owner string) {
	_, _ = i.store.Release(context.Background(), rk, owner)
}

func (i *idempotency) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	i.log.Error("idempotency store unavailable", "err", err)
	w.Header().Set("Retry-After", "1")
	writeProblem(w, r, http.StatusServiceUnavailable, slugUnavailable, "the request could not be completed; retry it")
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// checkIdemKey returns why the values of the Idempotency-Key header are
// not accepted, or "" when there is one good key.
func checkIdemKey(vs []string) string {
	switch {
	case len(vs) != 1:
		return "sent more than once"
	case vs[0] == "":
		return "empty: send a key, or no Idempotency-Key header"
	case len(vs[0]) > MaxIdempotencyKey:
		return "longer than 255 characters"
	case !printable(vs[0]):
		return "not printable ASCII"
	}
	return ""
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
