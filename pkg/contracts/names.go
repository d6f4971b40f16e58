package contracts

import (
	"strconv"
	"strings"
)

// DefaultPrefix is the subject prefix used when [Names.Prefix] is empty.
const DefaultPrefix = "bulkaction"

// Names builds the subjects and stream names of one bulkaction installation. The zero value uses
// [DefaultPrefix]: subjects bulkaction.submit.<groupId>, … and streams BULKACTION_SUBMIT, ….
type Names struct {
	// Prefix is the first token(s) of every subject, e.g. "bulkaction" or "acme.bulk"; "" means
	// [DefaultPrefix]. Stream names derive from it too (see [Names.StreamSubmit]). See
	// [Names.Validate] for what it may contain.
	Prefix string
}

func (n Names) prefix() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

func (n Names) subject(kind, token string) string {
	return n.prefix() + "." + kind + "." + token
}

// Validate checks the prefix: dot-separated tokens, none empty, none containing a space, a control
// character, '*' or '>'. The empty prefix is valid (it means [DefaultPrefix]).
func (n Names) Validate() error {
	for _, tok := range strings.Split(n.prefix(), ".") {
		if tok == "" {
			return invalidField("prefix", "empty token in "+strconv.Quote(clip(n.Prefix)), "must be dot-separated non-empty tokens")
		}
		for _, r := range tok {
			if r <= ' ' || r == 0x7f || r == '*' || r == '>' {
				return invalidField("prefix", "contains "+strconv.QuoteRune(r), "no spaces, control characters, '*' or '>'")
			}
		}
	}
	return nil
}

// Submit returns the subject of a group's submissions, <prefix>.submit.<groupId>.
func (n Names) Submit(groupID string) string { return n.subject("submit", groupID) }

// SubmitAll returns the wildcard of every group's submissions, <prefix>.submit.>.
func (n Names) SubmitAll() string { return n.subject("submit", ">") }

// Ready returns the subject of ready jobs of one type, <prefix>.ready.<type>.
func (n Names) Ready(jobType string) string { return n.subject("ready", jobType) }

// ReadyAll returns the wildcard of ready jobs of every type, <prefix>.ready.>.
func (n Names) ReadyAll() string { return n.subject("ready", ">") }

// Result returns the subject of a group's job results, <prefix>.result.<groupId>.
func (n Names) Result(groupID string) string { return n.subject("result", groupID) }

// ResultAll returns the wildcard of every group's job results, <prefix>.result.>.
func (n Names) ResultAll() string { return n.subject("result", ">") }

// Events returns the subject of a group's state events, <prefix>.events.<groupId>.
func (n Names) Events(groupID string) string { return n.subject("events", groupID) }

// EventsAll returns the wildcard of every group's state events, <prefix>.events.>.
func (n Names) EventsAll() string { return n.subject("events", ">") }

// DLQ returns the dead-letter subject of a reason token, <prefix>.dlq.<reason>. An empty reason
// means [ReasonInvalid].
func (n Names) DLQ(reason string) string {
	if reason == "" {
		reason = ReasonInvalid
	}
	return n.subject("dlq", reason)
}

// DLQAll returns the wildcard of every dead-letter subject, <prefix>.dlq.>.
func (n Names) DLQAll() string { return n.subject("dlq", ">") }

// GroupFromSubject returns the <groupId> token of a submit, result or events subject of n's prefix.
// ok is false for any other subject, and when the token is not a valid ID (see [ValidateID]).
func (n Names) GroupFromSubject(subject string) (groupID string, ok bool) {
	kind, tok, ok := n.split(subject)
	if !ok {
		return "", false
	}
	switch kind {
	case "submit", "result", "events":
	default:
		return "", false
	}
	if ValidateID("groupId", tok) != nil {
		return "", false
	}
	return tok, true
}

// TypeFromSubject returns the <type> token of a ready subject of n's prefix. ok is false for any
// other subject, and when the token is not a valid type (see [ValidateType]).
func (n Names) TypeFromSubject(subject string) (jobType string, ok bool) {
	kind, tok, ok := n.split(subject)
	if !ok || kind != "ready" || ValidateType(tok) != nil {
		return "", false
	}
	return tok, true
}

// split cuts <prefix>.<kind>.<rest> into kind and rest.
func (n Names) split(subject string) (kind, rest string, ok bool) {
	rest, ok = strings.CutPrefix(subject, n.prefix()+".")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ".")
}

// streamName derives a stream name from the prefix: upper-cased, every byte other than A-Z, 0-9
// and '_' replaced by '_', then "_" and suffix.
func (n Names) streamName(suffix string) string {
	p := n.prefix()
	var b strings.Builder
	b.Grow(len(p) + 1 + len(suffix))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	b.WriteByte('_')
	b.WriteString(suffix)
	return b.String()
}

// StreamSubmit returns the name of the stream holding submissions (subjects [Names.SubmitAll]):
// BULKACTION_SUBMIT for the default prefix. Stream names are the prefix upper-cased, with every
// byte other than A-Z, 0-9 and '_' replaced by '_', so "acme.bulk" gives ACME_BULK_SUBMIT. Two
// prefixes that differ only in such bytes ("a-b", "a.b") share stream names.
func (n Names) StreamSubmit() string { return n.streamName("SUBMIT") }

// StreamReady returns the name of the stream holding ready jobs (subjects [Names.ReadyAll]):
// BULKACTION_READY for the default prefix.
func (n Names) StreamReady() string { return n.streamName("READY") }

// StreamResult returns the name of the stream holding job results (subjects [Names.ResultAll]):
// BULKACTION_RESULT for the default prefix.
func (n Names) StreamResult() string { return n.streamName("RESULT") }

// StreamEvents returns the name of the stream holding group events (subjects [Names.EventsAll]):
// BULKACTION_EVENTS for the default prefix.
func (n Names) StreamEvents() string { return n.streamName("EVENTS") }

// StreamDLQ returns the name of the stream holding dead letters (subjects [Names.DLQAll]):
// BULKACTION_DLQ for the default prefix.
func (n Names) StreamDLQ() string { return n.streamName("DLQ") }

// SubmitMsgID returns the Nats-Msg-Id of a job submission, "<groupId>:<jobId>": a producer that
// publishes the same job again within the stream's duplicate window is deduplicated.
func SubmitMsgID(groupID, jobID string) string { return groupID + ":" + jobID }

// SealMsgID returns the Nats-Msg-Id of a seal, "<groupId>:seal:<total>".
func SealMsgID(groupID string, total int64) string {
	return groupID + ":seal:" + strconv.FormatInt(total, 10)
}

// CancelMsgID returns the Nats-Msg-Id of a cancel, "<groupId>:cancel:all" (three tokens, so no
// job id, which cannot contain a colon, collides with it).
func CancelMsgID(groupID string) string { return groupID + ":cancel:all" }

// ReadyMsgID returns the Nats-Msg-Id of a ready job, "<groupId>:<jobId>:<attempt>". The attempt
// keeps a legitimate retry inside the duplicate window from being dropped, while a re-publish of
// the same attempt (an expired lease) is.
func ReadyMsgID(groupID, jobID string, attempt int) string {
	return groupID + ":" + jobID + ":" + strconv.Itoa(attempt)
}

// ResultMsgID returns the Nats-Msg-Id of a job result, "<groupId>:<jobId>:<attempt>:result".
func ResultMsgID(groupID, jobID string, attempt int) string {
	return ReadyMsgID(groupID, jobID, attempt) + ":result"
}

// Notify is the core-NATS (not JetStream) subject on which services wake
// each other: "<prefix>.notify.<topic>", e.g. topic "work" after new jobs
// were enqueued. Losing a notification only delays work until the next poll.
func (n Names) Notify(topic string) string { return n.prefix() + ".notify." + topic }
