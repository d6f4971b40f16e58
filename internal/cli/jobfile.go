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

// JobSpec is what every job of a file shares. The zero value is not valid:
// Group and Type are required.
type JobSpec struct {
	// Group is the group (tenant and id) the jobs belong to.
	Group contracts.GroupRef
	// Type is the job type of every job.
	Type string
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

// ReadJobs reads a JSONL job file completely and validates every line
// before returning: each non-blank line is either a job's payload (any
// JSON value), or an object whose only keys are "jobId" and/or "payload".
// A job's id is its "jobId", else its line number. Lines are checked
// against the submission contract (ids, payload size within spec.Limits)
// and for repeated ids; blank lines are skipped.
//
// If any line is bad, ReadJobs returns a *FileError listing them all and
// no jobs. An error reading r is returned as is.
func ReadJobs(r io.Reader, spec JobSpec) ([]FileJob, error) {
	br := bufio.NewReader(r)
	var (
		jobs []FileJob
		bad  []*LineError
		seen = map[string]int{}
	)
	for n := 1; ; n++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if line := bytes.TrimSpace(raw); len(line) > 0 {
			j, lerr := parseLine(n, line, spec)
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
	if len(bad) > 0 {
		return nil, &FileError{Lines: bad}
	}
	return jobs, nil
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
	sub := contracts.Submission{
		V: contracts.Version, Kind: contracts.KindJobs, Tenant: spec.Group.Tenant, GroupID: spec.Group.ID,
		Jobs: []contracts.SubmitJob{{JobID: j.ID, Type: j.Type, Payload: j.Payload}},
	}
	if spec.Settings != (contracts.GroupSettings{}) {
		sub.Group = &spec.Settings
	}
	if err := sub.Validate(spec.Limits); err != nil {
		var ve *contracts.ValidationError
		if errors.As(err, &ve) {
			p := ve.Problem
			if ve.Limit != "" {
				p += " (" + ve.Limit + ")"
			}
			return j, &LineError{Line: n, Field: strings.TrimPrefix(ve.Field, "jobs[0]."), Problem: p}
		}
		return j, &LineError{Line: n, Problem: err.Error()}
	}
	return j, nil
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
