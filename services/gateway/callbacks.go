package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
	"github.com/bulkaction/bulkaction/pkg/webhook"
)

// Completion callbacks (docs/ARCHITECTURE.md, completion callbacks): a
// group's callbackUrl is checked at submit against the outbound rules the
// aggregators deliver under; a tenant's signing secret is made and rotated
// here; a failed delivery is retried by hand here. The deliveries
// themselves are the aggregators' (services/aggregator/callbacks.go).

// CallbackConfig configures the gateway's part of completion callbacks.
type CallbackConfig struct {
	// AllowedHosts and AllowAnyHost are the outbound rules of callbacks (the
	// http processor's, [builtin.Options]): a callbackUrl they refuse
	// before any DNS lookup (a host not listed, an IP address in a
	// restricted range not listed, localhost) is refused at submit with 400.
	AllowedHosts []string
	AllowAnyHost bool
	// SecretGrace is how long a rotated secret keeps signing beside the
	// new one (0 = it stops at once).
	SecretGrace time.Duration
}

// DefaultCallbackSecretGrace is the usual CallbackConfig.SecretGrace.
const DefaultCallbackSecretGrace = 24 * time.Hour

// outbound returns the callbacks' outbound rules (an invalid host list is
// an error naming the entry). Parsing the list is cheap: it is done per
// submission that names a callbackUrl.
func (g *Gateway) outbound() (*builtin.Outbound, error) {
	return builtin.NewOutbound(builtin.Options{AllowedHosts: g.cfg.Callbacks.AllowedHosts, AllowAnyHost: g.cfg.Callbacks.AllowAnyHost})
}

// callbackURLParam reads the optional callbackUrl query parameter of a
// submission: its form (contracts), then where it points, as far as that
// is known without resolving the host.
func (g *Gateway) callbackURLParam(r *http.Request) (string, []FieldError) {
	v := r.URL.Query().Get("callbackUrl")
	if v == "" {
		return "", nil
	}
	if err := (contracts.GroupSettings{CallbackURL: v}).Validate(); err != nil {
		fe := fieldError(err)
		fe.Field = "callbackUrl"
		return "", []FieldError{fe}
	}
	u, _ := url.Parse(v) // parsed by Validate
	o, err := g.outbound()
	if err == nil {
		err = o.CheckURL(u)
	}
	if err != nil {
		return "", []FieldError{{Field: "callbackUrl", Detail: "refused: " + err.Error(),
			Limit: "a host the http processor may call (BULKACTION_HTTP_ALLOWED_HOSTS; loopback, private and link-local addresses only when listed)"}}
	}
	return v, nil
}

// retryCallback: POST /v1/groups/{groupId}/callback/retry. A failed
// delivery becomes pending, due at once, with a new retry budget; the
// answer is the group's callback. 409 when it has not failed (pending or
// delivered), 404 when the group has no callback delivery.
func (g *Gateway) retryCallback(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	before, err := g.q.RetryCallback(r.Context(), ref)
	if errors.Is(err, redisq.ErrNoCallback) {
		cb, cerr := status.CallbackOf(r.Context(), g.q, ref)
		switch {
		case cerr != nil:
			g.unavailable(w, r, cerr)
		case cb != nil:
			writeProblem(w, r, http.StatusConflict, slugCbNotFailed, "the group has not ended: its callback is not due yet")
		default:
			writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group, or it has no callback URL (or ended longer ago than its TTL)")
		}
		return
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	cb, err := status.CallbackOf(r.Context(), g.q, ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if before != redisq.CallbackFailed {
		writeProblem(w, r, http.StatusConflict, slugCbNotFailed, "the callback is "+before+": only a failed one is retried")
		return
	}
	writeJSON(w, http.StatusOK, cb)
}

// settingsTenant is the tenant a request about a tenant's settings (its
// callback secret, its default windows) is about: the key's own, or for
// an admin key ?tenant= (required).
func settingsTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := principal(r)
	tenant, ok := p.tenantFor(r)
	if !ok {
		if p.Admin {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "an admin key must name the tenant",
				FieldError{Field: "tenant", Detail: "missing", Limit: "required with an admin key"})
		} else {
			writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such tenant")
		}
		return "", false
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad tenant", fieldError(err))
		return "", false
	}
	return tenant, true
}

func secretView(tenant string, s redisq.CallbackSecrets, now time.Time) *api.CallbackSecret {
	v := &api.CallbackSecret{Tenant: tenant, Configured: s.Current != ""}
	if !s.CreatedAt.IsZero() {
		t := s.CreatedAt.UTC()
		v.CreatedAt = &t
	}
	if s.Previous != "" && now.Before(s.PreviousUntil) {
		t := s.PreviousUntil.UTC()
		v.PreviousValidUntil = &t
	}
	return v
}

// getCallbackSecret: GET /v1/callback-secret. Whether the tenant has a
// secret, since when, and until when a rotated one still signs; never the
// secret.
func (g *Gateway) getCallbackSecret(w http.ResponseWriter, r *http.Request) {
	tenant, ok := settingsTenant(w, r)
	if !ok {
		return
	}
	s, err := g.q.CallbackSecretsOf(r.Context(), tenant)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	now, err := g.q.Now(r.Context())
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretView(tenant, s, now))
}

// rotateCallbackSecret: POST /v1/callback-secret. Makes a new secret for
// the tenant and answers it, once: it is never shown again. The secret it
// replaces keeps signing for SecretGrace, so receivers can move to the new
// one. The secrets are written to the tenants bucket, then to Redis
// (package tenantset). Each call rotates (no Idempotency-Key replay: the answer holds a
// secret, which the gateway does not keep).
func (g *Gateway) rotateCallbackSecret(w http.ResponseWriter, r *http.Request) {
	tenant, ok := settingsTenant(w, r)
	if !ok {
		return
	}
	secret := webhook.NewSecret()
	ts, err := g.tenantSettings(r.Context())
	var s redisq.CallbackSecrets
	if err == nil {
		s, err = ts.RotateCallbackSecret(r.Context(), tenant, secret, g.cfg.Callbacks.SecretGrace)
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	v := secretView(tenant, s, s.CreatedAt)
	v.Secret = secret
	g.log.Info("callback secret rotated", "tenant", tenant, "graceUntil", v.PreviousValidUntil)
	writeJSON(w, http.StatusCreated, v)
}

// tenantSettings binds the tenants bucket, the durable record of the
// settings written here (windows, callback secrets). Writes are rare: it is
// bound on each.
func (g *Gateway) tenantSettings(ctx context.Context) (*tenantset.Settings, error) {
	return tenantset.Open(ctx, g.deps.JS, g.deps.Names, g.q)
}
