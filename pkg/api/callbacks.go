package api

import "time"

// Callback states ([Callback.State]).
const (
	// CallbackWaiting: the group has a callback URL and has not ended yet.
	CallbackWaiting = "waiting"
	// CallbackPending: the group ended; its final event waits for its next
	// attempt (or is being sent).
	CallbackPending = "pending"
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered = "delivered"
	// CallbackFailed: every attempt failed until the retry budget ran out;
	// POST /v1/groups/{groupId}/callback/retry tries again.
	CallbackFailed = "failed"
)

// Callback is the delivery state of a group's completion callback: the
// "callback" of a group's reading (GET /v1/groups/{groupId}, `bulkaction
// status --json`), absent for a group without a callback URL.
type Callback struct {
	// URL is where the group's final event is POSTed.
	URL string `json:"url"`
	// State is waiting, pending, delivered or failed.
	State string `json:"state"`
	// WebhookID is the webhook-id header of every attempt (once the group
	// ended).
	WebhookID string `json:"webhookId,omitempty"`
	// Attempts counts the attempts made.
	Attempts int64 `json:"attempts"`
	// NextAttemptAt is when the next attempt is due (pending only).
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`
	// LastAttemptAt is when the last attempt ended.
	LastAttemptAt *time.Time `json:"lastAttemptAt,omitempty"`
	// StatusCode is the HTTP status of the last attempt's answer (absent
	// when there was none: refused, unreachable, timed out).
	StatusCode int `json:"statusCode,omitempty"`
	// LastError says why the last attempt failed.
	LastError string `json:"lastError,omitempty"`
	// DeliveredAt is when the receiver took it (delivered only).
	DeliveredAt *time.Time `json:"deliveredAt,omitempty"`
	// FailedAt is when the retry budget ran out (failed only).
	FailedAt *time.Time `json:"failedAt,omitempty"`
}

// CallbackSecret is the body of POST and GET /v1/callback-secret: a
// tenant's signing secret for completion callbacks. Secret is set only in
// the answer of the POST that generated it, and never shown again.
type CallbackSecret struct {
	Tenant string `json:"tenant"`
	// Configured is false while the tenant has no secret (its callbacks
	// cannot be signed, and are retried until it has one).
	Configured bool `json:"configured"`
	// Secret is the new secret, "whsec_" and base64: only in the answer of
	// the POST that generated it.
	Secret string `json:"secret,omitempty"`
	// CreatedAt is when the current secret was set.
	CreatedAt *time.Time `json:"createdAt,omitempty"`
	// PreviousValidUntil, after a rotation, is when the replaced secret
	// stops signing (until then every callback carries both signatures).
	PreviousValidUntil *time.Time `json:"previousValidUntil,omitempty"`
}
