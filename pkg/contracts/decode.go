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
// be a submit subject <prefix>.submit.<tenant>.<groupId> of any prefix. Checks run in this order,
// the first failure deciding the reason of the returned [*ValidationError]:
//
//   - the body is not a JSON object: [ReasonBadJSON];
//   - "v" is not [Version]: [ReasonBadVersion];
//   - "kind" is not jobs, seal, cancel, pause or resume: [ReasonUnknownKind];
//   - a field has the wrong JSON type: [ReasonInvalidField];
//   - subject is not a submit subject, or the body names a tenant or groupId other than the
//     subject's tokens: [ReasonSubjectMismatch];
//   - a field breaks its limits or belongs to another kind: [ReasonInvalidField]; a payload, in
//     compact form, exceeds lim's payload limit: [ReasonTooLarge]. The first offending job of a
//     jobs submission is named by its index ("jobs[3].type").
//
// The subject is authoritative: the returned submission's Tenant and GroupID are the subject's.
// Unknown JSON fields are ignored; as with encoding/json, field names match case-insensitively and
// the last of duplicate fields wins. Returned payloads are in compact form (nil when absent or
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
			Limit: kindLimit}
	}
	if !s.Kind.Valid() {
		return nil, kindError(s.Kind)
	}
	if late != nil {
		return nil, lateError(data, &s, late)
	}
	g, ok := groupSubject(subject, "submit")
	if !ok {
		return nil, &ValidationError{Reason: ReasonSubjectMismatch, Problem: fmt.Sprintf("subject %q is not a submit subject", clip(subject)),
			Limit: "must be <prefix>.submit.<tenant>.<groupId>"}
	}
	if err := adopt(&s.Tenant, &s.GroupID, g, ""); err != nil {
		return nil, err
	}
	for i := range s.Jobs {
		if s.Jobs[i].Payload, err = canonicalPayload(s.Jobs[i].Payload); err != nil {
			return nil, prefixed(itemField("jobs", i), err)
		}
	}
	if err := s.validate(lim, true); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeReadyBatch decodes and validates the body of a ready message, with reasons bad_json,
// bad_version, invalid_field and too_large. Returned payloads are in compact form (nil when absent
// or null). DecodeReadyBatch never panics.
func DecodeReadyBatch(data []byte, lim Limits) (*ReadyBatch, error) {
	return decodeMessage(data, "", func(b *ReadyBatch) int { return b.V }, func(b *ReadyBatch) (err error) {
		if err := checkBatch("jobs", len(b.Jobs)); err != nil {
			return err
		}
		for i := range b.Jobs {
			if b.Jobs[i].Payload, err = canonicalPayload(b.Jobs[i].Payload); err != nil {
				return prefixed(itemField("jobs", i), err)
			}
		}
		return b.validate(lim, true)
	})
}

// DecodeResultBatch decodes and validates the body of a message that arrived on subject, which must
// be a result subject <prefix>.result.<tenant>.<groupId> of any prefix, with reasons bad_json,
// bad_version, invalid_field and subject_mismatch (a result naming a tenant or groupId other than
// the subject's). The returned results carry the subject's tenant and groupId. DecodeResultBatch
// never panics.
func DecodeResultBatch(subject string, data []byte) (*ResultBatch, error) {
	return decodeMessage(data, "", func(b *ResultBatch) int { return b.V }, func(b *ResultBatch) error {
		g, ok := groupSubject(subject, "result")
		if !ok {
			return &ValidationError{Reason: ReasonSubjectMismatch, Problem: fmt.Sprintf("subject %q is not a result subject", clip(subject)),
				Limit: "must be <prefix>.result.<tenant>.<groupId>"}
		}
		if len(b.Results) > MaxBatch {
			return checkBatch("results", len(b.Results))
		}
		for i := range b.Results {
			r := &b.Results[i]
			if err := adopt(&r.Tenant, &r.GroupID, g, itemField("results", i)); err != nil {
				return err
			}
		}
		return b.Validate()
	})
}

// DecodeGroupEvent decodes and validates the body of an event message, with reasons bad_json,
// bad_version and invalid_field. DecodeGroupEvent never panics.
func DecodeGroupEvent(data []byte) (*GroupEvent, error) {
	return decodeMessage(data, "at", func(e *GroupEvent) int { return e.V }, func(e *GroupEvent) error {
		if err := e.Validate(); err != nil {
			return err
		}
		// time.Time reads offsets up to ±99:59 but writes only RFC 3339's (to ±23:59): an event
		// accepted here must encode again.
		if _, err := e.At.MarshalText(); err != nil {
			return invalidField("at", clip(err.Error()), "must be an RFC 3339 date-time")
		}
		return nil
	})
}

// adopt fills tenant and groupID from the subject's group g, or checks that the values a body gave
// equal it (reason subject_mismatch; head prefixes the field name).
func adopt(tenant, groupID *string, g GroupRef, head string) error {
	for _, f := range []struct {
		name       string
		body, subj string
		dst        *string
	}{{"tenant", *tenant, g.Tenant, tenant}, {"groupId", *groupID, g.ID, groupID}} {
		if f.body == "" {
			*f.dst = f.subj
			continue
		}
		if f.body != f.subj {
			return &ValidationError{Reason: ReasonSubjectMismatch, Field: head + f.name,
				Problem: fmt.Sprintf("%q differs from subject token %q", clip(f.body), f.subj),
				Limit:   "must equal the <" + f.name + "> token of the subject, or be left out"}
		}
	}
	return nil
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
		return nil, lateError(data, v, late)
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

// lateError converts a type error from decodeObject, made decoding data into v, into a
// *ValidationError. encoding/json names a field of an array's item without the item's index
// ("jobs.type"); the error names it ("jobs[3].type").
func lateError(data []byte, v any, te *json.UnmarshalTypeError) error {
	field := te.Field
	if array, _, ok := strings.Cut(field, "."); ok {
		if f, ok := itemTypeField(data, v, array); ok {
			field = f
		}
	}
	return invalidField(field, typeProblem(te), "must be a JSON "+jsonTypeName(te.Type))
}

// itemTypeField finds the first item of the array field named array, of the struct v points to,
// that does not decode from data for a field of the wrong JSON type, and returns that field as
// "<array>[i].<field>".
func itemTypeField(data []byte, v any, array string) (string, bool) {
	t := reflect.TypeOf(v).Elem()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != array || f.Type.Kind() != reflect.Slice {
			continue
		}
		// The same field name and tag, so that encoding/json picks the same key.
		shadow := reflect.New(reflect.StructOf([]reflect.StructField{{Name: f.Name,
			Type: reflect.TypeFor[[]json.RawMessage](), Tag: f.Tag}}))
		if json.Unmarshal(data, shadow.Interface()) != nil {
			return "", false
		}
		for k, item := range shadow.Elem().Field(0).Interface().([]json.RawMessage) {
			var te *json.UnmarshalTypeError
			if err := json.Unmarshal(item, reflect.New(f.Type.Elem()).Interface()); errors.As(err, &te) {
				return itemField(array, k) + te.Field, true
			}
		}
	}
	return "", false
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
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
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

// groupSubject parses a subject of the shape <prefix>.<kind>.<tenant>.<groupId> with a non-empty
// prefix and valid tokens.
func groupSubject(subject, kind string) (GroupRef, bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return GroupRef{}, false
	}
	j := strings.LastIndexByte(subject[:i], '.')
	if j < 0 {
		return GroupRef{}, false
	}
	k := strings.LastIndexByte(subject[:j], '.')
	if k <= 0 || subject[k+1:j] != kind {
		return GroupRef{}, false
	}
	return groupTokens(subject[j+1:])
}
