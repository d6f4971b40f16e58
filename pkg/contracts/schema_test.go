package contracts_test

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// The rules by which the JSON Schema (contracts.Schema) and the Go decoders judge a body
// differently, on purpose. A case of the agreement corpus whose verdicts differ must name one of
// them in its except field, and one whose verdicts agree must name none.
const (
	// exceptSubject: the subject is authoritative. A body that names a tenant or groupId other than
	// its subject's tokens, or that arrives on a subject that is not of its message's kind (wildcards,
	// extra or missing tokens, another kind, no prefix), is rejected; a schema sees only the body.
	exceptSubject = "subject"
	// exceptDistinctIDs: the job IDs of a jobs message are distinct. uniqueItems compares whole
	// items, not one of their properties.
	exceptDistinctIDs = "distinct-ids"
	// exceptOneType: a ready message holds jobs of one type (the subject's). JSON Schema cannot
	// relate one item's property to another's.
	exceptOneType = "one-type"
	// exceptPayloadSize: a payload is at most Limits.MaxPayloadBytes, configurable, measured in
	// the compact form encoding/json writes; JSON Schema cannot measure a value's encoding.
	exceptPayloadSize = "payload-size"
	// exceptIntegral: an integer written with a fraction or an exponent (2.0, 1e3) is an integer to
	// JSON Schema, whose numbers are values; encoding/json refuses it for a Go integer field.
	exceptIntegral = "integral"
	// exceptNullAbsent: encoding/json leaves a field at its zero value for an explicit null, and
	// the decoders read an empty optional tenant, groupId or priority as absent; the schema, which
	// says what producers send, leaves such fields out rather than offering null or "".
	exceptNullAbsent = "null-absent"
	// exceptCaseKeys: encoding/json matches object keys to fields case-insensitively ("V",
	// "Kind"); JSON Schema property names are exact. (So {"kind":"cancel","Kind":"pause"} is a
	// pause to Go and a cancel with an unknown property to the schema, though both accept it.)
	exceptCaseKeys = "case-keys"
	// exceptDateTime: Go's RFC 3339 parser (time.Time) and the date-time format differ at the edges:
	// Go refuses a leap second (…:60) and accepts a 24-hour offset (+24:00) and a ',' before the
	// fraction of a second.
	exceptDateTime = "date-time"
)

// exceptions lists every except… rule with the side that is stricter.
var exceptions = map[string]string{
	exceptSubject:     "go",
	exceptDistinctIDs: "go",
	exceptOneType:     "go",
	exceptPayloadSize: "go",
	exceptIntegral:    "go",
	exceptNullAbsent:  "schema",
	exceptCaseKeys:    "schema",
	exceptDateTime:    "either",
}

// messageDefs maps each Go type of the contract to its definition in the schema's $defs.
var messageDefs = []struct {
	def string
	typ reflect.Type
	// zeroValid lists the fields without omitempty whose zero value is valid, so that a body may
	// leave them out: they are not required.
	zeroValid []string
}{
	{"submission", reflect.TypeFor[contracts.Submission](), nil},
	{"submitJob", reflect.TypeFor[contracts.SubmitJob](), nil},
	{"groupSettings", reflect.TypeFor[contracts.GroupSettings](), nil},
	{"window", reflect.TypeFor[contracts.Window](), nil},
	{"readyBatch", reflect.TypeFor[contracts.ReadyBatch](), nil},
	{"readyJob", reflect.TypeFor[contracts.ReadyJob](), nil},
	{"resultBatch", reflect.TypeFor[contracts.ResultBatch](), nil},
	{"jobResult", reflect.TypeFor[contracts.JobResult](), []string{"durationMs"}},
	{"groupEvent", reflect.TypeFor[contracts.GroupEvent](), []string{"total", "jobs", "succeeded", "failed", "cancelled", "at"}},
	{"deadLetter", reflect.TypeFor[contracts.DeadLetter](), nil},
	{"refusedCounts", reflect.TypeFor[contracts.RefusedCounts](), nil},
}

// schemaDoc returns the schema parsed with numbers kept exact.
func schemaDoc(t *testing.T) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(contracts.Schema()))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("schema: %v", err)
	}
	return doc
}

// object returns v as a JSON object, failing the test when it is not one.
func object(t *testing.T, v any, what string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: %T is not an object", what, v)
	}
	return m
}

// flat returns the schema n, with its "$ref" (to one of the $defs) replaced by what it refers to;
// n's own keywords win.
func flat(t *testing.T, doc, n map[string]any) map[string]any {
	t.Helper()
	ref, ok := n["$ref"].(string)
	if !ok {
		return n
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		t.Fatalf("$ref %q is not one of the $defs", ref)
	}
	out := map[string]any{}
	for k, v := range flat(t, doc, object(t, object(t, doc["$defs"], "$defs")[name], ref)) {
		out[k] = v
	}
	for k, v := range n {
		if k != "$ref" {
			out[k] = v
		}
	}
	return out
}

func def(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	return object(t, object(t, doc["$defs"], "$defs")[name], "$defs/"+name)
}

// prop returns the flattened schema of a definition's property.
func prop(t *testing.T, doc map[string]any, defName, name string) map[string]any {
	t.Helper()
	props := object(t, def(t, doc, defName)["properties"], defName+".properties")
	p, ok := props[name]
	if !ok {
		t.Fatalf("%s has no property %q", defName, name)
	}
	if b, ok := p.(bool); ok {
		return map[string]any{"$bool": b}
	}
	return flat(t, doc, object(t, p, defName+"."+name))
}

func strs(v any) []string {
	var out []string
	if a, ok := v.([]any); ok {
		for _, e := range a {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// num returns a schema keyword's number exactly, "" when absent.
func num(v any) string {
	if n, ok := v.(json.Number); ok {
		return n.String()
	}
	return ""
}

// jsonFields returns the JSON names of t's fields and whether each has omitempty.
func jsonFields(t reflect.Type) (names []string, omitempty map[string]bool) {
	omitempty = map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		omitempty[name] = slices.Contains(strings.Split(opts, ","), "omitempty")
	}
	return names, omitempty
}

func TestSchemaDocument(t *testing.T) {
	t.Parallel()
	doc := schemaDoc(t)
	if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", got)
	}
	if got := doc["$id"]; got != contracts.SchemaID {
		t.Errorf("$id = %v, want SchemaID %q", got, contracts.SchemaID)
	}
	var refs []string
	for _, r := range doc["anyOf"].([]any) {
		refs = append(refs, object(t, r, "anyOf")["$ref"].(string))
	}
	want := []string{"#/$defs/submission", "#/$defs/readyBatch", "#/$defs/resultBatch", "#/$defs/groupEvent", "#/$defs/deadLetter"}
	if !slices.Equal(refs, want) {
		t.Errorf("root anyOf = %v, want %v", refs, want)
	}
	// Schema returns a copy.
	s := contracts.Schema()
	s[0] = 'X'
	if contracts.Schema()[0] != '{' {
		t.Error("Schema returns its backing array")
	}
	// The file is indented JSON, for people to read.
	var buf bytes.Buffer
	if err := json.Indent(&buf, contracts.Schema(), "", "  "); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaMatchesGoTypes checks the schema against the Go types: the same properties as the JSON
// fields, the required ones, the JSON types, and the limits, patterns and enums of the package's
// constants.
func TestSchemaMatchesGoTypes(t *testing.T) {
	t.Parallel()
	doc := schemaDoc(t)
	for _, m := range messageDefs {
		d := def(t, doc, m.def)
		names, omitempty := jsonFields(m.typ)
		props := object(t, d["properties"], m.def+".properties")
		for _, n := range names {
			if _, ok := props[n]; !ok {
				t.Errorf("%s: field %q of %s is not a property", m.def, n, m.typ)
			}
		}
		for p := range props {
			if !slices.Contains(names, p) {
				t.Errorf("%s: property %q is not a field of %s", m.def, p, m.typ)
			}
		}
		required := strs(d["required"])
		for _, r := range required {
			if !slices.Contains(names, r) || omitempty[r] || slices.Contains(m.zeroValid, r) {
				t.Errorf("%s: %q is required, but %s has it with omitempty, or its zero value is valid", m.def, r, m.typ)
			}
		}
		for _, n := range names {
			if !omitempty[n] && !slices.Contains(required, n) && !slices.Contains(m.zeroValid, n) {
				t.Errorf("%s: field %q of %s has no omitempty and is not required", m.def, n, m.typ)
			}
		}
		if d["type"] != "object" {
			t.Errorf("%s: type %v", m.def, d["type"])
		}
		// The JSON type of each property is the Go field's.
		for i := 0; i < m.typ.NumField(); i++ {
			f := m.typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			p := prop(t, doc, m.def, name)
			want := jsonTypeOf(f.Type)
			got, _ := p["type"].(string)
			switch {
			case want == "":
				if p["type"] != nil || p["enum"] != nil || p["const"] != nil {
					t.Errorf("%s.%s: any JSON value in Go, constrained in the schema: %v", m.def, name, p)
				}
			case p["enum"] != nil:
				if want != "string" {
					t.Errorf("%s.%s: enum for a Go %s", m.def, name, f.Type)
				}
			case p["const"] != nil:
				if want != "integer" || name != "v" {
					t.Errorf("%s.%s: const for a Go %s", m.def, name, f.Type)
				}
			case got != want:
				t.Errorf("%s.%s: type %q, Go %s wants %q", m.def, name, got, f.Type, want)
			}
		}
	}

	// Every message: "v" is required and must be Version.
	for _, name := range []string{"submission", "readyBatch", "resultBatch", "groupEvent", "deadLetter"} {
		if got := num(prop(t, doc, name, "v")["const"]); got != strconv.Itoa(contracts.Version) {
			t.Errorf("%s.v const %q, want %d", name, got, contracts.Version)
		}
		if !slices.Contains(strs(def(t, doc, name)["required"]), "v") {
			t.Errorf("%s: v is not required", name)
		}
	}

	// Tokens: every property of that name, in every definition.
	patterns := map[string]string{"tenant": contracts.TenantPattern, "groupId": contracts.IDPattern,
		"jobId": contracts.IDPattern, "type": contracts.TypePattern, "destination": contracts.DestinationPattern}
	maxLens := map[string]int{"tenant": contracts.MaxTenantLen, "groupId": contracts.MaxIDLen, "jobId": contracts.MaxIDLen, "type": contracts.MaxTypeLen,
		"destination": contracts.MaxDestinationLen}
	for _, m := range messageDefs {
		for name, pattern := range patterns {
			if _, ok := object(t, def(t, doc, m.def)["properties"], m.def)[name]; !ok {
				continue
			}
			p := prop(t, doc, m.def, name)
			if p["pattern"] != pattern || p["type"] != "string" {
				t.Errorf("%s.%s: pattern %v, want %q", m.def, name, p["pattern"], pattern)
			}
			re := regexp.MustCompile(pattern)
			if n := maxLens[name]; !re.MatchString(strings.Repeat("a", n)) || re.MatchString(strings.Repeat("a", n+1)) {
				t.Errorf("%s.%s: pattern %q does not allow exactly %d characters", m.def, name, pattern, n)
			}
		}
	}

	// Numeric limits.
	for _, c := range []struct {
		def, prop, min, max string
	}{
		{"submission", "total", "0", strconv.Itoa(contracts.MaxTotal)},
		{"groupSettings", "basePriority", strconv.Itoa(contracts.MinBasePriority), strconv.Itoa(contracts.MaxBasePriority)},
		{"groupSettings", "maxInFlight", "0", strconv.Itoa(contracts.MaxInFlight)},
		{"readyJob", "attempt", "1", strconv.Itoa(math.MaxInt64)},
		{"jobResult", "attempt", "1", strconv.Itoa(math.MaxInt64)},
		{"jobResult", "durationMs", "0", strconv.Itoa(math.MaxInt64)},
		{"groupEvent", "total", "0", strconv.Itoa(math.MaxInt64)},
		{"groupEvent", "jobs", "0", strconv.Itoa(math.MaxInt64)},
		{"groupEvent", "succeeded", "0", strconv.Itoa(math.MaxInt64)},
		{"groupEvent", "failed", "0", strconv.Itoa(math.MaxInt64)},
		{"groupEvent", "cancelled", "0", strconv.Itoa(math.MaxInt64)},
		{"deadLetter", "size", "0", strconv.Itoa(math.MaxInt64)},
	} {
		p := prop(t, doc, c.def, c.prop)
		if lo, hi := num(p["minimum"]), num(p["maximum"]); lo != c.min || hi != c.max {
			t.Errorf("%s.%s: [%s, %s], want [%s, %s]", c.def, c.prop, lo, hi, c.min, c.max)
		}
	}
	for _, c := range [][2]string{{"submission", "jobs"}, {"readyBatch", "jobs"}, {"resultBatch", "results"}} {
		p := prop(t, doc, c[0], c[1])
		if lo, hi := num(p["minItems"]), num(p["maxItems"]); lo != "1" || hi != strconv.Itoa(contracts.MaxBatch) {
			t.Errorf("%s.%s: %s..%s items, want 1..%d", c[0], c[1], lo, hi, contracts.MaxBatch)
		}
	}

	// Enums.
	var kinds, priorities []string
	for _, k := range contracts.Kinds {
		kinds = append(kinds, string(k))
	}
	for _, p := range contracts.Priorities {
		priorities = append(priorities, string(p))
	}
	if got := strs(prop(t, doc, "submission", "kind")["enum"]); !slices.Equal(got, kinds) {
		t.Errorf("kind enum %v, want %v", got, kinds)
	}
	if got := strs(prop(t, doc, "groupSettings", "priority")["enum"]); !slices.Equal(got, priorities) {
		t.Errorf("priority enum %v, want %v", got, priorities)
	}
	if got := strs(prop(t, doc, "jobResult", "status")["enum"]); !slices.Equal(got, []string{string(contracts.ResultSuccess), string(contracts.ResultFailed)}) {
		t.Errorf("status enum %v", got)
	}
	states := []contracts.GroupState{contracts.StateCreated, contracts.StateRunning, contracts.StateAggregating,
		contracts.StateCompleted, contracts.StateCancelled, contracts.StatePaused}
	gotStates := strs(prop(t, doc, "groupEvent", "state")["enum"])
	for _, s := range states {
		if !slices.Contains(gotStates, string(s)) {
			t.Errorf("state enum %v lacks %s", gotStates, s)
		}
	}
	for _, s := range gotStates {
		if !contracts.GroupState(s).Valid() {
			t.Errorf("state enum has %q, not a valid state", s)
		}
	}
	if len(gotStates) != len(states) {
		t.Errorf("state enum %v", gotStates)
	}
}

// jsonTypeOf returns the JSON type encoding/json reads into t, "" for any value.
func jsonTypeOf(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[json.RawMessage]():
		return ""
	case reflect.TypeFor[time.Time]():
		return "string"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		return "array"
	case reflect.Struct:
		return "object"
	}
	return "?" + t.String()
}

// TestSchemaKindBranches derives from Submission.Validate which fields each kind requires and
// refuses, and checks the schema's branch of that kind says the same.
func TestSchemaKindBranches(t *testing.T) {
	t.Parallel()
	doc := schemaDoc(t)
	branches := map[string]map[string]any{}
	var order []string
	for _, b := range def(t, doc, "submission")["oneOf"].([]any) {
		b := object(t, b, "oneOf")
		k := object(t, object(t, b["properties"], "branch")["kind"], "branch kind")["const"].(string)
		branches[k] = b
		order = append(order, k)
	}
	var kinds []string
	for _, k := range contracts.Kinds {
		kinds = append(kinds, string(k))
	}
	if !slices.Equal(order, kinds) {
		t.Fatalf("branches %v, want one per kind %v", order, kinds)
	}
	valid := func(k contracts.Kind) contracts.Submission {
		s := contracts.Submission{V: contracts.Version, Kind: k, Tenant: "a", GroupID: "g"}
		switch k {
		case contracts.KindJobs:
			s.Jobs = manyJobs(1)
		case contracts.KindSeal:
			s.Total = i64(1)
		case contracts.KindSchedule:
			s.NotBefore = "2026-11-27T09:00:00+01:00"
		}
		return s
	}
	set := map[string]func(*contracts.Submission){
		"jobs":      func(s *contracts.Submission) { s.Jobs = manyJobs(1) },
		"group":     func(s *contracts.Submission) { s.Group = &contracts.GroupSettings{} },
		"total":     func(s *contracts.Submission) { s.Total = i64(1) },
		"notBefore": func(s *contracts.Submission) { s.NotBefore = "2026-11-27T09:00:00+01:00" },
	}
	unset := map[string]func(*contracts.Submission){
		"jobs":      func(s *contracts.Submission) { s.Jobs = nil },
		"group":     func(s *contracts.Submission) { s.Group = nil },
		"total":     func(s *contracts.Submission) { s.Total = nil },
		"notBefore": func(s *contracts.Submission) { s.NotBefore = "" },
	}
	for _, k := range contracts.Kinds {
		b := branches[string(k)]
		if err := func() error { s := valid(k); return s.Validate(contracts.Limits{}) }(); err != nil {
			t.Fatalf("valid %s: %v", k, err)
		}
		props, _ := b["properties"].(map[string]any)
		for _, field := range []string{"jobs", "group", "total", "notBefore"} {
			s := valid(k)
			set[field](&s)
			refused := contracts.Reason(s.Validate(contracts.Limits{})) != ""
			if forbidden := props[field] == false; forbidden != refused {
				t.Errorf("kind %s, field %s: Go refuses it %v, the schema forbids it %v", k, field, refused, forbidden)
			}
			s = valid(k)
			unset[field](&s)
			needed := contracts.Reason(s.Validate(contracts.Limits{})) != ""
			if req := slices.Contains(strs(b["required"]), field); req != needed {
				t.Errorf("kind %s, field %s: Go requires it %v, the schema %v", k, field, needed, req)
			}
		}
	}
}

// compiled holds the schema compiled once per message definition.
var compiled = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(contracts.Schema()))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(contracts.SchemaID, doc); err != nil {
		return nil, err
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range []string{"", "submission", "readyBatch", "resultBatch", "groupEvent", "deadLetter"} {
		loc := contracts.SchemaID
		if name != "" {
			loc += "#/$defs/" + name
		}
		s, err := c.Compile(loc)
		if err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, nil
})

// schemaAccepts reports whether body is valid against the schema's definition def, and why not.
func schemaAccepts(t *testing.T, def string, body []byte) (bool, string) {
	t.Helper()
	schemas, err := compiled()
	if err != nil {
		t.Fatalf("compile the schema: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return false, "not JSON: " + err.Error()
	}
	if err := schemas[def].Validate(inst); err != nil {
		return false, err.Error()
	}
	// Whatever a definition accepts, the root accepts.
	if err := schemas[""].Validate(inst); err != nil {
		t.Errorf("%s accepts what the root refuses: %v", def, err)
	}
	return true, ""
}

// corpus is the agreement corpus of one message: its definition, how Go decodes a case, and the
// cases.
type corpus struct {
	def    string
	decode func(c decodeCase) (any, error)
	cases  []decodeCase
}

func corpora() []corpus {
	return []corpus{
		{"submission", func(c decodeCase) (any, error) {
			return contracts.DecodeSubmission(c.subjectOr(subjSubmit), []byte(c.body), c.lim)
		}, append(slices.Clip(submissionCases), moreSubmissionCases...)},
		{"readyBatch", func(c decodeCase) (any, error) {
			return contracts.DecodeReadyBatch([]byte(c.body), c.lim)
		}, append(slices.Clip(readyCases), moreReadyCases...)},
		{"resultBatch", func(c decodeCase) (any, error) {
			return contracts.DecodeResultBatch(c.subjectOr(subjResult), []byte(c.body))
		}, append(slices.Clip(resultCases), moreResultCases...)},
		{"groupEvent", func(c decodeCase) (any, error) {
			return contracts.DecodeGroupEvent([]byte(c.body))
		}, append(slices.Clip(eventCases), moreEventCases...)},
	}
}

// Cases of the agreement corpus beyond those of the decode tests.
var (
	moreSubmissionCases = []decodeCase{
		{name: "null basePriority", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"basePriority":null}}`, except: exceptNullAbsent},
		{name: "null payload item", body: `{"v":2,"kind":"jobs","jobs":[null]}`, reason: contracts.ReasonInvalidField},
		{name: "huge number in payload", body: job1(`{"big":1e400,"small":-0.0}`)},
		{name: "escaped token", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"\u0041","type":"t"}]}`},
		{name: "non-ASCII jobId", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"é","type":"t"}]}`, reason: contracts.ReasonInvalidField},
		{name: "unknown group setting", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"weight":3}}`},
		{name: "total 1e9 as exponent", body: `{"v":2,"kind":"seal","total":1e9}`, reason: contracts.ReasonInvalidField, except: exceptIntegral},
		{name: "body groupId empty", body: `{"v":2,"kind":"pause","groupId":""}`, except: exceptNullAbsent},
		{name: "kind null", body: `{"v":2,"kind":null}`, reason: contracts.ReasonUnknownKind},
	}
	moreReadyCases = []decodeCase{
		{name: "attempt max int64", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":9223372036854775807}]}`},
		{name: "attempt beyond int64", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":9223372036854775808}]}`, reason: contracts.ReasonInvalidField},
		{name: "tenant 64", body: `{"v":2,"jobs":[{"tenant":"` + strings.Repeat("t", 64) + `","groupId":"g","jobId":"j","type":"t","attempt":1}]}`},
		{name: "tenant 65", body: `{"v":2,"jobs":[{"tenant":"` + strings.Repeat("t", 65) + `","groupId":"g","jobId":"j","type":"t","attempt":1}]}`, reason: contracts.ReasonInvalidField},
		{name: "item not an object", body: `{"v":2,"jobs":["j"]}`, reason: contracts.ReasonInvalidField},
		{name: "payload null", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1,"payload":null}]}`},
	}
	moreResultCases = []decodeCase{
		{name: "durationMs beyond int64", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":9223372036854775808}]}`, reason: contracts.ReasonInvalidField},
		{name: "durationMs null", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":null}]}`, except: exceptNullAbsent},
		{name: "status null", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":null}]}`, reason: contracts.ReasonInvalidField},
		{name: "tenant empty", body: `{"v":2,"results":[{"tenant":"","jobId":"j","attempt":1,"status":"SUCCESS"}]}`, except: exceptNullAbsent},
		{name: "the subject's tokens", body: `{"v":2,"results":[{"tenant":"acme","groupId":"g1","jobId":"j","attempt":1,"status":"SUCCESS"}]}`},
	}
	moreEventCases = []decodeCase{
		{name: "counters max int64", body: `{"v":2,"tenant":"a","groupId":"g","state":"COMPLETED","total":9223372036854775807,"jobs":9223372036854775807}`},
		{name: "total beyond int64", body: `{"v":2,"tenant":"a","groupId":"g","state":"COMPLETED","total":9223372036854775808}`, reason: contracts.ReasonInvalidField},
		{name: "at with comma", body: `{"v":2,"tenant":"a","groupId":"g","state":"RUNNING","at":"2025-03-01T12:00:00,5Z"}`, except: exceptDateTime},
		{name: "at month 13", body: `{"v":2,"tenant":"a","groupId":"g","state":"RUNNING","at":"2025-13-01T12:00:00Z"}`, reason: contracts.ReasonInvalidField},
		{name: "at without zone", body: `{"v":2,"tenant":"a","groupId":"g","state":"RUNNING","at":"2025-03-01T12:00:00"}`, reason: contracts.ReasonInvalidField},
		{name: "state lower case", body: `{"v":2,"tenant":"a","groupId":"g","state":"paused"}`, reason: contracts.ReasonInvalidField},
		{name: "tenant null", body: `{"v":2,"tenant":null,"groupId":"g","state":"RUNNING"}`, reason: contracts.ReasonInvalidField},
	}
)

// TestSchemaAgreesWithDecoders validates every body of the corpus (the decode tests' tables and
// more) with the JSON Schema and with the Go decoder: they must agree, but for the cases that name
// one of the except… rules, where they must disagree. What Go accepts re-encodes to a body the
// schema accepts, and the dead letter of what it rejects is a valid dead letter.
func TestSchemaAgreesWithDecoders(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	for _, c := range corpora() {
		for _, tt := range c.cases {
			v, err := c.decode(tt)
			goOK := err == nil
			if goOK != (tt.reason == "") {
				t.Errorf("%s %q: decoder says %v, the table %q", c.def, tt.name, err, tt.reason)
				continue
			}
			schemaOK, why := schemaAccepts(t, c.def, []byte(tt.body))
			if tt.except == "" {
				if schemaOK != goOK {
					t.Errorf("%s %q: the schema accepts it %v (%s), the decoder %v (%v)\n%.300s", c.def, tt.name, schemaOK, why, goOK, err, tt.body)
				}
			} else {
				stricter, known := exceptions[tt.except]
				switch {
				case !known:
					t.Errorf("%s %q: unknown exception %q", c.def, tt.name, tt.except)
				case schemaOK == goOK:
					t.Errorf("%s %q: listed as exception %q, but both accept it %v", c.def, tt.name, tt.except, goOK)
				case stricter == "go" && goOK, stricter == "schema" && schemaOK:
					t.Errorf("%s %q: exception %q goes the other way (schema: %v, Go: %v)", c.def, tt.name, tt.except, schemaOK, goOK)
				}
				used[tt.except] = true
			}
			if goOK {
				enc, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if ok, why := schemaAccepts(t, c.def, enc); !ok {
					t.Errorf("%s %q: the schema refuses the re-encoded %.300s: %s", c.def, tt.name, enc, why)
				}
				continue
			}
			subject := tt.subjectOr("bulkaction.x.acme.g1")
			for _, limit := range []int{contracts.DefaultMaxMessageBytes, 1024} {
				dl, err := contracts.NewDeadLetter(subject, []byte(tt.body), err).Encode(limit)
				if err != nil {
					t.Fatal(err)
				}
				if ok, why := schemaAccepts(t, "deadLetter", dl); !ok {
					t.Errorf("%s %q: the schema refuses dead letter %.300s: %s", c.def, tt.name, dl, why)
				}
			}
		}
	}
	for e := range exceptions {
		if !used[e] {
			t.Errorf("no case of the corpus shows exception %q", e)
		}
	}
}

// TestSchemaAgreesOnMutations takes the valid bodies of the corpus and, for every property at the
// top and of the first item of its array, removes it, gives it a value of no type the contract
// uses, and sets it to null: the schema and the decoder must agree, but that a null may be read
// as absent by Go (exceptNullAbsent).
func TestSchemaAgreesOnMutations(t *testing.T) {
	t.Parallel()
	n := 0
	for _, c := range corpora() {
		for _, tt := range c.cases {
			if tt.reason != "" || tt.except != "" || tt.subject != "" || tt.lim != (contracts.Limits{}) || len(tt.body) > 4096 {
				continue
			}
			for _, m := range mutations(t, tt.body) {
				n++
				mc := tt
				mc.body = m.body
				_, err := c.decode(mc)
				goOK := err == nil
				schemaOK, why := schemaAccepts(t, c.def, []byte(m.body))
				if goOK != schemaOK && !(m.null && goOK && !schemaOK) {
					t.Errorf("%s %q, %s: the schema accepts it %v (%s), the decoder %v (%v)\n%s", c.def, tt.name, m.what, schemaOK, why, goOK, err, m.body)
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("only %d mutations", n)
	}
}

type mutation struct {
	what string
	body string
	null bool
}

func mutations(t *testing.T, body string) []mutation {
	t.Helper()
	parse := func() map[string]any {
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return m
	}
	enc := func(m map[string]any) string {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var out []mutation
	top := parse()
	keys := func(m map[string]any) []string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	// Each change applies to a fresh copy, to a property at the top or of the first item of an
	// array property.
	for _, k := range keys(top) {
		for _, ch := range changes {
			m := parse()
			ch.f(m, k)
			out = append(out, mutation{what: ch.what + " " + k, body: enc(m), null: ch.null})
		}
		items, ok := top[k].([]any)
		if !ok || len(items) == 0 {
			continue
		}
		item, ok := items[0].(map[string]any)
		if !ok {
			continue
		}
		for _, ik := range keys(item) {
			for _, ch := range changes {
				m := parse()
				ch.f(m[k].([]any)[0].(map[string]any), ik)
				out = append(out, mutation{what: ch.what + " " + k + "[0]." + ik, body: enc(m), null: ch.null})
			}
		}
	}
	return out
}

var changes = []struct {
	what string
	f    func(m map[string]any, k string)
	null bool
}{
	{"remove", func(m map[string]any, k string) { delete(m, k) }, false},
	{"set [true]", func(m map[string]any, k string) { m[k] = []any{true} }, false},
	{"set null", func(m map[string]any, k string) { m[k] = nil }, true},
}
