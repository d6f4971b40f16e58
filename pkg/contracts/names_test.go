package contracts_test

import (
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestNamesSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n      contracts.Names
		prefix string
		stream string
	}{
		{contracts.Names{}, "bulkaction", "BULKACTION"},
		{contracts.Names{Prefix: "bulkaction"}, "bulkaction", "BULKACTION"},
		{contracts.Names{Prefix: "acme.bulk"}, "acme.bulk", "ACME_BULK"},
		{contracts.Names{Prefix: "t-1_X"}, "t-1_X", "T_1_X"},
	}
	for _, tt := range tests {
		p := tt.prefix
		for _, c := range [][2]string{
			{tt.n.Submit("g1"), p + ".submit.g1"},
			{tt.n.SubmitAll(), p + ".submit.>"},
			{tt.n.Ready("email"), p + ".ready.email"},
			{tt.n.ReadyAll(), p + ".ready.>"},
			{tt.n.Result("g1"), p + ".result.g1"},
			{tt.n.ResultAll(), p + ".result.>"},
			{tt.n.Events("g1"), p + ".events.g1"},
			{tt.n.EventsAll(), p + ".events.>"},
			{tt.n.DLQ("bad_json"), p + ".dlq.bad_json"},
			{tt.n.DLQ(""), p + ".dlq.invalid"},
			{tt.n.DLQAll(), p + ".dlq.>"},
			{tt.n.StreamSubmit(), tt.stream + "_SUBMIT"},
			{tt.n.StreamReady(), tt.stream + "_READY"},
			{tt.n.StreamResult(), tt.stream + "_RESULT"},
			{tt.n.StreamEvents(), tt.stream + "_EVENTS"},
			{tt.n.StreamDLQ(), tt.stream + "_DLQ"},
		} {
			if got, want := c[0], c[1]; got != want {
				t.Errorf("prefix %q: got %q, want %q", tt.n.Prefix, got, want)
			}
		}
	}
}

func TestStreamNamesAreValid(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "a.b", "ünï.cødé", "x-y_z.0"} {
		n := contracts.Names{Prefix: prefix}
		for _, s := range []string{n.StreamSubmit(), n.StreamReady(), n.StreamResult(), n.StreamEvents(), n.StreamDLQ()} {
			for i := 0; i < len(s); i++ {
				c := s[i]
				if !(('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || c == '_') {
					t.Errorf("prefix %q: stream %q has byte %q", prefix, s, c)
				}
			}
		}
	}
}

func TestGroupFromSubject(t *testing.T) {
	t.Parallel()
	def := contracts.Names{}
	custom := contracts.Names{Prefix: "acme.bulk"}
	tests := []struct {
		n       contracts.Names
		subject string
		want    string
		ok      bool
	}{
		{def, "bulkaction.submit.g1", "g1", true},
		{def, "bulkaction.result.g-2", "g-2", true},
		{def, "bulkaction.events.G_3", "G_3", true},
		{def, def.Submit(strings.Repeat("g", 128)), strings.Repeat("g", 128), true},
		{def, def.Submit(strings.Repeat("g", 129)), "", false},
		{def, "bulkaction.ready.g1", "", false},
		{def, "bulkaction.dlq.bad_json", "", false},
		{def, "bulkaction.submit.>", "", false},
		{def, "bulkaction.submit.*", "", false},
		{def, "bulkaction.submit.", "", false},
		{def, "bulkaction.submit", "", false},
		{def, "bulkaction.submit.g1.extra", "", false},
		{def, "other.submit.g1", "", false},
		{def, "bulkactionx.submit.g1", "", false},
		{def, "acme.bulk.submit.g1", "", false},
		{custom, "acme.bulk.submit.g1", "g1", true},
		{custom, "acme.bulk.events.g1", "g1", true},
		{custom, "bulkaction.submit.g1", "", false},
		{def, "", "", false},
	}
	for _, tt := range tests {
		got, ok := tt.n.GroupFromSubject(tt.subject)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%+v.GroupFromSubject(%q) = %q, %v; want %q, %v", tt.n, tt.subject, got, ok, tt.want, tt.ok)
		}
	}
}

func TestTypeFromSubject(t *testing.T) {
	t.Parallel()
	def := contracts.Names{}
	tests := []struct {
		n       contracts.Names
		subject string
		want    string
		ok      bool
	}{
		{def, "bulkaction.ready.email", "email", true},
		{def, def.Ready(strings.Repeat("t", 64)), strings.Repeat("t", 64), true},
		{def, def.Ready(strings.Repeat("t", 65)), "", false},
		{def, "bulkaction.ready.>", "", false},
		{def, "bulkaction.ready.a.b", "", false},
		{def, "bulkaction.submit.email", "", false},
		{contracts.Names{Prefix: "p"}, "p.ready.sms", "sms", true},
		{contracts.Names{Prefix: "p"}, "bulkaction.ready.sms", "", false},
	}
	for _, tt := range tests {
		got, ok := tt.n.TypeFromSubject(tt.subject)
		if got != tt.want || ok != tt.ok {
			t.Errorf("TypeFromSubject(%q) = %q, %v; want %q, %v", tt.subject, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNamesValidate(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "bulkaction", "acme.bulk", "a-b_c"} {
		if err := (contracts.Names{Prefix: p}).Validate(); err != nil {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
	for _, p := range []string{".a", "a.", "a..b", "a b", "a.*", "a.>", "a\tb", "a\x7f"} {
		err := (contracts.Names{Prefix: p}).Validate()
		wantInvalid(t, err, contracts.ReasonInvalidField, "prefix")
	}
}

func TestMsgIDs(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{
		{contracts.SubmitMsgID("g1", "j1"), "g1:j1"},
		{contracts.SealMsgID("g1", 1000), "g1:seal:1000"},
		{contracts.SealMsgID("g1", 0), "g1:seal:0"},
		{contracts.CancelMsgID("g1"), "g1:cancel:all"},
		{contracts.ReadyMsgID("g1", "j1", 1), "g1:j1:1"},
		{contracts.ReadyMsgID("g1", "j1", 2), "g1:j1:2"},
		{contracts.ResultMsgID("g1", "j1", 2), "g1:j1:2:result"},
	} {
		if got, want := c[0], c[1]; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if contracts.ReadyMsgID("g", "j", 1) == contracts.ReadyMsgID("g", "j", 2) {
		t.Error("a retry has the same ready Msg-Id as the first attempt")
	}
	if contracts.SubmitMsgID("a", "b") == contracts.SubmitMsgID("b", "a") {
		t.Error("submit Msg-Ids of different groups collide")
	}

	for _, tt := range []struct {
		s    contracts.Submission
		want string
	}{
		{validJob(), "g1:j1"},
		{contracts.Submission{Kind: contracts.KindSeal, GroupID: "g", Total: i64(5)}, "g:seal:5"},
		{contracts.Submission{Kind: contracts.KindSeal, GroupID: "g"}, "g:seal:0"},
		{contracts.Submission{Kind: contracts.KindCancel, GroupID: "g"}, "g:cancel:all"},
		{contracts.Submission{Kind: "other", GroupID: "g"}, ""},
	} {
		if got := tt.s.MsgID(); got != tt.want {
			t.Errorf("%+v.MsgID() = %q, want %q", tt.s, got, tt.want)
		}
	}
	r := contracts.ReadyJob{GroupID: "g", JobID: "j", Attempt: 3}
	if got := r.MsgID(); got != "g:j:3" {
		t.Errorf("ReadyJob.MsgID = %q", got)
	}
	res := contracts.JobResult{GroupID: "g", JobID: "j", Attempt: 3}
	if got := res.MsgID(); got != "g:j:3:result" {
		t.Errorf("JobResult.MsgID = %q", got)
	}
}
