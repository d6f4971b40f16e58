package gateway

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// parseJobFast decodes the common form of a job object without
// reflection: keys jobId, type, destination and payload (each at most once, spelt
// exactly, in any order), strings without escapes, valid UTF-8 throughout,
// and any valid JSON payload. It reports ok false for anything else, which
// the caller then decodes with decodeJobSlow to get the precise error or
// the rarer forms right; on what it takes, it gives the job decodeJobSlow
// gives (FuzzDecodeJob). The payload is a sub-slice of data.
func parseJobFast(data []byte) (j contracts.SubmitJob, ok bool) {
	if !utf8.Valid(data) {
		return j, false
	}
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return j, false
	}
	i = skipWS(data, i+1)
	var seen [4]bool // jobId, type, payload, destination
	for {
		if i >= len(data) {
			return j, false
		}
		if data[i] == '}' && !seen[0] && !seen[1] && !seen[2] && !seen[3] {
			// the empty object: let decodeJob say what is missing
			return j, false
		}
		key, next, ok := plainString(data, i)
		if !ok {
			return j, false
		}
		i = skipWS(data, next)
		if i >= len(data) || data[i] != ':' {
			return j, false
		}
		i = skipWS(data, i+1)
		switch string(key) {
		case "jobId", "type", "destination":
			s, next, ok := plainString(data, i)
			if !ok {
				return j, false
			}
			k := 0
			switch key[0] {
			case 't':
				k = 1
				j.Type = string(s)
			case 'd':
				k = 3
				j.Destination = string(s)
			default:
				j.JobID = string(s)
			}
			if seen[k] {
				return j, false
			}
			seen[k] = true
			i = next
		case "payload":
			end, ok := valueEnd(data, i)
			if !ok || seen[2] {
				return j, false
			}
			seen[2] = true
			j.Payload = data[i:end]
			i = end
		default:
			return j, false
		}
		i = skipWS(data, i)
		if i >= len(data) {
			return j, false
		}
		switch data[i] {
		case ',':
			i = skipWS(data, i+1)
		case '}':
			if skipWS(data, i+1) != len(data) {
				return j, false
			}
			if seen[2] && !json.Valid(j.Payload) {
				return j, false
			}
			return j, true
		default:
			return j, false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at b[i] without escapes or control
// characters, returning its contents and the index after it.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	end := bytes.IndexByte(b[i+1:], '"')
	if end < 0 {
		return nil, 0, false
	}
	s = b[i+1 : i+1+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return nil, 0, false
		}
	}
	return s, i + 2 + end, true
}

// valueEnd returns the index after the JSON value starting at b[i]: it
// matches brackets and skips strings; whether the value is valid JSON is
// checked afterwards with json.Valid.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			i++
			for ; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return 0, false
			}
			if depth == 0 {
				return i + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return 0, false
			}
			if depth == 0 {
				return i + 1, true
			}
		case ',':
			if depth == 0 {
				return i, true
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i, true
			}
		default:
			// a literal or a number: runs to a delimiter
		}
	}
	if depth == 0 {
		return i, true
	}
	return 0, false
}
