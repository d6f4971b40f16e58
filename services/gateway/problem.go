package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ProblemTypePrefix starts the type URI of every problem the gateway
// answers with; the rest is the problem's slug (docs/api.md#problems).
const ProblemTypePrefix = api.ProblemTypePrefix

// Problem is an RFC 9457 problem detail, the body of every error response
// (Content-Type application/problem+json).
type Problem = api.Problem

// FieldError is one offending value of a request.
type FieldError = api.FieldError

// problem slugs and titles.
const (
	slugUnauthorized  = "unauthorized"
	slugNotFound      = "not-found"
	slugMethod        = "method-not-allowed"
	slugInvalidJob    = "invalid-job"
	slugInvalidBody   = "invalid-body"
	slugInvalidParam  = "invalid-parameter"
	slugTooLarge      = "too-large"
	slugMediaType     = "unsupported-media-type"
	slugGroupEnded    = "group-ended"
	slugIdemConflict  = "idempotency-key-reused"
	slugIdemInFlight  = "idempotency-key-in-progress"
	slugIdemInvalid   = "invalid-idempotency-key"
	slugUnavailable   = "unavailable"
	slugNothingFailed = "no-failed-jobs"
	slugGroupExists   = "group-exists"
	slugOverQuota     = "over-quota"
	slugRateLimited   = "rate-limited"
	slugBodyTimeout   = "body-timeout"
	slugInternal      = "internal-error"
	slugCbNotFailed   = "callback-not-failed"
)

var titles = map[string]string{
	slugUnauthorized:  "Missing or unknown API key",
	slugNotFound:      "Not found",
	slugMethod:        "Method not allowed",
	slugInvalidJob:    "Invalid job",
	slugInvalidBody:   "Invalid request body",
	slugInvalidParam:  "Invalid parameter",
	slugTooLarge:      "Too large",
	slugMediaType:     "Unsupported media type",
	slugGroupEnded:    "Group has ended",
	slugIdemConflict:  "Idempotency-Key reused with another request",
	slugIdemInFlight:  "A request with this Idempotency-Key is in progress",
	slugIdemInvalid:   "Invalid Idempotency-Key",
	slugUnavailable:   "Service unavailable",
	slugNothingFailed: "No failed jobs",
	slugGroupExists:   "Group exists",
	slugOverQuota:     "Tenant quota exceeded",
	slugRateLimited:   "Tenant limit exceeded",
	slugBodyTimeout:   "Request body timed out",
	slugInternal:      "Internal error",
	slugCbNotFailed:   "Callback has not failed",
}

// writeProblem answers with a problem+json body.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, slug, detail string, errs ...FieldError) {
	p := Problem{Type: ProblemTypePrefix + slug, Title: titles[slug], Status: status, Detail: detail, Errors: errs}
	if r != nil {
		p.Instance = r.URL.Path
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bulkaction"`)
	}
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fieldError turns a contract validation error into a FieldError; other
// errors become a FieldError with the error text.
func fieldError(err error) FieldError {
	var ve *contracts.ValidationError
	if errors.As(err, &ve) {
		return FieldError{Field: ve.Field, Detail: ve.Problem, Limit: ve.Limit}
	}
	return FieldError{Detail: err.Error()}
}

// paramError is a FieldError about a query parameter.
func paramError(name, value, want string) FieldError {
	return FieldError{Field: name, Detail: "bad value " + strconv.Quote(value), Limit: want}
}

// writeJSON answers with a JSON body. The body is valid UTF-8 whatever v
// holds: encoding/json replaces invalid UTF-8 in strings but copies a
// json.RawMessage (a job's payload) as it is, so a payload stored before
// the gateway refused invalid UTF-8 has each run of invalid bytes
// replaced with U+FFFD (they can only be inside JSON strings, so the body
// stays JSON).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := encodeJSON(v)
	if err != nil {
		writeProblem(w, nil, http.StatusInternalServerError, slugInternal, "internal error")
		return
	}
	writeJSONBody(w, status, b)
}

// encodeJSON is writeJSON's body: v as JSON, valid UTF-8, ending in a
// newline.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return append(b, '\n'), nil
}

// writeJSONBody answers with a body of encodeJSON.
func writeJSONBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// sendNow flushes an answer written whole (with its Content-Length) to the
// client, so that what the handler still does after it (giving back its
// tenant's slot, charging its rates) does not delay it. Nothing is sent
// for a request not answered yet, nor for an answer kept for an
// Idempotency-Key (it is sent when the handler returns).
func sendNow(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok && sw.code != 0 {
		_ = http.NewResponseController(w).Flush()
	}
}

// decodeBody decodes body, a JSON object of the given fields, into v
// strictly: it refuses (with a FieldError naming the field) an unknown
// field, a field spelt in another case or given twice, invalid UTF-8, a
// field of the wrong type and anything after the object.
func decodeBody(body []byte, v any, fields ...string) *FieldError {
	if err := contracts.CheckObject(body, fields...); err != nil {
		fe := fieldError(err)
		return &fe
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "value of another type"
		switch k := te.Type.Kind(); {
		case k == reflect.String:
			want = "string"
		case k >= reflect.Int && k <= reflect.Uint64:
			want = "integer"
		}
		return &FieldError{Field: te.Field, Detail: "JSON " + te.Value, Limit: "a JSON " + want}
	}
	return &FieldError{Detail: err.Error(), Limit: "a JSON object of " + strings.Join(fields, ", ")}
}
