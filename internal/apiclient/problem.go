package apiclient

import (
	"errors"

	"github.com/bulkaction/bulkaction/pkg/api"
)

// ProblemTypePrefix starts the type URI of every problem the gateway
// answers with; the rest is the problem's slug.
const ProblemTypePrefix = api.ProblemTypePrefix

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
type Problem = api.Problem

// FieldError is one offending value of a request.
type FieldError = api.FieldError

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
