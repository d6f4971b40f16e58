package apiclient

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProblemTypePrefix starts the type URI of every problem the gateway
// answers with; the rest is the problem's slug.
const ProblemTypePrefix = "urn:bulkaction:problem:"

// Problem slugs the client acts on or callers may test with [IsProblem].
const (
	SlugUnauthorized     = "unauthorized"
	SlugNotFound         = "not-found"
	SlugInvalidJob       = "invalid-job"
	SlugInvalidBody      = "invalid-body"
	SlugInvalidParameter = "invalid-parameter"
	SlugGroupEnded       = "group-ended"
	SlugIdemInProgress   = "idempotency-key-in-progress"
	SlugUnavailable      = "unavailable"
	SlugNoFailedJobs     = "no-failed-jobs"
	SlugOverQuota        = "over-quota"
)

// Problem is an error answer of the API: an RFC 9457 problem detail
// (application/problem+json), or, for an answer that is not one (a proxy's
// error page), a Problem with only Status and Detail set.
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
	// Errors name the offending fields, lines or items.
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter is the answer's Retry-After (0 = none).
	RetryAfter time.Duration `json:"-"`
}

// FieldError is one offending value of a request.
type FieldError struct {
	// Line is the 1-based line of an NDJSON body (0 = not a line).
	Line int `json:"line,omitempty"`
	// Index is the 0-based position of the job in the body, when the error
	// is about one job.
	Index *int `json:"index,omitempty"`
	// Field is the offending field or parameter, "" for the whole item.
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

// Error is "<status> <title>: <detail>" and the field errors, one per
// line.
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

// IsProblem reports whether err is (or wraps) a *Problem with the slug.
func IsProblem(err error, slug string) bool {
	var p *Problem
	return errors.As(err, &p) && p.Slug() == slug
}

// IsNotFound reports whether err is a 404 answer (an unknown group, or
// one of another tenant).
func IsNotFound(err error) bool {
	var p *Problem
	return errors.As(err, &p) && p.Status == 404
}
