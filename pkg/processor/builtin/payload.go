package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// PayloadError reports an invalid job payload of a built-in processor. The processors return it
// marked [processor.Permanent]: retrying cannot fix a payload. Find it with errors.As.
//
// The zero value describes a problem with no type and no field.
type PayloadError struct {
	// Type is the job type whose payload is invalid: "sleep" or "http".
	Type string
	// Field is the JSON field at fault, dotted for nested fields ("headers.X-Token"); empty when
	// the problem is the payload as a whole.
	Field string
	// Problem says what is wrong, e.g. "must be between 0 and 1, got 1.5".
	Problem string
}

// Error returns `builtin: <Type> payload: field "<Field>": <Problem>`, without the field part when
// Field is empty.
func (e *PayloadError) Error() string {
	if e.Field == "" {
		return "builtin: " + e.Type + " payload: " + e.Problem
	}
	return fmt.Sprintf("builtin: %s payload: field %q: %s", e.Type, e.Field, e.Problem)
}

// invalid returns a permanent *PayloadError.
func invalid(typ, field, format string, args ...any) error {
	return processor.Permanent(&PayloadError{Type: typ, Field: field, Problem: fmt.Sprintf(format, args...)})
}

// decodeObject decodes a JSON object payload into v and turns decoding errors into permanent
// *PayloadErrors that name the field. strict rejects unknown fields.
func decodeObject(typ string, payload []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return invalid(typ, "", "unexpected data after the JSON object")
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field == "":
		return invalid(typ, "", "must be a JSON object, got %s", te.Value)
	case errors.As(err, &te):
		return invalid(typ, te.Field, "must be %s, got %s", kindName(te.Type), te.Value)
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return invalid(typ, "", "not valid JSON: %v", err)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalid(typ, strings.Trim(name, `"`), "unknown field")
	}
	return invalid(typ, "", "%v", err)
}

// kindName describes the JSON value a Go type accepts.
func kindName(t reflect.Type) string {
	if t == nil {
		return "a valid value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	default:
		return "a " + t.String()
	}
}

// isObject reports whether payload is a JSON object (its first non-space byte is '{').
func isObject(payload []byte) bool {
	p := bytes.TrimLeft(payload, " \t\r\n")
	return len(p) > 0 && p[0] == '{'
}
