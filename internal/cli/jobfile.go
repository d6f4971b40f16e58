package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Format is the form of a job file's lines.
type Format string

// The job file formats.
const (
	// FormatAuto reads the first non-blank line to choose: a JSON object
	// with "jobId" and "type" (and at most "payload" besides) means
	// FormatAPI, anything else FormatPayload.
	FormatAuto Format = "auto"
	// FormatPayload: each line is a job's payload, or an object whose only
	// keys are "jobId" and/or "payload"; JobSpec.Type is every job's type.
	FormatPayload Format = "payload"
	// FormatAPI: each line is a job as the HTTP API takes it,
	// {"jobId","type","payload"}: jobId required, type required unless
	// JobSpec.Type gives it, payload optional.
	FormatAPI Format = "api"
)

// ErrNoType is ReadJobFile's error for a payload file read without
// JobSpec.Type: nothing says the jobs' type.
var ErrNoType = errors.New(`the file's lines are payloads, not jobs of the API's format ({"jobId","type","payload"}), so --type must give the jobs' type`)

// ParseFormat reads a --format value ("" is FormatAuto).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case "":
		return FormatAuto, nil
	case FormatAuto, FormatPayload, FormatAPI:
		return f, nil
	}
	return "", fmt.Errorf("%q: want auto, api or payload", s)
}

// Describe says in words how a file of format f was read.
func (f Format) Describe() string {
	if f == FormatAPI {
		return `in the API's job format (one {"jobId","type","payload"} object per line)`
	}
	return `as one payload per line (id: its "jobId" where given, else the line number)`
}

// JobSpec is what every job of a file shares. The zero value is not valid:
// Group is required, and Type unless every line names its type.
type JobSpec struct {
	// Group is the group (tenant and id) the jobs belong to.
	Group contracts.GroupRef
	// Type is the job type of every job of a payload file, and of the lines
	// of an API-format file that name none.
	Type string
	// Format is the form of the lines ("" = FormatAuto).
	Format Format
	// Settings are the group's settings (priority, base priority,
	// in-flight limit); they apply when the group is created.
	Settings contracts.GroupSettings
	// Limits are the validation limits; the zero value means the contract
	// defaults.
	Limits contracts.Limits
}

// LineError is one bad line of a job file. The zero value describes no
// line.
type LineError struct {
	// Line is the 1-based line number.
	Line int
	// Field is the field at fault (jobId, payload, …); "" for the line as
	// a whole.
	Field string
	// Problem says what is wrong.
	Problem string
}

// Error formats e as "line N: field F: problem".
func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Problem)
	}
	return fmt.Sprintf("line %d: field %s: %s", e.Line, e.Field, e.Problem)
}

// FileError reports every bad line of a job file; nothing of the file was
// published. The zero value lists no lines.
type FileError struct {
	// Lines are the bad lines in file order.
	Lines []*LineError
}

// Error lists every bad line, one per line of text.
func (e *FileError) Error() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d bad line(s); nothing was submitted:", len(e.Lines))
	for _, l := range e.Lines {
		b.WriteString("\n  ")
		b.WriteString(l.Error())
	}
	return b.String()
}

// FileJob is one job read from a file and the line it came from. The zero
// value is an empty job of no line.
type FileJob struct {
	client.Job
	// Line is the job's 1-based line number.
	Line int
}

// ReadJobs is [ReadJobFile] without the format it read.
func ReadJobs(r io.Reader, spec JobSpec) ([]FileJob, error) {
	jobs, _, err := ReadJobFile(r, spec)
	return jobs, err
}

// ReadJobFile reads a JSONL job file completely and validates every line
// before returning, in spec.Format (FormatAuto: the first non-blank line
// decides, and the format read is returned). In FormatPayload each
// non-blank line is either a job's payload (any JSON value), or an object
// whose only keys are "jobId" and/or "payload"; a job's id is its "jobId",
// else its line number. In FormatAPI each line is a {"jobId","type",
// "payload"} object. Lines are checked against the submission contract
// (ids, types, payload size within spec.Limits) and for repeated ids;
// blank lines are skipped.
//
// If any line is bad, ReadJobFile returns a *FileError listing them all
// and no jobs. An error reading r is returned as is.
func ReadJobFile(r io.Reader, spec JobSpec) ([]FileJob, Format, error) {
	br := bufio.NewReader(r)
	var (
		jobs []FileJob
		bad  []*LineError
		seen = map[string]int{}
	)
	format := spec.Format
	if format == "" {
		format = FormatAuto
	}
	for n := 1; ; n++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, format, err
		}
		if line := bytes.TrimSpace(raw); len(line) > 0 {
			if format == FormatAuto {
				format = FormatPayload
				if isAPIJob(line) {
					format = FormatAPI
				}
			}
			if format == FormatPayload && spec.Type == "" {
				return nil, format, ErrNoType
			}
			var j FileJob
			var lerr *LineError
			if format == FormatAPI {
				j, lerr = parseAPILine(n, line, spec)
			} else {
				j, lerr = parseLine(n, line, spec)
			}
			if lerr == nil {
				if first, dup := seen[j.ID]; dup {
					lerr = &LineError{Line: n, Field: "jobId", Problem: fmt.Sprintf("%q repeats the job id of line %d", j.ID, first)}
				} else {
					seen[j.ID] = n
				}
			}
			if lerr != nil {
				bad = append(bad, lerr)
			} else if len(bad) == 0 {
				jobs = append(jobs, j)
			}
		}
		if err != nil { // io.EOF
			break
		}
	}
	if format == FormatAuto {
		format = FormatPayload // no line: nothing to tell
	}
	if len(bad) > 0 {
		return nil, format, &FileError{Lines: bad}
	}
	return jobs, format, nil
}

// apiKeys are the keys of a job in the API's format.
var apiKeys = map[string]bool{"jobId": true, "type": true, "payload": true}

// isAPIJob reports whether line is a job in the API's format: an object
// with "jobId" and "type" and no key but those and "payload".
func isAPIJob(line []byte) bool {
	if line[0] != '{' {
		return false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(line, &obj) != nil {
		return false
	}
	for k := range obj {
		if !apiKeys[k] {
			return false
		}
	}
	_, id := obj["jobId"]
	_, typ := obj["type"]
	return id && typ
}

// parseAPILine reads one non-blank line of an API-format file.
func parseAPILine(n int, line []byte, spec JobSpec) (FileJob, *LineError) {
	j := FileJob{Line: n}
	bad := func(field, problem string) (FileJob, *LineError) {
		return j, &LineError{Line: n, Field: field, Problem: problem}
	}
	var obj map[string]json.RawMessage
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		return bad("", "not valid JSON: "+jsonProblem(err))
	}
	if line[0] != '{' || json.Unmarshal(line, &obj) != nil {
		return bad("", `not a job of the API's format ({"jobId","type","payload"}), which the file's first line has`)
	}
	for k := range obj {
		if !apiKeys[k] {
			return bad(k, `unknown field: a job of the API's format has only "jobId", "type" and "payload"`)
		}
	}
	idRaw, ok := obj["jobId"]
	if !ok {
		return bad("jobId", "missing")
	}
	if err := json.Unmarshal(idRaw, &j.ID); err != nil {
		return bad("jobId", "must be a string, got "+string(idRaw))
	}
	j.Type = spec.Type
	if tRaw, ok := obj["type"]; ok {
		if err := json.Unmarshal(tRaw, &j.Type); err != nil {
			return bad("type", "must be a string, got "+string(tRaw))
		}
	}
	if j.Type == "" {
		return bad("type", "missing (give it on the line, or to every line with --type)")
	}
	j.Payload = obj["payload"]
	return j, validate(n, j, spec)
}

// validate checks a job read from line n against the submission contract.
func validate(n int, j FileJob, spec JobSpec) *LineError {
	sub := contracts.Submission{
		V: contracts.Version, Kind: contracts.KindJobs, Tenant: spec.Group.Tenant, GroupID: spec.Group.ID,
		Jobs: []contracts.SubmitJob{{JobID: j.ID, Type: j.Type, Payload: j.Payload}},
	}
	if !spec.Settings.IsZero() {
		sub.Group = &spec.Settings
	}
	if err := sub.Validate(spec.Limits); err != nil {
		var ve *contracts.ValidationError
		if errors.As(err, &ve) {
			p := ve.Problem
			if ve.Limit != "" {
				p += " (" + ve.Limit + ")"
			}
			return &LineError{Line: n, Field: strings.TrimPrefix(ve.Field, "jobs[0]."), Problem: p}
		}
		return &LineError{Line: n, Problem: err.Error()}
	}
	return nil
}

// parseLine reads one non-blank line.
func parseLine(n int, line []byte, spec JobSpec) (FileJob, *LineError) {
	j := FileJob{Line: n, Job: client.Job{
		ID: strconv.Itoa(n), Type: spec.Type, Payload: line,
	}}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		return j, &LineError{Line: n, Field: "payload", Problem: "not valid JSON: " + jsonProblem(err)}
	}
	if line[0] == '{' {
		var obj map[string]json.RawMessage
		if json.Unmarshal(line, &obj) == nil && isEnvelope(obj) {
			j.Payload = obj["payload"]
			if idRaw, ok := obj["jobId"]; ok {
				if err := json.Unmarshal(idRaw, &j.ID); err != nil {
					return j, &LineError{Line: n, Field: "jobId", Problem: "must be a string, got " + string(idRaw)}
				}
			}
		}
	}
	if j.Type == "" {
		return j, &LineError{Line: n, Field: "type", Problem: "missing: the lines are payloads, so --type gives the jobs' type"}
	}
	return j, validate(n, j, spec)
}

// isEnvelope reports whether a line's object is the {"jobId","payload"}
// form: it has at least one of the two keys and no other.
func isEnvelope(obj map[string]json.RawMessage) bool {
	if len(obj) == 0 {
		return false
	}
	for k := range obj {
		if k != "jobId" && k != "payload" {
			return false
		}
	}
	return true
}

// jsonProblem shortens encoding/json's error text.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	if err == nil {
		return "invalid"
	}
	return err.Error()
}
