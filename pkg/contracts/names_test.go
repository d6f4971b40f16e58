package contracts_test

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
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
	g := contracts.Group("acme", "g1")
	for _, tt := range tests {
		p := tt.prefix
		for _, c := range [][2]string{
			{tt.n.Submit(g), p + ".submit.acme.g1"},
			{tt.n.SubmitTenant("acme"), p + ".submit.acme.>"},
			{tt.n.SubmitAll(), p + ".submit.>"},
			{tt.n.Ready("email"), p + ".ready.email"},
			{tt.n.ReadyAll(), p + ".ready.>"},
			{tt.n.Result(g), p + ".result.acme.g1"},
			{tt.n.ResultAll(), p + ".result.>"},
			{tt.n.Events(g), p + ".events.acme.g1"},
			{tt.n.EventsTenant("acme"), p + ".events.acme.>"},
			{tt.n.EventsAll(), p + ".events.>"},
			{tt.n.DLQ("acme", "bad_json"), p + ".dlq.acme.bad_json"},
			{tt.n.DLQ("", ""), p + ".dlq.~.invalid"},
			{tt.n.DLQOf(tt.n.Submit(contracts.Group("acme", "g1")), "bad_json"), p + ".dlq.acme.bad_json"},
			{tt.n.DLQOf(tt.n.Ready("email"), "bad_json"), p + ".dlq.~.bad_json"},
			{tt.n.DLQTenant("acme"), p + ".dlq.acme.*"},
			{tt.n.DLQAll(), p + ".dlq.>"},
			{tt.n.Notify("work"), p + ".notify.work"},
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

// TestTenantWildcardsCoverOnlyTheTenant: a tenant's wildcard matches its own groups' subjects and
// no other tenant's, even one whose name extends it.
func TestTenantWildcardsCoverOnlyTheTenant(t *testing.T) {
	t.Parallel()
	var n contracts.Names
	matches := func(wildcard, subject string) bool { // NATS matching, for wildcards ending in ">"
		head := strings.TrimSuffix(wildcard, ">")
		return strings.HasPrefix(subject, head) && len(subject) > len(head)
	}
	for _, c := range []struct {
		wildcard string
		subject  string
		want     bool
	}{
		{n.SubmitTenant("acme"), n.Submit(contracts.Group("acme", "g1")), true},
		{n.SubmitTenant("acme"), n.Submit(contracts.Group("acme2", "g1")), false},
		{n.SubmitTenant("acme"), n.Submit(contracts.Group("umbrella", "acme")), false},
		{n.SubmitTenant("acme"), n.Events(contracts.Group("acme", "g1")), false},
		{n.EventsTenant("acme"), n.Events(contracts.Group("acme", "g1")), true},
		{n.EventsTenant("acme"), n.Events(contracts.Group("acme-eu", "g1")), false},
		{n.EventsTenant("acme"), n.Result(contracts.Group("acme", "g1")), false},
	} {
		if got := matches(c.wildcard, c.subject); got != c.want {
			t.Errorf("%s matches %s: %v, want %v", c.wildcard, c.subject, got, c.want)
		}
	}
}

// TestStreamNamesAreValid: stream names, and the tenants bucket's, take only A-Z, 0-9 and _.
func TestStreamNamesAreValid(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "a.b", "ünï.cødé", "x-y_z.0"} {
		n := contracts.Names{Prefix: prefix}
		for _, s := range []string{n.StreamSubmit(), n.StreamReady(), n.StreamResult(), n.StreamEvents(), n.StreamDLQ(), n.BucketTenants()} {
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
	none := contracts.GroupRef{}
	g := func(tenant, id string) contracts.GroupRef { return contracts.Group(tenant, id) }
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	tests := []struct {
		n       contracts.Names
		subject string
		want    contracts.GroupRef
		ok      bool
	}{
		{def, "bulkaction.submit.acme.g1", g("acme", "g1"), true},
		{def, "bulkaction.result.acme.g-2", g("acme", "g-2"), true},
		{def, "bulkaction.events.Umbrella_1.G_3", g("Umbrella_1", "G_3"), true},
		{def, "bulkaction.submit.umbrella.g1", g("umbrella", "g1"), true},
		{def, def.Submit(g(long("t", 64), long("g", 128))), g(long("t", 64), long("g", 128)), true},
		{def, def.Submit(g(long("t", 65), "g")), none, false},
		{def, def.Submit(g("t", long("g", 129))), none, false},
		{def, "bulkaction.submit.g1", none, false}, // a v1 subject: no tenant
		{def, "bulkaction.submit.acme.g1.extra", none, false},
		{def, "bulkaction.submit.acme.", none, false},
		{def, "bulkaction.submit..g1", none, false},
		{def, "bulkaction.submit.acme", none, false},
		{def, "bulkaction.submit", none, false},
		{def, "bulkaction.submit.acme.>", none, false},
		{def, "bulkaction.submit.acme.*", none, false},
		{def, "bulkaction.submit.*.g1", none, false},
		{def, "bulkaction.submit.>", none, false},
		{def, "bulkaction.ready.acme.g1", none, false},
		{def, "bulkaction.ready.email", none, false},
		{def, "bulkaction.dlq.bad_json", none, false},
		{def, "bulkaction.notify.acme.g1", none, false},
		{def, "other.submit.acme.g1", none, false},
		{def, "bulkactionx.submit.acme.g1", none, false},
		{def, "acme.bulk.submit.acme.g1", none, false},
		{custom, "acme.bulk.submit.acme.g1", g("acme", "g1"), true},
		{custom, "acme.bulk.events.umbrella.g1", g("umbrella", "g1"), true},
		{custom, "bulkaction.submit.acme.g1", none, false},
		{def, "", none, false},
	}
	for _, tt := range tests {
		got, ok := tt.n.GroupFromSubject(tt.subject)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%+v.GroupFromSubject(%q) = %v, %v; want %v, %v", tt.n, tt.subject, got, ok, tt.want, tt.ok)
		}
	}
	// Every group's subjects give it back.
	for _, n := range []contracts.Names{def, custom} {
		for _, grp := range []contracts.GroupRef{g("acme", "g1"), g("umbrella", "g1"), g("a", "b")} {
			for _, s := range []string{n.Submit(grp), n.Result(grp), n.Events(grp)} {
				if got, ok := n.GroupFromSubject(s); !ok || got != grp {
					t.Errorf("GroupFromSubject(%q) = %v, %v; want %v", s, got, ok, grp)
				}
			}
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
		{def, "bulkaction.ready.email.8", "email", true},
		{def, "bulkaction.ready.email.*", "", false},
		{def, "bulkaction.submit.email", "", false},
		{def, "bulkaction.submit.acme.email", "", false},
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

func TestReadyPackSubjects(t *testing.T) {
	t.Parallel()
	n := contracts.Names{Prefix: "p"}
	for _, jobs := range []int{1, 2, 8, 100} {
		subj := n.ReadyPack("sms", jobs)
		typ, got, ok := n.ReadyFromSubject(subj)
		if !ok || typ != "sms" || got != jobs {
			t.Errorf("ReadyFromSubject(%q) = %q, %d, %v; want sms, %d, true", subj, typ, got, ok, jobs)
		}
	}
	if got := n.ReadyPack("sms", 1); got != "p.ready.sms" {
		t.Errorf("ReadyPack(sms, 1) = %q: a job alone keeps the type's subject", got)
	}
	if got := n.ReadyPack("sms", 8); got != "p.ready.sms.8" {
		t.Errorf("ReadyPack(sms, 8) = %q", got)
	}
	if got := n.ReadyFilters("sms"); !slices.Equal(got, []string{"p.ready.sms", "p.ready.sms.*"}) {
		t.Errorf("ReadyFilters(sms) = %q", got)
	}
	for _, subj := range []string{"p.ready.sms.1", "p.ready.sms.0", "p.ready.sms.-3", "p.ready.sms.08", "p.ready.sms.x", "p.ready.sms.2.3", "p.result.sms.2"} {
		if typ, jobs, ok := n.ReadyFromSubject(subj); ok {
			t.Errorf("ReadyFromSubject(%q) = %q, %d, true; want not ok", subj, typ, jobs)
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
	g := contracts.Group("acme", "g1")
	for _, c := range [][2]string{
		{contracts.SubmitMsgID(g, "j1"), "acme:g1:j1"},
		{contracts.SealMsgID(g, 1000), "acme:g1:seal:1000"},
		{contracts.SealMsgID(g, 0), "acme:g1:seal:0"},
		{contracts.CancelMsgID(g), "acme:g1:cancel:all"},
		{contracts.ReadyMsgID(g, "j1", 1), "acme:g1:j1:1"},
		{contracts.ReadyMsgID(g, "j1", 2), "acme:g1:j1:2"},
		{contracts.ResultMsgID(g, "j1", 2), "acme:g1:j1:2:result"},
		{contracts.JobsMsgID(g, manyJobs(1)), "acme:g1:j0"},
	} {
		if got, want := c[0], c[1]; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if contracts.ReadyMsgID(g, "j", 1) == contracts.ReadyMsgID(g, "j", 2) {
		t.Error("a retry has the same ready Msg-Id as the first attempt")
	}
	other := contracts.Group("umbrella", "g1")
	for _, pair := range [][2]string{
		{contracts.SubmitMsgID(g, "j"), contracts.SubmitMsgID(other, "j")},
		{contracts.SealMsgID(g, 1), contracts.SealMsgID(other, 1)},
		{contracts.CancelMsgID(g), contracts.CancelMsgID(other)},
		{contracts.ReadyMsgID(g, "j", 1), contracts.ReadyMsgID(other, "j", 1)},
		{contracts.ResultMsgID(g, "j", 1), contracts.ResultMsgID(other, "j", 1)},
		{contracts.JobsMsgID(g, manyJobs(3)), contracts.JobsMsgID(other, manyJobs(3))},
		{contracts.SubmitMsgID(contracts.Group("a", "b"), "c"), contracts.SubmitMsgID(contracts.Group("b", "a"), "c")},
	} {
		if pair[0] == pair[1] {
			t.Errorf("Msg-Ids of two tenants' groups collide: %q", pair[0])
		}
	}

	for _, tt := range []struct {
		s    contracts.Submission
		want string
	}{
		{contracts.Submission{Kind: contracts.KindJobs, Tenant: "acme", GroupID: "g", Jobs: manyJobs(1)}, "acme:g:j0"},
		{contracts.Submission{Kind: contracts.KindSeal, Tenant: "acme", GroupID: "g", Total: i64(5)}, "acme:g:seal:5"},
		{contracts.Submission{Kind: contracts.KindSeal, Tenant: "acme", GroupID: "g"}, "acme:g:seal:0"},
		{contracts.Submission{Kind: contracts.KindCancel, Tenant: "acme", GroupID: "g"}, "acme:g:cancel:all"},
		{contracts.Submission{Kind: contracts.KindPause, Tenant: "acme", GroupID: "g"}, ""},
		{contracts.Submission{Kind: contracts.KindResume, Tenant: "acme", GroupID: "g"}, ""},
		{contracts.Submission{Kind: "other", Tenant: "acme", GroupID: "g"}, ""},
	} {
		if got := tt.s.MsgID(); got != tt.want {
			t.Errorf("%+v.MsgID() = %q, want %q", tt.s, got, tt.want)
		}
	}
	s := validJobs()
	if got, want := s.MsgID(), contracts.JobsMsgID(acme, s.Jobs); got != want {
		t.Errorf("jobs MsgID = %q, want %q", got, want)
	}
	r := contracts.ReadyJob{Tenant: "acme", GroupID: "g", JobID: "j", Attempt: 3}
	if got := r.MsgID(); got != "acme:g:j:3" {
		t.Errorf("ReadyJob.MsgID = %q", got)
	}
	res := contracts.JobResult{Tenant: "acme", GroupID: "g", JobID: "j", Attempt: 3}
	if got := res.MsgID(); got != "acme:g:j:3:result" {
		t.Errorf("JobResult.MsgID = %q", got)
	}
}

// TestBatchMsgIDs: the Msg-Id of a batch is a function of its items' IDs (and attempts), in order:
// equal batches share it, a batch with any item's ID changed does not.
func TestBatchMsgIDs(t *testing.T) {
	t.Parallel()
	t.Run("jobs", func(t *testing.T) {
		base := contracts.JobsMsgID(acme, manyJobs(3))
		if !strings.HasPrefix(base, "acme:g1:jobs:3:") || len(base) != len("acme:g1:jobs:3:")+32 {
			t.Fatalf("JobsMsgID = %q", base)
		}
		if got := contracts.JobsMsgID(acme, manyJobs(3)); got != base {
			t.Errorf("equal batches: %q != %q", got, base)
		}
		// The payload and type are not part of it: job-level idempotency is by ID.
		jobs := manyJobs(3)
		jobs[1].Type, jobs[1].Payload = "other", []byte(`{"a":1}`)
		if got := contracts.JobsMsgID(acme, jobs); got != base {
			t.Errorf("payload and type changed the Msg-Id: %q != %q", got, base)
		}
		seen := map[string]bool{base: true}
		for i := range 3 {
			jobs := manyJobs(3)
			jobs[i].JobID += "x"
			id := contracts.JobsMsgID(acme, jobs)
			if seen[id] {
				t.Errorf("changing jobs[%d].jobId keeps a known Msg-Id %q", i, id)
			}
			seen[id] = true
		}
		jobs = manyJobs(3)
		jobs[0], jobs[2] = jobs[2], jobs[0]
		if contracts.JobsMsgID(acme, jobs) == base {
			t.Error("the order of the jobs does not count")
		}
		// ["a", "bc"] and ["ab", "c"] are different batches.
		split := func(ids ...string) string {
			jobs := make([]contracts.SubmitJob, len(ids))
			for i, id := range ids {
				jobs[i].JobID = id
			}
			return contracts.JobsMsgID(acme, jobs)
		}
		if split("a", "bc") == split("ab", "c") {
			t.Error("the digest runs the job IDs together")
		}
		if contracts.JobsMsgID(acme, manyJobs(2)) == base {
			t.Error("a batch and its start share a Msg-Id")
		}
	})
	t.Run("ready", func(t *testing.T) {
		one := contracts.ReadyBatch{V: 2, Jobs: validReady().Jobs[:1]}
		if got, want := one.MsgID(), one.Jobs[0].MsgID(); got != want {
			t.Errorf("batch of one: %q, want %q", got, want)
		}
		base := validReady()
		id := base.MsgID()
		if !strings.HasPrefix(id, "ready:3:") {
			t.Fatalf("ReadyBatch.MsgID = %q", id)
		}
		if again := validReady(); again.MsgID() != id {
			t.Error("equal batches differ")
		}
		seen := map[string]bool{id: true}
		for i := range base.Jobs {
			for _, mutate := range []func(*contracts.ReadyJob){
				func(j *contracts.ReadyJob) { j.JobID += "x" },
				func(j *contracts.ReadyJob) { j.GroupID += "x" },
				func(j *contracts.ReadyJob) { j.Tenant += "x" },
				func(j *contracts.ReadyJob) { j.Attempt++ },
			} {
				b := validReady()
				mutate(&b.Jobs[i])
				if id := b.MsgID(); seen[id] {
					t.Errorf("changing jobs[%d] keeps a known Msg-Id %q", i, id)
				} else {
					seen[id] = true
				}
			}
		}
	})
	t.Run("results", func(t *testing.T) {
		one := contracts.ResultBatch{V: 2, Results: validResults().Results[:1]}
		if got, want := one.MsgID(), "acme:g1:j1:1:result"; got != want {
			t.Errorf("batch of one: %q, want %q", got, want)
		}
		base := validResults()
		id := base.MsgID()
		if !strings.HasPrefix(id, "result:3:") {
			t.Fatalf("ResultBatch.MsgID = %q", id)
		}
		if again := validResults(); again.MsgID() != id {
			t.Error("equal batches differ")
		}
		seen := map[string]bool{id: true}
		for i := range base.Results {
			for _, mutate := range []func(*contracts.JobResult){
				func(r *contracts.JobResult) { r.JobID += "x" },
				func(r *contracts.JobResult) { r.Attempt++ },
			} {
				b := validResults()
				mutate(&b.Results[i])
				if id := b.MsgID(); seen[id] {
					t.Errorf("changing results[%d] keeps a known Msg-Id %q", i, id)
				} else {
					seen[id] = true
				}
			}
		}
	})
}

func TestDLQReason(t *testing.T) {
	t.Parallel()
	var n contracts.Names
	for _, tt := range []struct {
		subject, tenant, reason string
		ok                      bool
	}{
		{n.DLQ("acme", "bad_json"), "acme", "bad_json", true},
		{n.DLQ("", ""), contracts.NoTenant, contracts.ReasonInvalid, true},
		{"bulkaction.dlq.bad_json", "", "bad_json", true},
		{"bulkaction.dlq", "", "", false},
		{"bulkaction.dlq..bad_json", "", "", false},
		{"bulkaction.dlq.acme.bad_json.x", "", "", false},
		{"bulkaction.submit.acme.g1", "", "", false},
		{"other.dlq.acme.bad_json", "", "", false},
	} {
		tenant, reason, ok := n.DLQReason(tt.subject)
		if tenant != tt.tenant || reason != tt.reason || ok != tt.ok {
			t.Errorf("DLQReason(%q) = %q, %q, %v; want %q, %q, %v", tt.subject, tenant, reason, ok, tt.tenant, tt.reason, tt.ok)
		}
	}
	if contracts.ValidateTenant(contracts.NoTenant) == nil {
		t.Errorf("NoTenant %q is a valid tenant", contracts.NoTenant)
	}
}

// TestBatchMsgIDsAreStable: a batch's message id is "<kind>:<n>:" and the first 16
// bytes, in hex, of the SHA-256 of each item's own id followed by a zero
// byte, the ids a deduplication window already holds across an upgrade.
func TestBatchMsgIDsAreStable(t *testing.T) {
	t.Parallel()
	digest := func(kind string, ids []string) string {
		h := sha256.New()
		for _, id := range ids {
			h.Write([]byte(id))
			h.Write([]byte{0})
		}
		return kind + ":" + strconv.Itoa(len(ids)) + ":" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	g := contracts.Group("acme", "promo")
	ready := &contracts.ReadyBatch{}
	results := &contracts.ResultBatch{}
	var jobs []contracts.SubmitJob
	var readyIDs, resultIDs, jobIDs []string
	for i, id := range []string{"a", "job-2", "x_y-z.9", strings.Repeat("k", 128)} {
		attempt := 1 + i*7
		ready.Jobs = append(ready.Jobs, contracts.ReadyJob{Tenant: g.Tenant, GroupID: g.ID, JobID: id, Attempt: attempt})
		results.Results = append(results.Results, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: id, Attempt: attempt})
		jobs = append(jobs, contracts.SubmitJob{JobID: id})
		readyIDs = append(readyIDs, contracts.ReadyMsgID(g, id, attempt))
		resultIDs = append(resultIDs, contracts.ResultMsgID(g, id, attempt))
		jobIDs = append(jobIDs, id)
	}
	if got, want := ready.MsgID(), digest("ready", readyIDs); got != want {
		t.Errorf("ReadyBatch.MsgID = %q, want %q", got, want)
	}
	if got, want := results.MsgID(), digest("result", resultIDs); got != want {
		t.Errorf("ResultBatch.MsgID = %q, want %q", got, want)
	}
	if got, want := contracts.JobsMsgID(g, jobs), "acme:promo:"+digest("jobs", jobIDs); got != want {
		t.Errorf("JobsMsgID = %q, want %q", got, want)
	}
	if got, want := (&contracts.ReadyBatch{Jobs: ready.Jobs[1:2]}).MsgID(), readyIDs[1]; got != want {
		t.Errorf("a batch of one: MsgID = %q, want its job's %q", got, want)
	}
}
