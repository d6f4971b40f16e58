package redisq

import (
	"reflect"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// A lease entry (lib.lua lease_entry) reads back whole, whatever its
// strings hold, and a malformed one is refused rather than misread.
func TestParseLease(t *testing.T) {
	for _, c := range []struct {
		entry string
		want  LeasedJob
	}{
		{"1 t:g:j1 noop   {}", LeasedJob{Group: contracts.GroupRef{Tenant: "t", ID: "g"}, ID: "j1", Type: "noop", Attempt: 1, Payload: []byte("{}"),
			member: "t:g:j1"}},
		// no type, no payload
		{"12 t:g:j1    ", LeasedJob{Group: contracts.GroupRef{Tenant: "t", ID: "g"}, ID: "j1", Attempt: 12, Payload: []byte{}, member: "t:g:j1"}},
		// a payload of spaces, digits and colons, a trace and a destination
		{"3 ab:cd:x http 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 api.com  12 3:4 {\"é\": 1}",
			LeasedJob{Group: contracts.GroupRef{Tenant: "ab", ID: "cd"}, ID: "x", Type: "http", Attempt: 3,
				Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Destination: "api.com",
				Payload: []byte(" 12 3:4 {\"é\": 1}"), member: "ab:cd:x"}},
	} {
		got, ok := parseLease(c.entry)
		if !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v %v, want %+v", c.entry, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "1 t:g:j1 noop  {}", "x t:g:j1 noop   {}", "-1 t:g:j1 noop   {}", "1 :g:j1 noop   {}",
		"1 t:j1 noop   {}", "1 t:g: noop   {}", "1 :j1 noop   {}", "1 j1 noop   {}"} {
		if j, ok := parseLease(bad); ok {
			t.Errorf("%q read as %+v", bad, j)
		}
	}
	if _, err := parseJobs([]any{"1 t:g:j1 noop   {}", "bad"}); err == nil {
		t.Error("a reply with a malformed entry read")
	}
}

// A leased job is confirmed with the inflight member its lease reply
// carried while that still names its group and id, and with one put
// together when it does not (a job changed, or not read from a reply).
func TestInflightMember(t *testing.T) {
	j, ok := parseLease("1 t:g:j1 noop   {}")
	if !ok {
		t.Fatal("entry not read")
	}
	if m := j.inflightMember(); m != "t:g:j1" {
		t.Errorf("member %q", m)
	}
	for _, change := range []func(*LeasedJob){
		func(j *LeasedJob) { j.ID = "j2" },
		func(j *LeasedJob) { j.ID = "j12" },
		func(j *LeasedJob) { j.Group.ID = "h" },
		func(j *LeasedJob) { j.Group = contracts.GroupRef{Tenant: "t:g", ID: ""} },
		func(j *LeasedJob) { j.Group.Tenant = "u" },
	} {
		c := j
		change(&c)
		if got, want := c.inflightMember(), member(c.Group, c.ID); got != want {
			t.Errorf("%+v: member %q, want %q", c, got, want)
		}
	}
	built := LeasedJob{Group: contracts.GroupRef{Tenant: "t", ID: "g"}, ID: "j1"}
	if m := built.inflightMember(); m != "t:g:j1" {
		t.Errorf("a job not read from a reply: member %q", m)
	}
}
