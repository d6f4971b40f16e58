package cli_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

var spec = cli.JobSpec{Group: contracts.Group("acme", "g"), Type: "sleep",
	Settings: contracts.GroupSettings{Priority: contracts.PriorityHigh, BasePriority: 7, MaxInFlight: 5}}

func TestReadJobsForms(t *testing.T) {
	in := strings.Join([]string{
		`{"ms":5}`,                               // 1: payload, id "1"
		``,                                       // 2: blank, skipped
		`{"jobId":"a","payload":{"ms":1}}`,       // 3: envelope
		`{"payload":[1,2]}`,                      // 4: envelope without id: id "4"
		`{"jobId":"b"}`,                          // 5: envelope without payload
		`{"jobId":"c","payload":1,"extra":true}`, // 6: other keys: the whole line is the payload
		`  "text"  `,                             // 7: any JSON value, trimmed
		`{}`,                                     // 8: empty object is a payload
	}, "\r\n")
	jobs, err := cli.ReadJobs(strings.NewReader(in), spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line    int
		id      string
		payload string
	}{
		{1, "1", `{"ms":5}`}, {3, "a", `{"ms":1}`}, {4, "4", `[1,2]`}, {5, "b", ``},
		{6, "6", `{"jobId":"c","payload":1,"extra":true}`}, {7, "7", `"text"`}, {8, "8", `{}`},
	}
	if len(jobs) != len(want) {
		t.Fatalf("got %d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	for i, w := range want {
		j := jobs[i]
		if j.Line != w.line || j.ID != w.id || string(j.Payload) != w.payload {
			t.Errorf("job %d = line %d id %q payload %q, want line %d id %q payload %q", i, j.Line, j.ID, j.Payload, w.line, w.id, w.payload)
		}
		if j.Type != "sleep" {
			t.Errorf("job %d: spec not applied: %+v", i, j.Job)
		}
	}
}

func TestReadJobsReportsEveryBadLine(t *testing.T) {
	big := `{"x":"` + strings.Repeat("a", 100) + `"}`
	in := strings.Join([]string{
		`{"ms":1}`,                   // 1 ok
		`{"ms":`,                     // 2 bad JSON
		`{"jobId":"has space"}`,      // 3 bad id
		`{"jobId":5,"payload":{}}`,   // 4 id not a string
		`{"jobId":"1","payload":{}}`, // 5 repeats line 1's id
		big,                          // 6 too large for the limit below
		`{"ms":2}`,                   // 7 ok
	}, "\n")
	s := spec
	s.Limits = contracts.Limits{MaxPayloadBytes: 64}
	jobs, err := cli.ReadJobs(strings.NewReader(in), s)
	if jobs != nil {
		t.Errorf("jobs = %d, want none when a line is bad", len(jobs))
	}
	var fe *cli.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want *FileError", err)
	}
	want := []struct {
		line  int
		field string
		has   string
	}{
		{2, "payload", "not valid JSON"},
		{3, "jobId", `contains ' '`},
		{4, "jobId", "must be a string, got 5"},
		{5, "jobId", `"1" repeats the job id of line 1`},
		{6, "payload", "limit 64"},
	}
	if len(fe.Lines) != len(want) {
		t.Fatalf("got %d bad lines, want %d:\n%v", len(fe.Lines), len(want), err)
	}
	for i, w := range want {
		l := fe.Lines[i]
		if l.Line != w.line || l.Field != w.field || !strings.Contains(l.Problem, w.has) {
			t.Errorf("bad line %d = %+v, want line %d field %s containing %q", i, l, w.line, w.field, w.has)
		}
		if msg := l.Error(); !strings.HasPrefix(msg, "line ") || !strings.Contains(msg, "field "+w.field+": ") {
			t.Errorf("message %q is not `line N: field F: problem`", msg)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "5 bad line(s); nothing was submitted") {
		t.Errorf("error %q does not say nothing was submitted", msg)
	}
}

func TestReadJobsLongLine(t *testing.T) {
	// Lines longer than bufio.Scanner's default token still read.
	payload := `{"x":"` + strings.Repeat("b", 200<<10) + `"}`
	jobs, err := cli.ReadJobs(strings.NewReader(payload+"\n"+`{"ms":1}`), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || len(jobs[0].Payload) != len(payload) || jobs[1].ID != "2" {
		t.Fatalf("got %d jobs", len(jobs))
	}
}

// The spec's group and settings are checked with every line: a bad tenant
// or an out-of-range setting is reported (on each line), not published.
func TestReadJobsChecksGroupAndSettings(t *testing.T) {
	for _, c := range []struct {
		name  string
		spec  cli.JobSpec
		field string
	}{
		{"tenant", cli.JobSpec{Group: contracts.Group("a.b", "g"), Type: "sleep"}, "tenant"},
		{"group", cli.JobSpec{Group: contracts.Group("acme", "g:1"), Type: "sleep"}, "groupId"},
		{"maxInFlight", cli.JobSpec{Group: contracts.Group("acme", "g"), Type: "sleep",
			Settings: contracts.GroupSettings{MaxInFlight: -1}}, "group.maxInFlight"},
	} {
		_, err := cli.ReadJobs(strings.NewReader(`{"ms":1}`+"\n"+`{"ms":2}`), c.spec)
		var fe *cli.FileError
		if !errors.As(err, &fe) || len(fe.Lines) != 2 {
			t.Errorf("%s: err = %v, want both lines reported", c.name, err)
			continue
		}
		if fe.Lines[0].Field != c.field {
			t.Errorf("%s: field %q, want %q (%v)", c.name, fe.Lines[0].Field, c.field, err)
		}
	}
}

// A file in the API's own job format is read as jobs, not as payloads; the
// first line decides, and --format can say it instead.
func TestReadJobFileFormats(t *testing.T) {
	api := `{"jobId":"c1","type":"sleep","payload":{"ms":5}}` + "\n" + `{"jobId":"c2","type":"http"}` + "\n"
	jobs, f, err := cli.ReadJobFile(strings.NewReader(api), cli.JobSpec{Group: contracts.Group("acme", "g")})
	if err != nil || f != cli.FormatAPI || len(jobs) != 2 {
		t.Fatalf("api file: %v %v %+v", err, f, jobs)
	}
	if jobs[0].ID != "c1" || string(jobs[0].Payload) != `{"ms":5}` || jobs[0].Type != "sleep" || jobs[1].Type != "http" || jobs[1].Payload != nil {
		t.Errorf("api jobs: %+v", jobs)
	}
	// A payload line after an API first line is refused, naming its line.
	_, _, err = cli.ReadJobFile(strings.NewReader(api+`{"ms":1}`+"\n"), cli.JobSpec{Group: contracts.Group("acme", "g"), Type: "sleep"})
	var fe *cli.FileError
	if !errors.As(err, &fe) || len(fe.Lines) != 1 || fe.Lines[0].Line != 3 {
		t.Errorf("mixed file: %v", err)
	}
	// The same file read as payloads, on request.
	jobs, f, err = cli.ReadJobFile(strings.NewReader(api), cli.JobSpec{Group: contracts.Group("acme", "g"), Type: "sleep", Format: cli.FormatPayload})
	if err != nil || f != cli.FormatPayload || jobs[0].ID != "1" || !strings.Contains(string(jobs[0].Payload), `"jobId":"c1"`) {
		t.Errorf("--format payload: %v %v %+v", err, f, jobs)
	}
	// Payload lines need a type.
	if _, _, err := cli.ReadJobFile(strings.NewReader(`{"ms":1}`), cli.JobSpec{Group: contracts.Group("acme", "g")}); !errors.Is(err, cli.ErrNoType) {
		t.Errorf("payloads without a type: %v", err)
	}
	if _, err := cli.ParseFormat("xml"); err == nil {
		t.Error("--format xml accepted")
	}
}
