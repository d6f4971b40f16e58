package gateway

import (
	"context"
	"net/http"
)

// revoked returns a channel that is closed when a reload of the keys file
// takes r's API key away: the key is no longer listed, or now belongs to
// another tenant or role than the principal r was let in as. A long-lived
// response (an SSE stream) selects on it to end when its key is revoked,
// within the keys file's reload interval. The watch ends with ctx.
func (k *Keys) revoked(ctx context.Context, r *http.Request) <-chan struct{} {
	h, p := r.Header.Get("Authorization"), principal(r)
	out := make(chan struct{})
	go func() {
		for {
			reloaded := k.reloaded() // before the check: a reload in between is not missed
			if q, err := k.authenticateHeader(h); err != nil || q != p {
				close(out)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-reloaded:
			}
		}
	}()
	return out
}

// endOnRevoke ends a long-lived response (an SSE stream) when its API key
// is revoked: the request's context is cancelled, which the handler
// watches anyway for a client that goes away.
func (k *Keys) endOnRevoke(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		revoked := k.revoked(ctx, r)
		go func() {
			select {
			case <-revoked:
				cancel()
			case <-ctx.Done():
			}
		}()
		next(w, r.WithContext(ctx))
	}
}
