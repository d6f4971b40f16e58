package api

import (
	"fmt"
	"strings"
	"time"
)

// ProblemTypePrefix starts the type URI of every problem the gateway
// answers with; the rest is the problem's slug (docs/api.md#problems).
const ProblemTypePrefix = "urn:bulkaction:problem:"

// Problem is an RFC 9457 problem detail, the body of every error answer of
// the API (Content-Type application/problem+json). A client may also make
// one, with only Status and Detail, for an answer that is not one (a
// proxy's error page).
type Problem struct {
	// Type is ProblemTypePrefix and a slug such as "invalid-job".
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// Errors name the offending fields, lines or items, when there are.
	Errors []FieldError `json:"errors,omitempty"`
	// Refused, on the 404 of a group that does not exist, is what the
	// pipeline refused of the submissions that would have created it.
	Refused *Refusals `json:"refused,omitempty"`
	// RetryAfter is the answer's Retry-After header, for clients (0 =
	// none); not part of the body.
	RetryAfter time.Duration `json:"-"`
}

// FieldError is one offending value of a request.
type FieldError struct {
	// Line is the 1-based line of an NDJSON body (0 = not a line).
	Line int `json:"line,omitempty"`
	// Index is the 0-based position of the job in the body (array element
	// or NDJSON record), when the error is about one job.
	Index *int `json:"index,omitempty"`
	// Field is the JSON name of the offending field or parameter ("type",
	// "payload", "group.maxInFlight", "total"…), "" for the whole item.
	Field string `json:"field,omitempty"`
	// Detail says what is wrong.
	Detail string `json:"detail"`
	// Limit states the rule that was broken, when there is one.
	Limit string `json:"limit,omitempty"`
}

// String formats the error as "line 3: field type: detail (limit)".
func (f FieldError) String() string {
	var parts []string
	if f.Line > 0 {
		parts = append(parts, fmt.Sprintf("line %d", f.Line))
	} else if f.Index != nil {
		parts = append(parts, fmt.Sprintf("jobs[%d]", *f.Index))
	}
	if f.Field != "" {
		parts = append(parts, "field "+f.Field)
	}
	s := f.Detail
	if f.Limit != "" {
		s += " (" + f.Limit + ")"
	}
	return strings.Join(append(parts, s), ": ")
}

// Slug is the last part of Type ("" when the answer was not a problem
// document).
func (p *Problem) Slug() string { return strings.TrimPrefix(p.Type, ProblemTypePrefix) }

// Error is "<status> <title>: <detail>" and the field errors, one per line.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", p.Status)
	if p.Title != "" {
		b.WriteString(" " + p.Title)
	}
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, f := range p.Errors {
		b.WriteString("\n  " + f.String())
	}
	return b.String()
}
