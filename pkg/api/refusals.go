package api

import "time"

// Refusals is what the pipeline refused of a group's submissions after
// they were accepted (202): messages dead-lettered as over_quota (two
// requests raced for a tenant's last room), over_total, group_ended,
// bad_seal, or invalid. A refused job was not stored: submit it again (the
// same request will do; the gateway publishes it under a new message id so
// that the stream's duplicate window does not drop it).
type Refusals struct {
	// Messages counts the refused messages, Jobs their refused jobs (a
	// message refused in part counts those only).
	Messages int64 `json:"messages"`
	Jobs     int64 `json:"jobs"`
	// LastReason, LastError and LastAt describe the newest refusal.
	LastReason string    `json:"lastReason"`
	LastError  string    `json:"lastError"`
	LastAt     time.Time `json:"lastAt"`
	// ByReason splits the counts by reason.
	ByReason []RefusalCount `json:"byReason"`
	// Recent lists the newest refusals, newest first (at most 20).
	Recent []Refusal `json:"recent"`
}

// RefusalCount is a group's refusals of one reason.
type RefusalCount struct {
	Reason   string `json:"reason"`
	Messages int64  `json:"messages"`
	Jobs     int64  `json:"jobs"`
}

// Refusal is one refused message.
type Refusal struct {
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// Jobs is how many of its jobs were refused (0 for a seal).
	Jobs int64 `json:"jobs"`
	// MessageID is its Nats-Msg-Id.
	MessageID string    `json:"messageId"`
	At        time.Time `json:"at"`
}
