package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// DefaultPrefix is the subject prefix used when [Names.Prefix] is empty.
const DefaultPrefix = "bulkaction"

// Names builds the subjects and stream names of one bulkaction installation. The zero value uses
// [DefaultPrefix]: subjects bulkaction.submit.<tenant>.<groupId>, … and streams BULKACTION_SUBMIT, ….
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

// Submit returns the subject of a group's submissions, <prefix>.submit.<tenant>.<groupId>.
func (n Names) Submit(g GroupRef) string { return n.subject("submit", g.Tenant+"."+g.ID) }

// SubmitTenant returns the wildcard of one tenant's submissions, <prefix>.submit.<tenant>.>: what
// a tenant's NATS user may publish to.
func (n Names) SubmitTenant(tenant string) string { return n.subject("submit", tenant+".>") }

// SubmitAll returns the wildcard of every group's submissions, <prefix>.submit.>.
func (n Names) SubmitAll() string { return n.subject("submit", ">") }

// Ready returns the subject of ready jobs of one type, <prefix>.ready.<type>.
func (n Names) Ready(jobType string) string { return n.subject("ready", jobType) }

// ReadyPack returns the subject of a READY message of jobs jobs of one type: [Names.Ready] for one
// job (or fewer), <prefix>.ready.<type>.<jobs> for more. The job count in the subject lets READY's
// per-subject message counts tell how many jobs it holds (the fetchers' and dispatchers' room is
// counted in jobs) without reading a message.
func (n Names) ReadyPack(jobType string, jobs int) string {
	if jobs <= 1 {
		return n.Ready(jobType)
	}
	return n.Ready(jobType) + "." + strconv.Itoa(jobs)
}

// ReadyFilters returns the subjects of every READY message of one type, packs included: the filter
// subjects of that type's consumer.
func (n Names) ReadyFilters(jobType string) []string {
	return []string{n.Ready(jobType), n.Ready(jobType) + ".*"}
}

// ReadyFromSubject returns the job type and the number of jobs of a READY message's subject (see
// [Names.ReadyPack]). ok is false for any other subject, a type that is not valid (see
// [ValidateType]), and a job count that is not a number above 1.
func (n Names) ReadyFromSubject(subject string) (jobType string, jobs int, ok bool) {
	kind, rest, ok := n.split(subject)
	if !ok || kind != "ready" {
		return "", 0, false
	}
	jobType, count, packed := strings.Cut(rest, ".")
	if ValidateType(jobType) != nil {
		return "", 0, false
	}
	if !packed {
		return jobType, 1, true
	}
	jobs, err := strconv.Atoi(count)
	if err != nil || jobs < 2 || strconv.Itoa(jobs) != count {
		return "", 0, false
	}
	return jobType, jobs, true
}

// ReadyAll returns the wildcard of ready jobs of every type, <prefix>.ready.>.
func (n Names) ReadyAll() string { return n.subject("ready", ">") }

// Result returns the subject of a group's job results, <prefix>.result.<tenant>.<groupId>.
func (n Names) Result(g GroupRef) string { return n.subject("result", g.Tenant+"."+g.ID) }

// ResultAll returns the wildcard of every group's job results, <prefix>.result.>.
func (n Names) ResultAll() string { return n.subject("result", ">") }

// Events returns the subject of a group's events, <prefix>.events.<tenant>.<groupId>.
func (n Names) Events(g GroupRef) string { return n.subject("events", g.Tenant+"."+g.ID) }

// EventsTenant returns the wildcard of one tenant's events, <prefix>.events.<tenant>.>: what a
// tenant's NATS user may subscribe to.
func (n Names) EventsTenant(tenant string) string { return n.subject("events", tenant+".>") }

// EventsAll returns the wildcard of every group's state events, <prefix>.events.>.
func (n Names) EventsAll() string { return n.subject("events", ">") }

// NoTenant is the tenant token of a dead letter whose message names no tenant (a READY message,
// or a subject that is not a group's): it is not a valid tenant, so it is no tenant's subject.
const NoTenant = "~"

// DLQ returns the dead-letter subject of a tenant's message rejected for a reason token,
// <prefix>.dlq.<tenant>.<reason>. An empty tenant means [NoTenant], an empty reason
// [ReasonInvalid]. Each tenant's dead letters of a reason are one subject, so the DLQ stream's
// per-subject limit keeps one tenant's from evicting another's.
func (n Names) DLQ(tenant, reason string) string {
	if tenant == "" {
		tenant = NoTenant
	}
	if reason == "" {
		reason = ReasonInvalid
	}
	return n.subject("dlq", tenant+"."+reason)
}

// DLQOf returns the dead-letter subject of a message on subject rejected for reason: the tenant
// is the one its subject names (a submit, result or events subject), else [NoTenant].
func (n Names) DLQOf(subject, reason string) string {
	g, _ := n.GroupFromSubject(subject)
	return n.DLQ(g.Tenant, reason)
}

// DLQReason returns the tenant and reason tokens of a dead-letter subject of n's prefix; the
// tenant is "" for <prefix>.dlq.<reason>, the subject of dead letters stored before their subject
// named the tenant. ok is false for any other subject.
func (n Names) DLQReason(subject string) (tenant, reason string, ok bool) {
	kind, rest, ok := n.split(subject)
	if !ok || kind != "dlq" || rest == "" {
		return "", "", false
	}
	tenant, reason, ok = strings.Cut(rest, ".")
	if !ok {
		return "", rest, true
	}
	if tenant == "" || reason == "" || strings.Contains(reason, ".") {
		return "", "", false
	}
	return tenant, reason, true
}

// DLQTenant returns the wildcard of one tenant's dead letters, <prefix>.dlq.<tenant>.*.
func (n Names) DLQTenant(tenant string) string { return n.subject("dlq", tenant+".*") }

// DLQAll returns the wildcard of every dead-letter subject, <prefix>.dlq.>.
func (n Names) DLQAll() string { return n.subject("dlq", ">") }

// GroupFromSubject returns the group of a submit, result or events subject of n's prefix,
// <prefix>.<kind>.<tenant>.<groupId>. ok is false for any other subject, and when a token is not
// valid (see [GroupRef.Validate]).
func (n Names) GroupFromSubject(subject string) (g GroupRef, ok bool) {
	kind, rest, ok := n.split(subject)
	if !ok {
		return GroupRef{}, false
	}
	switch kind {
	case "submit", "result", "events":
	default:
		return GroupRef{}, false
	}
	return groupTokens(rest)
}

// groupTokens parses "<tenant>.<groupId>".
func groupTokens(rest string) (GroupRef, bool) {
	tenant, id, ok := strings.Cut(rest, ".")
	if !ok {
		return GroupRef{}, false
	}
	g := GroupRef{Tenant: tenant, ID: id}
	if g.Validate() != nil {
		return GroupRef{}, false
	}
	return g, true
}

// TypeFromSubject returns the <type> token of a ready subject of n's prefix, a pack's
// (<prefix>.ready.<type>.<jobs>) included. ok is false for any other subject, and when the token
// is not a valid type (see [ValidateType]).
func (n Names) TypeFromSubject(subject string) (jobType string, ok bool) {
	jobType, _, ok = n.ReadyFromSubject(subject)
	return jobType, ok
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

// BucketTenants returns the name of the JetStream key-value bucket holding the durable record of
// each tenant's settings that are not carried by SUBMIT (its default sending windows and its
// callback secrets): BULKACTION_TENANTS for the default prefix. Redis holds their working copy.
func (n Names) BucketTenants() string { return n.streamName("TENANTS") }

// JobsMsgID returns the Nats-Msg-Id of a jobs submission: "<tenant>:<groupId>:<jobId>" for one
// job, so a producer that publishes the same job again within the stream's duplicate window is
// deduplicated, and "<tenant>:<groupId>:jobs:<n>:<digest of the job IDs>" for more. Job-level
// idempotency does not depend on it: a job is run once per group whatever the message IDs.
func JobsMsgID(g GroupRef, jobs []SubmitJob) string {
	if len(jobs) == 1 {
		return SubmitMsgID(g, jobs[0].JobID)
	}
	return g.Tenant + ":" + g.ID + ":" + batchMsgID("jobs", len(jobs), func(b []byte, i int) []byte {
		return append(b, jobs[i].JobID...)
	})
}

// SubmitMsgID returns the Nats-Msg-Id of a submission of one job, "<tenant>:<groupId>:<jobId>".
func SubmitMsgID(g GroupRef, jobID string) string { return g.Tenant + ":" + g.ID + ":" + jobID }

// SealMsgID returns the Nats-Msg-Id of a seal, "<tenant>:<groupId>:seal:<total>".
func SealMsgID(g GroupRef, total int64) string {
	return g.Tenant + ":" + g.ID + ":seal:" + strconv.FormatInt(total, 10)
}

// CancelMsgID returns the Nats-Msg-Id of a cancel, "<tenant>:<groupId>:cancel:all" (four tokens,
// so no job's ID, which cannot contain a colon, collides with it).
func CancelMsgID(g GroupRef) string { return g.Tenant + ":" + g.ID + ":cancel:all" }

// ReadyMsgID returns the Nats-Msg-Id of a ready job, "<tenant>:<groupId>:<jobId>:<attempt>". The
// attempt keeps a legitimate retry inside the duplicate window from being dropped, while a
// re-publish of the same attempt (an expired lease) is.
func ReadyMsgID(g GroupRef, jobID string, attempt int) string {
	return g.Tenant + ":" + g.ID + ":" + jobID + ":" + strconv.Itoa(attempt)
}

// appendReadyMsgID appends [ReadyMsgID] of a job to b.
func appendReadyMsgID(b []byte, tenant, groupID, jobID string, attempt int) []byte {
	b = append(b, tenant...)
	b = append(b, ':')
	b = append(b, groupID...)
	b = append(b, ':')
	b = append(b, jobID...)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(attempt), 10)
}

// ResultMsgID returns the Nats-Msg-Id of a job result, "<tenant>:<groupId>:<jobId>:<attempt>:result".
func ResultMsgID(g GroupRef, jobID string, attempt int) string {
	return ReadyMsgID(g, jobID, attempt) + ":result"
}

// batchMsgID returns "<kind>:<n>:<hex digest>" of n ids in order, each
// followed by a zero byte. id appends the i-th id to b: the ids are written
// into one buffer, not made strings one by one (a batch's id is computed
// for every READY and RESULT message), and the digest is the same.
func batchMsgID(kind string, n int, id func(b []byte, i int) []byte) string {
	h := sha256.New()
	var b []byte
	for i := range n {
		b = append(id(b[:0], i), 0)
		h.Write(b)
	}
	var sum [sha256.Size]byte
	return kind + ":" + strconv.Itoa(n) + ":" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// Notify is the core-NATS (not JetStream) subject on which services wake
// each other: "<prefix>.notify.<topic>", e.g. topic "work" after new jobs
// were enqueued. Losing a notification only delays work until the next poll.
func (n Names) Notify(topic string) string { return n.prefix() + ".notify." + topic }
