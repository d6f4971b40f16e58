package contracts

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// utf8Limit is the rule an invalid UTF-8 byte breaks.
const utf8Limit = "JSON text must be valid UTF-8 (RFC 8259 §8.1)"

// CheckUTF8 returns a [*ValidationError] (reason invalid_field) when data holds a byte sequence
// that is not valid UTF-8, naming where it is: field, followed by the path of the string inside
// data when data is JSON ("payload.to", "payload.items[2]"), and the byte's offset in data.
// encoding/json takes such bytes: it turns them into U+FFFD when it decodes a string and keeps
// them in a json.RawMessage, which then reaches other readers as JSON they reject.
func CheckUTF8(field string, data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	off := invalidUTF8At(data)
	path := field
	if p, ok := jsonPathAt(data, off); ok {
		path = joinPath(field, p)
	}
	return invalidField(path, fmt.Sprintf("invalid UTF-8 byte 0x%02x at byte %d", data[off], off), utf8Limit)
}

// CheckObject checks data, a JSON object about to be decoded into a struct whose JSON field names
// are fields, for what encoding/json lets through: every key must be one of fields spelt exactly
// (encoding/json also takes "JobID" or "jobid" for "jobId") and appear once (encoding/json keeps
// the last), and data must be valid UTF-8 ([CheckUTF8]). It returns a [*ValidationError] (reason
// invalid_field) naming the key or the string at fault, or nil; it returns nil too for data that
// is not a JSON object, which the decoder then reports.
func CheckObject(data []byte, fields ...string) error {
	if err := CheckUTF8("", data); err != nil {
		return err
	}
	if !json.Valid(data) {
		return nil
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil
	}
	seen := make([]bool, len(fields))
	i = skipSpace(data, i+1)
	for i < len(data) && data[i] == '"' {
		end := stringEnd(data, i)
		key := unquote(data[i:end])
		k := -1
		for n, f := range fields {
			if f == key {
				k = n
				break
			}
		}
		switch {
		case k >= 0 && seen[k]:
			return invalidField(key, "appears twice in the object", "each field at most once")
		case k >= 0:
			seen[k] = true
		default:
			limit := "fields: " + strings.Join(fields, ", ")
			for _, f := range fields {
				if equalFoldASCII(f, key) {
					return invalidField(clip(key), "unknown field: field names are case-sensitive, did you mean "+strconv.Quote(f)+"?", limit)
				}
			}
			return invalidField(clip(key), "unknown field", limit)
		}
		i = skipSpace(data, end) // at ':'
		i = skipSpace(data, i+1) // at the value
		i = skipSpace(data, valueEnd(data, i))
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return nil
}

// invalidUTF8At returns the offset of the first byte of data that does not start a valid UTF-8
// sequence.
func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		if data[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(data)
}

// jsonPathAt returns the path, inside the JSON value data, of the string holding offset off: ""
// for the value itself, "to", "items[2]", "[0].name". A string that is an object's key is named
// by the key's object. ok is false when data is not valid JSON (apart from its UTF-8).
func jsonPathAt(data []byte, off int) (path string, ok bool) {
	if !json.Valid(data) {
		return "", false
	}
	var walk func(i int, path string) (end int, found string, hit bool)
	walk = func(i int, path string) (int, string, bool) {
		i = skipSpace(data, i)
		switch data[i] {
		case '{':
			i = skipSpace(data, i+1)
			for data[i] == '"' {
				kend := stringEnd(data, i)
				if off < kend {
					return kend, path, true
				}
				key := unquote(data[i:kend])
				i = skipSpace(data, kend)
				end, found, hit := walk(i+1, joinPath(path, key))
				if hit {
					return end, found, true
				}
				i = skipSpace(data, end)
				if data[i] == ',' {
					i = skipSpace(data, i+1)
				}
			}
			return i + 1, "", false
		case '[':
			i = skipSpace(data, i+1)
			for n := 0; data[i] != ']'; n++ {
				end, found, hit := walk(i, path+"["+strconv.Itoa(n)+"]")
				if hit {
					return end, found, true
				}
				i = skipSpace(data, end)
				if data[i] == ',' {
					i = skipSpace(data, i+1)
				}
			}
			return i + 1, "", false
		default:
			end := valueEnd(data, i)
			return end, path, off < end
		}
	}
	_, found, hit := walk(0, "")
	return found, hit
}

// joinPath appends a key to a field path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the JSON string starting at b[i] (valid JSON).
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd returns the index after the JSON value starting at b[i] (valid JSON).
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				if depth < 0 {
					return i // the end of a literal or number at the end of its container
				}
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// unquote returns the text of a JSON string literal (valid JSON), decoding its escapes.
func unquote(lit []byte) string {
	for _, c := range lit {
		if c == '\\' {
			var s string
			_ = json.Unmarshal(lit, &s)
			return s
		}
	}
	return string(lit[1 : len(lit)-1])
}

// equalFoldASCII reports whether a and b are equal under ASCII case folding, as encoding/json
// matches the field names of this package.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
