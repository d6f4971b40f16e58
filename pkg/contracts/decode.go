package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// DecodeSubmission decodes and validates the body of a message that arrived on subject, which must
// be a submit subject <prefix>.submit.<groupId> of any prefix. Checks run in this order, the first
// failure deciding the reason of the returned [*ValidationError]:
//
//   - the body is not a JSON object: [ReasonBadJSON];
//   - "v" is not [Version]: [ReasonBadVersion];
//   - "kind" is not job, seal or cancel: [ReasonUnknownKind];
//   - a field has the wrong JSON type, breaks its limits, or belongs to another kind:
//     [ReasonInvalidField];
//   - the payload, in compact form, exceeds lim's payload limit: [ReasonTooLarge];
//   - groupId differs from the subject's <groupId> token, or subject is not a submit subject:
//     [ReasonSubjectMismatch].
//
// Unknown JSON fields are ignored; as with encoding/json, field names match case-insensitively and
// the last of duplicate fields wins. The returned payload is in compact form (nil when absent or
// null). DecodeSubmission never panics.
func DecodeSubmission(subject string, data []byte, lim Limits) (*Submission, error) {
	var s Submission
	late, err := decodeObject(data, &s, "")
	if err != nil {
		return nil, err
	}
	if err := checkHeader(late, s.V); err != nil {
		return nil, err
	}
	if te := fieldTypeError(late, "kind"); te != nil {
		return nil, &ValidationError{Reason: ReasonUnknownKind, Field: "kind", Problem: typeProblem(te),
			Limit: "must be one of job, seal, cancel"}
	}
	if !s.Kind.Valid() {
		return nil, kindError(s.Kind)
	}
	if late != nil {
		return nil, lateError(late)
	}
	if s.Payload, err = canonicalPayload(s.Payload); err != nil {
		return nil, err
	}
	if err := s.validate(lim, true); err != nil {
		return nil, err
	}
	tok, ok := submitGroupToken(subject)
	if !ok {
		return nil, &ValidationError{Reason: ReasonSubjectMismatch, Problem: fmt.Sprintf("subject %q is not a submit subject", clip(subject)),
			Limit: "must be <prefix>.submit.<groupId>"}
	}
	if tok != s.GroupID {
		return nil, &ValidationError{Reason: ReasonSubjectMismatch, Field: "groupId",
			Problem: fmt.Sprintf("%q differs from subject token %q", s.GroupID, clip(tok)),
			Limit:   "must equal the <groupId> token of the subject"}
	}
	return &s, nil
}

// DecodeReadyJob decodes and validates the body of a ready message, with the reasons of
// [DecodeSubmission] except unknown_kind and subject_mismatch. The returned payload is in compact
// form (nil when absent or null). DecodeReadyJob never panics.
func DecodeReadyJob(data []byte, lim Limits) (*ReadyJob, error) {
	return decodeMessage(data, "", func(r *ReadyJob) int { return r.V }, func(r *ReadyJob) (err error) {
		if r.Payload, err = canonicalPayload(r.Payload); err != nil {
			return err
		}
		return r.validate(lim, true)
	})
}

// DecodeJobResult decodes and validates the body of a result message, with reasons bad_json,
// bad_version and invalid_field. DecodeJobResult never panics.
func DecodeJobResult(data []byte) (*JobResult, error) {
	return decodeMessage(data, "", func(r *JobResult) int { return r.V }, (*JobResult).Validate)
}

// DecodeGroupEvent decodes and validates the body of an event message, with reasons bad_json,
// bad_version and invalid_field. DecodeGroupEvent never panics.
func DecodeGroupEvent(data []byte) (*GroupEvent, error) {
	return decodeMessage(data, "at", func(e *GroupEvent) int { return e.V }, (*GroupEvent).Validate)
}

// decodeMessage decodes data into a new T with [decodeObject] (field names the field whose own
// UnmarshalJSON error is reported), then checks in order the version (read by version), the first
// field of the wrong JSON type, and whatever validate checks. It returns the value only when every
// check passes.
func decodeMessage[T any](data []byte, field string, version func(*T) int, validate func(*T) error) (*T, error) {
	v := new(T)
	late, err := decodeObject(data, v, field)
	if err != nil {
		return nil, err
	}
	if err := checkHeader(late, version(v)); err != nil {
		return nil, err
	}
	if late != nil {
		return nil, lateError(late)
	}
	if err := validate(v); err != nil {
		return nil, err
	}
	return v, nil
}

// decodeObject unmarshals a JSON object into v. A field of the wrong JSON type does not stop
// decoding: the first such error is returned as late so that the version and kind can be checked
// first. err is set when the body is not a JSON object, and when a field's own UnmarshalJSON fails
// (which stops decoding); that error is reported under field.
func decodeObject(data []byte, v any, field string) (late *json.UnmarshalTypeError, err error) {
	i := 0
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	if i == len(data) {
		return nil, &ValidationError{Reason: ReasonBadJSON, Problem: "empty body", Limit: "must be a JSON object"}
	}
	if data[i] != '{' {
		if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
			return nil, badJSON(err)
		}
		return nil, &ValidationError{Reason: ReasonBadJSON, Problem: "body is not a JSON object", Limit: "must be a JSON object"}
	}
	err = json.Unmarshal(data, v)
	if err == nil {
		return nil, nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return nil, badJSON(err)
	}
	if errors.As(err, &late) {
		return late, nil
	}
	return nil, invalidField(field, clip(err.Error()), "")
}

// fieldTypeError returns te when it is an error of the named field, or nil.
func fieldTypeError(te *json.UnmarshalTypeError, field string) *json.UnmarshalTypeError {
	if te != nil && te.Field == field {
		return te
	}
	return nil
}

// lateError converts a type error from decodeObject into a *ValidationError.
func lateError(te *json.UnmarshalTypeError) error {
	return invalidField(te.Field, typeProblem(te), "must be a JSON "+jsonTypeName(te.Type))
}

func badJSON(err error) error {
	return &ValidationError{Reason: ReasonBadJSON, Problem: "body is not JSON: " + clip(err.Error())}
}

// checkHeader checks the version, whether it came with a type error or a wrong value.
func checkHeader(late *json.UnmarshalTypeError, v int) error {
	if te := fieldTypeError(late, "v"); te != nil {
		return &ValidationError{Reason: ReasonBadVersion, Field: "v", Problem: typeProblem(te),
			Limit: fmt.Sprintf("must be %d", Version)}
	}
	if v != Version {
		return versionError(v)
	}
	return nil
}

func typeProblem(te *json.UnmarshalTypeError) string {
	return "JSON " + clip(te.Value)
}

func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer within " + t.Kind().String()
	case reflect.Bool:
		return "boolean"
	}
	return "value of Go type " + t.String()
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// submitGroupToken returns the last token of subject when subject has the shape
// <prefix>.submit.<token> with a non-empty prefix.
func submitGroupToken(subject string) (string, bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return "", false
	}
	head := subject[:i]
	j := strings.LastIndexByte(head, '.')
	if j <= 0 || head[j+1:] != "submit" {
		return "", false
	}
	return subject[i+1:], true
}
