package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// The OpenAPI document (openapi.json, served at /v1/openapi.json) is held
// to the code from four sides: its own shape (TestOpenAPIDocument), the
// route table (TestOpenAPIRoutes), its examples (TestOpenAPIExamples), and
// the responses of the real handlers (TestOpenAPIMatchesHandlers), each
// validated against the schema documented for its operation, status code
// and media type.

// docURL names the document for the schema compiler.
const docURL = "urn:bulkaction:gateway:openapi"

// apiDoc is the parsed document and its schemas, compiled on demand.
type apiDoc struct {
	root map[string]any

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

var loadDoc = sync.OnceValues(func() (*apiDoc, error) {
	var root map[string]any
	if err := json.Unmarshal(gateway.OpenAPI(), &root); err != nil {
		return nil, fmt.Errorf("openapi.json is not JSON: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(gateway.OpenAPI()))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, inst); err != nil {
		return nil, err
	}
	return &apiDoc{root: root, compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
})

func doc(t *testing.T) *apiDoc {
	t.Helper()
	d, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pointer returns the JSON pointer of a path of keys.
func pointer(keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(k))
	}
	return b.String()
}

// get returns the value at a JSON pointer of the document, nil if none.
func (d *apiDoc) get(ptr string) any {
	var v any = d.root
	if ptr == "" {
		return v
	}
	for _, k := range strings.Split(ptr[1:], "/") {
		k = strings.NewReplacer("~1", "/", "~0", "~").Replace(k)
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// deref follows a {"$ref": "#/…"} object to what it names (once per hop).
func (d *apiDoc) deref(v any) (any, string) {
	ptr := ""
	for i := 0; i < 10; i++ {
		m, ok := v.(map[string]any)
		if !ok {
			return v, ptr
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v, ptr
		}
		ptr = strings.TrimPrefix(ref, "#")
		v = d.get(ptr)
	}
	return v, ptr
}

// schema compiles the schema at a JSON pointer of the document.
func (d *apiDoc) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.compiled[ptr]; ok {
		return s
	}
	s, err := d.compiler.Compile(docURL + "#" + ptr)
	if err != nil {
		t.Fatalf("compile the schema at %s: %v", ptr, err)
	}
	d.compiled[ptr] = s
	return s
}

// validate checks a JSON body against the schema at ptr.
func (d *apiDoc) validate(t *testing.T, ptr string, body []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w: %.200s", err, body)
	}
	return d.schema(t, ptr).Validate(inst)
}

// validateValue checks a value of the document (an example) against the
// schema at ptr.
func (d *apiDoc) validateValue(t *testing.T, ptr string, v any) error {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return d.validate(t, ptr, b)
}

// operation is one method of one path of the document.
type operation struct {
	method, path string // "GET", "/v1/groups/{groupId}"
	ptr          string // JSON pointer of the operation object
	obj          map[string]any
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func (d *apiDoc) operations(t *testing.T) []operation {
	t.Helper()
	paths, ok := d.root["paths"].(map[string]any)
	if !ok {
		t.Fatal("the document has no paths")
	}
	var out []operation
	for p, item := range paths {
		for _, m := range httpMethods {
			o, ok := item.(map[string]any)[m].(map[string]any)
			if !ok {
				continue
			}
			out = append(out, operation{method: strings.ToUpper(m), path: p, ptr: pointer("paths", p, m), obj: o})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	return out
}

func (o operation) id() string { s, _ := o.obj["operationId"].(string); return s }

// parameters returns the operation's parameters, those of its path item
// first, dereferenced, by "in:name".
func (d *apiDoc) parameters(o operation) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, list := range []any{d.get(pointer("paths", o.path, "parameters")), o.obj["parameters"]} {
		ps, _ := list.([]any)
		for _, p := range ps {
			v, _ := d.deref(p)
			m, _ := v.(map[string]any)
			if m != nil {
				out[fmt.Sprint(m["in"], ":", m["name"])] = m
			}
		}
	}
	return out
}

// response returns the dereferenced response object of an operation for a
// status code and its pointer; nil when the code is not documented.
func (d *apiDoc) response(o operation, code int) (map[string]any, string) {
	ptr := o.ptr + pointer("responses", strconv.Itoa(code))
	v, p := d.deref(d.get(ptr))
	if p != "" {
		ptr = p
	}
	m, _ := v.(map[string]any)
	return m, ptr
}

// codes returns the status codes an operation documents.
func (o operation) codes() []string {
	rs, _ := o.obj["responses"].(map[string]any)
	var out []string
	for c := range rs {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIDocument checks the document's shape: OpenAPI 3.1, operation
// ids, parameters, security, that every $ref resolves and every schema
// compiles, and that its limits, patterns and problem types are the code's.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	d := doc(t)
	if v, _ := d.root["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Errorf("openapi %q, want 3.1.x", v)
	}
	if d.get("/info/title") == nil || d.get("/info/version") == nil {
		t.Error("info lacks title or version")
	}
	if got := d.get("/servers/0/url"); got != "/" {
		t.Errorf("servers[0].url %v, want /", got)
	}
	if got := d.get("/components/securitySchemes/bearer/scheme"); got != "bearer" || d.get("/components/securitySchemes/bearer/type") != "http" {
		t.Errorf("bearer security scheme: %v", d.get("/components/securitySchemes/bearer"))
	}
	if got, _ := json.Marshal(d.root["security"]); string(got) != `[{"bearer":[]}]` {
		t.Errorf("security %s, want bearer for every operation", got)
	}

	// Every $ref resolves.
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if !strings.HasPrefix(ref, "#/") || d.get(ref[1:]) == nil {
					t.Errorf("%s: $ref %q does not resolve", at, ref)
				}
			}
			for k, e := range x {
				walk(e, at+pointer(k))
			}
		case []any:
			for i, e := range x {
				walk(e, at+pointer(strconv.Itoa(i)))
			}
		}
	}
	walk(d.root, "")

	// Every component schema compiles, and is used.
	schemas, _ := d.get("/components/schemas").(map[string]any)
	if len(schemas) == 0 {
		t.Fatal("no components/schemas")
	}
	raw := string(gateway.OpenAPI())
	for name := range schemas {
		d.schema(t, pointer("components", "schemas", name))
		if !strings.Contains(raw, `"#/components/schemas/`+name+`"`) {
			t.Errorf("components/schemas/%s is not used", name)
		}
	}

	ids := map[string]string{}
	for _, o := range d.operations(t) {
		what := o.method + " " + o.path
		id := o.id()
		if id == "" {
			t.Errorf("%s: no operationId", what)
		} else if prev, dup := ids[id]; dup {
			t.Errorf("%s: operationId %s is also %s's", what, id, prev)
		}
		ids[id] = what
		if o.obj["summary"] == nil || o.obj["description"] == nil {
			t.Errorf("%s: no summary or description", what)
		}
		params := d.parameters(o)
		// Path parameters: exactly those of the template.
		for _, m := range regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(o.path, -1) {
			p := params["path:"+m[1]]
			if p == nil || p["required"] != true {
				t.Errorf("%s: path parameter %s not declared as required", what, m[1])
			}
		}
		for k, p := range params {
			in, name, _ := strings.Cut(k, ":")
			if in == "path" && !strings.Contains(o.path, "{"+name+"}") {
				t.Errorf("%s: path parameter %s is not in the path", what, name)
			}
			if _, ok := p["schema"]; !ok {
				t.Errorf("%s: parameter %s has no schema", what, k)
			}
		}
		if p := params["path:groupId"]; p != nil {
			s, _ := d.deref(p["schema"])
			if s.(map[string]any)["pattern"] != contracts.IDPattern {
				t.Errorf("%s: groupId pattern %v, want %s", what, s.(map[string]any)["pattern"], contracts.IDPattern)
			}
		}
		if p := params["query:tenant"]; p == nil && strings.HasPrefix(o.path, "/v1/groups") {
			t.Errorf("%s: no tenant parameter", what)
		} else if p != nil {
			if s, _ := d.deref(p["schema"]); s.(map[string]any)["pattern"] != contracts.TenantPattern {
				t.Errorf("%s: tenant pattern %v, want %s", what, s.(map[string]any)["pattern"], contracts.TenantPattern)
			}
		}
		if o.path != "/v1/openapi.json" {
			if _, ok := o.obj["security"]; ok {
				t.Errorf("%s: overrides security, but needs an API key", what)
			}
			if r, _ := d.response(o, 401); r == nil {
				t.Errorf("%s: no 401 response", what)
			}
		} else if got, _ := json.Marshal(o.obj["security"]); string(got) != `[]` {
			t.Errorf("%s: needs no key, security %s", what, got)
		}
		// Every POST honours Idempotency-Key; nothing else does.
		if _, ok := params["header:Idempotency-Key"]; ok != (o.method == "POST") {
			t.Errorf("%s: Idempotency-Key documented %v", what, ok)
		}
		// Every response: a description, and a schema per media type;
		// errors are problem+json.
		for _, c := range o.codes() {
			code, err := strconv.Atoi(c)
			if err != nil {
				t.Errorf("%s: response %q is not a status code", what, c)
				continue
			}
			r, ptr := d.response(o, code)
			if r["description"] == nil {
				t.Errorf("%s %d: no description", what, code)
			}
			content, _ := r["content"].(map[string]any)
			for mt, m := range content {
				if _, ok := m.(map[string]any)["schema"]; !ok {
					t.Errorf("%s %d %s: no schema", what, code, mt)
				}
				d.schema(t, ptr+pointer("content", mt, "schema"))
			}
			if _, ok := content["application/problem+json"]; code >= 400 && (!ok || len(content) != 1) {
				t.Errorf("%s %d: an error is answered with application/problem+json only, documented %v", what, code, keys(content))
			}
			if code == 401 && d.get(ptr+pointer("headers", "WWW-Authenticate")) == nil {
				t.Errorf("%s 401: WWW-Authenticate not documented", what)
			}
			if code == 503 && d.get(ptr+pointer("headers", "Retry-After")) == nil {
				t.Errorf("%s 503: Retry-After not documented", what)
			}
		}
	}

	// Limits are the code's.
	for _, c := range []struct {
		ptr      string
		min, max int64
	}{
		{"/components/schemas/SealRequest/properties/total", 0, contracts.MaxTotal},
		{"/components/schemas/GroupView/properties/maxInFlight", 0, contracts.MaxInFlight},
		{"/components/schemas/GroupView/properties/basePriority", contracts.MinBasePriority, contracts.MaxBasePriority},
	} {
		if lo, hi := d.get(c.ptr+"/minimum"), d.get(c.ptr+"/maximum"); lo != float64(c.min) || hi != float64(c.max) {
			t.Errorf("%s: [%v, %v], want [%d, %d]", c.ptr, lo, hi, c.min, c.max)
		}
	}
	for _, c := range []struct {
		path, method, param string
		min, max            int64
	}{
		{"/v1/groups/{groupId}/jobs", "post", "basePriority", contracts.MinBasePriority, contracts.MaxBasePriority},
		{"/v1/groups/{groupId}/jobs", "post", "maxInFlight", 0, contracts.MaxInFlight},
		{"/v1/groups/{groupId}/jobs", "post", "total", 0, contracts.MaxTotal},
		{"/v1/groups/{groupId}/seal", "post", "total", 0, contracts.MaxTotal},
		{"/v1/groups", "get", "limit", 1, redisq.MaxListLimit},
		{"/v1/groups/{groupId}/failures", "get", "limit", 1, redisq.MaxFailuresPage},
	} {
		o := operation{method: strings.ToUpper(c.method), path: c.path, ptr: pointer("paths", c.path, c.method)}
		o.obj, _ = d.get(o.ptr).(map[string]any)
		p := d.parameters(o)["query:"+c.param]
		if p == nil {
			t.Errorf("%s %s: no %s parameter", c.method, c.path, c.param)
			continue
		}
		s := p["schema"].(map[string]any)
		if s["minimum"] != float64(c.min) || s["maximum"] != float64(c.max) {
			t.Errorf("%s %s %s: [%v, %v], want [%d, %d]", c.method, c.path, c.param, s["minimum"], s["maximum"], c.min, c.max)
		}
	}
	if got := d.get("/components/parameters/IdempotencyKey/schema/maxLength"); got != float64(gateway.MaxIdempotencyKey) {
		t.Errorf("Idempotency-Key maxLength %v, want %d", got, gateway.MaxIdempotencyKey)
	}
	var holds []string
	for _, h := range redisq.HoldReasons {
		holds = append(holds, string(h))
	}
	holds = append(holds, string(status.HoldAwaitingJobs)) // status adds it to the queue's holds
	if got := strs(d.get("/components/schemas/Hold/properties/reason/enum")); !slices.Equal(got, holds) {
		t.Errorf("hold reasons %v, want %v", got, holds)
	}
	var levels []string
	for _, l := range redisq.CongestionLevels {
		levels = append(levels, string(l))
	}
	if got := strs(d.get("/components/schemas/GroupStatus/properties/congestion/enum")); !slices.Equal(got, levels) {
		t.Errorf("congestion levels %v, want %v", got, levels)
	}
	for _, s := range strs(d.get("/components/schemas/GroupState/enum")) {
		if !contracts.GroupState(s).Valid() {
			t.Errorf("GroupState enum has %s", s)
		}
	}
	if n := len(strs(d.get("/components/schemas/GroupState/enum"))); n != 6 {
		t.Errorf("GroupState enum has %d states, want 6", n)
	}

	// The problem types are the slugs of problem.go, and docs/api.md
	// explains each under #problems.
	src, err := os.ReadFile("problem.go")
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*slug\w+\s*=\s*"([a-z-]+)"`).FindAllStringSubmatch(string(src), -1) {
		slugs = append(slugs, gateway.ProblemTypePrefix+m[1])
	}
	types := strs(d.get("/components/schemas/Problem/properties/type/enum"))
	slices.Sort(slugs)
	slices.Sort(types)
	if len(slugs) == 0 || !slices.Equal(slugs, types) {
		t.Errorf("Problem type enum %v, problem.go's slugs %v", types, slugs)
	}
	api, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, problems, ok := strings.Cut(string(api), `<a id="problems"></a>`)
	if !ok {
		t.Fatal(`docs/api.md has no <a id="problems"></a> anchor`)
	}
	for _, s := range slugs {
		if !strings.Contains(problems, "`"+strings.TrimPrefix(s, gateway.ProblemTypePrefix)+"`") {
			t.Errorf("docs/api.md#problems does not explain %s", s)
		}
	}
	for _, o := range d.operations(t) {
		if !strings.Contains(string(api), "`"+o.id()+"`") {
			t.Errorf("docs/api.md does not name operation %s (%s %s)", o.id(), o.method, o.path)
		}
	}

	// GroupEvent is the contract's groupEvent: the same properties, the
	// same required ones.
	var contract map[string]any
	if err := json.Unmarshal(contracts.Schema(), &contract); err != nil {
		t.Fatal(err)
	}
	ge := contract["$defs"].(map[string]any)["groupEvent"].(map[string]any)
	mine := d.get("/components/schemas/GroupEvent").(map[string]any)
	if a, b := keys(ge["properties"].(map[string]any)), keys(mine["properties"].(map[string]any)); !slices.Equal(a, b) {
		t.Errorf("GroupEvent properties %v, the contract's %v", b, a)
	}
	if a, b := strs(ge["required"]), strs(mine["required"]); !slices.Equal(a, b) {
		t.Errorf("GroupEvent required %v, the contract's %v", b, a)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func strs(v any) []string {
	a, _ := v.([]any)
	var out []string
	for _, e := range a {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestOpenAPIRoutes: the document's operations are the gateway's routes,
// with the same operationIds.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	d := doc(t)
	g := new(gateway.Gateway)
	routes := g.Routes()
	ids := g.OperationIDs()
	if len(routes) == 0 || len(ids) != len(routes) {
		t.Fatalf("%d routes, %d operation ids", len(routes), len(ids))
	}
	documented := map[string]string{}
	for _, o := range d.operations(t) {
		documented[o.method+" "+o.path] = o.id()
	}
	for _, r := range routes {
		id, ok := documented[r]
		switch {
		case !ok:
			t.Errorf("route %s is not in openapi.json", r)
		case id != ids[r]:
			t.Errorf("route %s: operationId %q in openapi.json, %q in the route table", r, id, ids[r])
		}
	}
	for op := range documented {
		if !slices.Contains(routes, op) {
			t.Errorf("openapi.json documents %s, which is no route", op)
		}
	}
}

// TestOpenAPIExamples: every example of the document is valid against the
// schema beside it: request bodies (NDJSON line by line), responses (an
// event stream event by event), parameters and headers.
func TestOpenAPIExamples(t *testing.T) {
	t.Parallel()
	d := doc(t)
	n := 0
	// mediaExamples checks the examples of a content map at ptr.
	mediaExamples := func(ptr string, required bool) {
		content, _ := d.get(ptr).(map[string]any)
		for mt, m := range content {
			mptr := ptr + pointer(mt)
			exs, _ := m.(map[string]any)["examples"].(map[string]any)
			if len(exs) == 0 && required {
				t.Errorf("%s: no examples", mptr)
			}
			for name, ex := range exs {
				n++
				v, _ := d.deref(ex)
				value := v.(map[string]any)["value"]
				what := mptr + " example " + strconv.Quote(name)
				switch mt {
				case "application/x-ndjson":
					s, _ := value.(string)
					lines := strings.Split(strings.TrimSpace(s), "\n")
					if s == "" {
						t.Errorf("%s: not NDJSON text", what)
					}
					if err := d.validateValue(t, mptr+"/schema", value); err != nil {
						t.Errorf("%s: %v", what, err)
					}
					for i, line := range lines {
						if err := d.validate(t, mptr+"/x-itemSchema", []byte(line)); err != nil {
							t.Errorf("%s, line %d: %v", what, i+1, err)
						}
					}
				case "text/event-stream":
					s, _ := value.(string)
					evs, err := readSSE(strings.NewReader(s))
					if err != nil || len(evs) == 0 {
						t.Errorf("%s: %d events, %v", what, len(evs), err)
					}
					for _, ev := range evs {
						if err := d.validateEvent(t, mptr, ev); err != nil {
							t.Errorf("%s: %v", what, err)
						}
					}
				default:
					if err := d.validateValue(t, mptr+"/schema", value); err != nil {
						t.Errorf("%s: %v", what, err)
					}
				}
			}
		}
	}
	for _, o := range d.operations(t) {
		if o.obj["requestBody"] != nil {
			mediaExamples(o.ptr+"/requestBody/content", true)
		}
		for _, c := range o.codes() {
			code, _ := strconv.Atoi(c)
			_, ptr := d.response(o, code)
			mediaExamples(ptr+"/content", o.id() != "getOpenAPI")
		}
	}
	for name, p := range d.get("/components/parameters").(map[string]any) {
		if ex, ok := p.(map[string]any)["example"]; ok {
			n++
			if err := d.validateValue(t, pointer("components", "parameters", name, "schema"), ex); err != nil {
				t.Errorf("parameter %s example: %v", name, err)
			}
		}
	}
	for name, h := range d.get("/components/headers").(map[string]any) {
		if ex, ok := h.(map[string]any)["example"]; ok {
			n++
			if err := d.validateValue(t, pointer("components", "headers", name, "schema"), ex); err != nil {
				t.Errorf("header %s example: %v", name, err)
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d examples", n)
	}
}

// sseEv is one Server-Sent Event, its data kept raw.
type sseEv struct {
	id, name string
	data     []byte
}

// readSSE reads events until the end of r.
func readSSE(r io.Reader) ([]sseEv, error) {
	var out []sseEv
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ev sseEv
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				ev.data = bytes.Clone(data.Bytes())
				out = append(out, ev)
			}
			ev, data = sseEv{}, bytes.Buffer{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(line[6:])
		default:
			return out, fmt.Errorf("unexpected line %q", line)
		}
	}
	return out, sc.Err()
}

// validateEvent checks an event of a text/event-stream media type (at
// mptr): its name is documented in x-sse-events, its data valid against
// that event's data schema, and the event parsed ({"event", "id", "data"})
// valid against the media type's x-itemSchema, the type generated clients
// get for it.
func (d *apiDoc) validateEvent(t *testing.T, mptr string, ev sseEv) error {
	t.Helper()
	eptr := mptr + pointer("x-sse-events", ev.name)
	if d.get(eptr) == nil {
		return fmt.Errorf("event %q is not documented in %s/x-sse-events", ev.name, mptr)
	}
	if err := d.validate(t, eptr+"/data", ev.data); err != nil {
		return fmt.Errorf("event %s %s: %w", ev.id, ev.name, err)
	}
	if d.get(mptr+"/x-itemSchema") == nil {
		return fmt.Errorf("%s has no x-itemSchema", mptr)
	}
	parsed := map[string]any{"event": ev.name, "data": json.RawMessage(ev.data)}
	if ev.id != "" {
		parsed["id"] = ev.id
	}
	b, err := json.Marshal(parsed)
	if err != nil {
		return fmt.Errorf("event %s %s: %w", ev.id, ev.name, err)
	}
	if err := d.validate(t, mptr+"/x-itemSchema", b); err != nil {
		return fmt.Errorf("event %s %s against x-itemSchema: %w", ev.id, ev.name, err)
	}
	return nil
}

// checker validates real responses against the document and records which
// documented responses were seen.
type checker struct {
	t    *testing.T
	d    *apiDoc
	s    *server
	seen map[string]bool // "operationId status"
}

// op returns the documented operation of a method and path template.
func (c *checker) op(method, tmpl string) operation {
	c.t.Helper()
	o := operation{method: method, path: tmpl, ptr: pointer("paths", tmpl, strings.ToLower(method))}
	var ok bool
	if o.obj, ok = c.d.get(o.ptr).(map[string]any); !ok {
		c.t.Fatalf("%s %s is not documented", method, tmpl)
	}
	return o
}

// check validates a response of the operation at method and tmpl (a path
// template of the document): its status code, media type, body and headers
// must be documented, the body valid against the schema.
func (c *checker) check(method, tmpl string, r reply, want int) reply {
	c.t.Helper()
	o := c.op(method, tmpl)
	what := fmt.Sprintf("%s %s → %d", method, tmpl, r.code)
	if want != 0 && r.code != want {
		c.t.Errorf("%s, want %d: %s", what, want, r.body)
	}
	c.seen[o.id()+" "+strconv.Itoa(r.code)] = true
	resp, ptr := c.d.response(o, r.code)
	if resp == nil {
		c.t.Errorf("%s: status %d is not documented (%s)", what, r.code, r.body)
		return r
	}
	if r.code == http.StatusNoContent {
		if len(r.body) != 0 {
			c.t.Errorf("%s: a body of %d bytes", what, len(r.body))
		}
		return r
	}
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil {
		c.t.Errorf("%s: Content-Type %q: %v", what, r.header.Get("Content-Type"), err)
		return r
	}
	mptr := ptr + pointer("content", mt)
	if c.d.get(mptr) == nil {
		c.t.Errorf("%s: media type %s is not documented", what, mt)
		return r
	}
	if mt == "text/event-stream" {
		evs, err := readSSE(bytes.NewReader(r.body))
		if err != nil || len(evs) == 0 {
			c.t.Errorf("%s: %d events, %v", what, len(evs), err)
		}
		for _, ev := range evs {
			if err := c.d.validateEvent(c.t, mptr, ev); err != nil {
				c.t.Errorf("%s: %v", what, err)
			}
		}
	} else if err := c.d.validate(c.t, mptr+"/schema", r.body); err != nil {
		c.t.Errorf("%s: the body does not match the documented schema: %v\n%s", what, err, r.body)
	}
	for _, h := range []string{"Idempotent-Replayed", "Retry-After", "WWW-Authenticate"} {
		if r.header.Get(h) != "" && c.d.get(ptr+pointer("headers", h)) == nil {
			c.t.Errorf("%s: header %s: %s is not documented", what, h, r.header.Get(h))
		}
	}
	if r.code == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
		c.t.Errorf("%s: no WWW-Authenticate", what)
	}
	if r.code >= 400 {
		r.problem(c.t)
	}
	return r
}

// request validates a request body the server accepted against the
// operation's request schema for its media type.
func (c *checker) request(method, tmpl, mediaType, body string) {
	c.t.Helper()
	o := c.op(method, tmpl)
	ptr := o.ptr + pointer("requestBody", "content", mediaType, "schema")
	if c.d.get(ptr) == nil {
		c.t.Errorf("%s %s: request media type %s is not documented", method, tmpl, mediaType)
		return
	}
	items := []string{body}
	if mediaType == "application/x-ndjson" {
		// the body is text, each line a job of x-itemSchema
		if c.d.get(ptr).(map[string]any)["type"] != "string" {
			c.t.Errorf("%s %s: the %s schema is not a string", method, tmpl, mediaType)
		}
		ptr = o.ptr + pointer("requestBody", "content", mediaType, "x-itemSchema")
		items = strings.Split(strings.TrimSpace(body), "\n")
	}
	for _, it := range items {
		if err := c.d.validate(c.t, ptr, []byte(it)); err != nil {
			c.t.Errorf("%s %s: an accepted request body does not match the documented schema: %v", method, tmpl, err)
		}
	}
}

// stream reads a whole event stream (it must end by itself).
func (c *checker) stream(who, path string, h ...string) reply {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.s.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.s.keys[who])
	for _, kv := range h {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("GET %s: the stream did not end: %v", path, err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b}
}

// firstEvents reads n events of a stream that does not end by itself, then
// leaves; the reply holds them.
func (c *checker) firstEvents(who, path string, n int) reply {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.s.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.s.keys[who])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	br := bufio.NewReader(resp.Body)
	for events, data := 0, false; events < n; {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			c.t.Fatalf("GET %s: %v after %q", path, err, b.String())
		}
		switch {
		case strings.HasPrefix(line, "data: "):
			data = true
		case line == "\n" && data:
			events, data = events+1, false
		}
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b.Bytes()}
}

// TestOpenAPIMatchesHandlers drives a real gateway through every operation
// and most of its documented answers, and validates each response against
// the schema the document gives for its operation, status code and media
// type, so the document cannot drift from the handlers. Every documented
// response must be produced, but for those listed in notExercised.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) {
		c.MaxMsgSize, c.MaxPayloadBytes = 64<<10, 8<<10
		c.GatewayBodyIdleTimeout = time.Second
		c.HTTPAllowedHosts, c.CallbackRetryFor = []string{"127.0.0.1"}, time.Second
	})
	c := &checker{t: t, d: doc(t), s: s, seen: map[string]bool{}}
	const (
		jobs     = "/v1/groups/{groupId}/jobs"
		group    = "/v1/groups/{groupId}"
		groups   = "/v1/groups"
		seal     = "/v1/groups/{groupId}/seal"
		failures = "/v1/groups/{groupId}/failures"
		retry    = "/v1/groups/{groupId}/retry-failed"
		events   = "/v1/groups/{groupId}/events"
	)
	nd := "Content-Type: application/x-ndjson"
	js := "Content-Type: application/json"

	// The document itself, without a key.
	r := c.check("GET", "/v1/openapi.json", s.do("GET", "/v1/openapi.json", "", nil), 200)
	if !bytes.Equal(r.body, gateway.OpenAPI()) {
		t.Error("GET /v1/openapi.json is not the embedded document")
	}

	// Jobs, NDJSON, with settings, a total and an Idempotency-Key; the
	// replay; the key with another body.
	body := ndjson("ok", 4, `{"ms":1}`) + ndjson("bad", 2, `{"ms":1,"permanentFailRate":1}`)
	c.request("POST", jobs, "application/x-ndjson", body)
	q := "/v1/groups/mixed/jobs?total=6&priority=high&basePriority=-5&maxInFlight=10"
	c.check("POST", jobs, s.do("POST", q, "acme", strings.NewReader(body), nd, "Idempotency-Key: mixed-1"), 202)
	if r := c.check("POST", jobs, s.do("POST", q, "acme", strings.NewReader(body), nd, "Idempotency-Key: mixed-1"), 202); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: headers %v", r.header)
	}
	c.check("POST", jobs, s.do("POST", q, "acme", strings.NewReader(ndjson("x", 1, "{}")), nd, "Idempotency-Key: mixed-1"), 409)

	// Jobs, a JSON array, no total; then the group is read while it runs,
	// and sealed.
	arr := `[{"jobId":"a","type":"sleep","payload":{"ms":1}},{"jobId":"b","type":"sleep"}]`
	c.request("POST", jobs, "application/json", arr)
	c.check("POST", jobs, s.do("POST", "/v1/groups/arr/jobs", "acme", strings.NewReader(arr), js), 202)
	testkit.WaitFor(t, "the group", 10*time.Second, func() bool { return s.do("GET", "/v1/groups/arr", "acme", nil).code == 200 })
	c.check("GET", group, s.do("GET", "/v1/groups/arr", "acme", nil), 200)
	c.request("POST", seal, "application/json", `{"total":2}`)
	c.check("POST", seal, s.do("POST", "/v1/groups/arr/seal", "acme", strings.NewReader(`{"total":2}`)), 202)

	// A group that runs long enough to be paused, resumed and cancelled,
	// read while it waits (position, holds).
	c.check("POST", jobs, s.do("POST", "/v1/groups/slow/jobs?maxInFlight=1", "acme", strings.NewReader(ndjson("s", 40, `{"ms":100}`)), nd), 202)
	testkit.WaitFor(t, "the group", 10*time.Second, func() bool { return s.do("GET", "/v1/groups/slow", "acme", nil).code == 200 })
	c.check("GET", group, s.do("GET", "/v1/groups/slow", "acme", nil), 200)
	c.check("GET", groups, s.do("GET", "/v1/groups?view=full", "acme", nil), 200)
	for _, verb := range []string{"pause", "resume", "cancel"} {
		tmpl := "/v1/groups/{groupId}/" + verb
		c.check("POST", tmpl, s.do("POST", "/v1/groups/slow/"+verb, "acme", nil, "Idempotency-Key: slow-"+verb), 202)
		c.check("POST", tmpl, s.do("POST", "/v1/groups/slow/"+verb, "acme", nil, "Idempotency-Key: slow-"+verb), 202)
		c.check("POST", tmpl, s.do("POST", "/v1/groups/slow/"+verb+"?tenant=acme", "acme", nil, "Idempotency-Key: slow-"+verb), 409)
		c.check("POST", tmpl, s.do("POST", "/v1/groups/slow/"+verb, "acme", nil, "Idempotency-Key: bad\tkey"), 400)
		c.check("POST", tmpl, s.do("POST", "/v1/groups/slow/"+verb+"?tenant=hooli", "acme", nil), 404)
	}

	// Completed groups: read, listed, their failures, their events.
	s.waitState("acme", "mixed", "COMPLETED")
	s.waitState("acme", "arr", "COMPLETED")
	c.check("GET", group, s.do("GET", "/v1/groups/mixed", "acme", nil), 200)
	c.check("GET", group, s.do("GET", "/v1/groups/mixed?tenant=acme", "*", nil), 200)
	c.check("GET", groups, s.do("GET", "/v1/groups?state=COMPLETED,cancelled&limit=1", "acme", nil), 200)
	c.check("GET", groups, s.do("GET", "/v1/groups?view=full&limit=50", "*", nil), 200)
	c.check("GET", groups, s.do("GET", "/v1/groups?tenant=hooli", "acme", nil), 200)
	r = c.check("GET", failures, s.do("GET", "/v1/groups/mixed/failures?limit=1", "acme", nil), 200)
	var fl gateway.FailureList
	r.json(t, &fl)
	if fl.Next == nil {
		t.Fatalf("failures page 1: %s", r.body)
	}
	c.check("GET", failures, s.do("GET", "/v1/groups/mixed/failures?limit=1000&cursor="+*fl.Next, "acme", nil), 200)
	failure := "/v1/groups/{groupId}/failures/{jobId}"
	c.check("GET", failure, s.do("GET", "/v1/groups/mixed/failures/"+fl.Failures[0].JobID, "acme", nil), 200)
	c.check("GET", failure, s.do("GET", "/v1/groups/mixed/failures/nope", "acme", nil), 404)
	c.check("GET", failure, s.do("GET", "/v1/groups/mixed/failures/a%20b", "acme", nil), 400)
	c.check("GET", events, c.stream("acme", "/v1/groups/mixed/events"), 200)
	c.check("GET", events, c.stream("acme", "/v1/groups/mixed/events", "Last-Event-ID: 1"), 200)

	// retry-failed: the default id, a named one, one with nothing to retry.
	r = c.check("POST", retry, s.do("POST", "/v1/groups/mixed/retry-failed", "acme", nil), 202)
	var rr gateway.RetryResponse
	r.json(t, &rr)
	c.request("POST", retry, "application/json", `{"groupId":"mixed-again"}`)
	c.check("POST", retry, s.do("POST", "/v1/groups/mixed/retry-failed", "acme", strings.NewReader(`{"groupId":"mixed-again"}`)), 202)
	// 202: the retry groups exist once a fetcher has ingested them (a
	// retry into an existing group is 409, below).
	testkit.WaitFor(t, "the retry groups", 0, func() bool {
		return s.do("GET", "/v1/groups/"+rr.GroupID, "acme", nil).code == http.StatusOK &&
			s.do("GET", "/v1/groups/mixed-again", "acme", nil).code == http.StatusOK
	})
	c.check("GET", group, s.do("GET", "/v1/groups/"+rr.GroupID, "acme", nil), 200)
	c.check("GET", group, s.do("GET", "/v1/groups/mixed", "acme", nil), 200)
	c.check("POST", retry, s.do("POST", "/v1/groups/arr/retry-failed", "acme", nil), 409)
	c.check("POST", retry, s.do("POST", "/v1/groups/mixed/retry-failed", "acme", strings.NewReader(`{"groupId":"mixed-again"}`)), 409)
	c.check("POST", retry, s.do("POST", "/v1/groups/mixed/retry-failed", "acme", strings.NewReader(`{"groupId":"mixed"}`)), 400)
	c.check("POST", retry, s.do("POST", "/v1/groups/none/retry-failed", "acme", nil), 404)

	// Completion callbacks: the tenant's secret; a callback that fails (no
	// receiver listens) and is retried by hand; one not due yet.
	cbs, cbr := "/v1/callback-secret", "/v1/groups/{groupId}/callback/retry"
	c.check("GET", cbs, s.do("GET", cbs, "acme", nil), 200)
	c.check("GET", cbs, s.do("GET", cbs, "*", nil), 400)
	c.check("POST", cbs, s.do("POST", cbs, "acme", nil), 201)
	c.check("POST", cbs, s.do("POST", cbs, "*", nil), 400)
	c.check("GET", cbs, s.do("GET", cbs+"?tenant=acme", "*", nil), 200)
	nobody := "callbackUrl=" + url.QueryEscape("http://127.0.0.1:9/done")
	c.check("POST", jobs, s.do("POST", "/v1/groups/cb/jobs?total=1&"+nobody, "acme", strings.NewReader(ndjson("c", 1, `{"ms":1}`)), nd), 202)
	c.check("POST", jobs, s.do("POST", "/v1/groups/cb-open/jobs?"+nobody, "acme", strings.NewReader(ndjson("c", 1, `{"ms":1}`)), nd), 202)
	c.check("POST", jobs, s.do("POST", "/v1/groups/cb-bad/jobs?callbackUrl=ftp%3A%2F%2Fx", "acme", strings.NewReader(ndjson("c", 1, `{"ms":1}`)), nd), 400)
	testkit.WaitFor(t, "the callback failed", 30*time.Second, func() bool {
		return strings.Contains(string(s.do("GET", "/v1/groups/cb", "acme", nil).body), `"state":"failed"`)
	})
	c.check("GET", group, s.do("GET", "/v1/groups/cb", "acme", nil), 200)
	c.check("POST", cbr, s.do("POST", "/v1/groups/cb/callback/retry", "acme", nil), 200)
	testkit.WaitFor(t, "the group", 10*time.Second, func() bool { return s.do("GET", "/v1/groups/cb-open", "acme", nil).code == 200 })
	c.check("POST", cbr, s.do("POST", "/v1/groups/cb-open/callback/retry", "acme", nil), 409)
	c.check("POST", cbr, s.do("POST", "/v1/groups/none/callback/retry", "acme", nil), 404)
	c.check("POST", cbr, s.do("POST", "/v1/groups/cb/callback/retry", "*", nil), 400)

	// A tenant's default sending windows.
	tw := "/v1/windows"
	wbody := `{"windows":[{"zone":"Europe/Berlin","days":["sat"],"from":"10:00","to":"14:00"}]}`
	c.request("PUT", tw, "application/json", wbody)
	c.check("PUT", tw, s.do("PUT", tw, "acme", strings.NewReader(wbody), js), 200)
	c.check("PUT", tw, s.do("PUT", tw, "acme", strings.NewReader(`{"windows":[{"zone":"Mars/Olympus","days":["mon"],"from":"09:00","to":"17:00"}]}`), js), 400)
	c.check("PUT", tw, s.do("PUT", tw, "*", strings.NewReader(`{"windows":[]}`), js), 400)
	c.check("PUT", tw, s.do("PUT", tw+"?tenant=hooli", "acme", strings.NewReader(`{"windows":[]}`), js), 404)
	c.check("GET", tw, s.do("GET", tw, "acme", nil), 200)
	c.check("GET", tw, s.do("GET", tw+"?tenant=globex", "*", nil), 200)
	c.check("GET", tw, s.do("GET", tw, "*", nil), 400)
	c.check("GET", tw, s.do("GET", tw+"?tenant=hooli", "acme", nil), 404)
	c.check("PUT", tw, s.do("PUT", tw, "acme", strings.NewReader(`{"windows":[]}`), js), 200)

	// Moving a group's start.
	sched := "/v1/groups/{groupId}/schedule"
	nb := `{"notBefore":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
	c.check("POST", sched, s.do("POST", "/v1/groups/cb-open/schedule", "acme", strings.NewReader(nb), "Idempotency-Key: sched"), 202)
	c.check("POST", sched, s.do("POST", "/v1/groups/cb-open/schedule", "acme", strings.NewReader(`{"notBefore":"2026-11-27T09:00:00Z"}`), "Idempotency-Key: sched"), 409)
	c.check("POST", sched, s.do("POST", "/v1/groups/mixed/schedule", "acme", strings.NewReader(`{"notBefore":"soon"}`)), 400)
	c.check("POST", sched, s.do("POST", "/v1/groups/none/schedule", "acme", strings.NewReader(nb)), 404)

	// The dashboard's operations.
	c.check("GET", "/v1/groups/{groupId}/progress", s.do("GET", "/v1/groups/mixed/progress", "acme", nil), 200)
	c.check("GET", "/v1/groups/{groupId}/progress", s.do("GET", "/v1/groups/mixed/progress", "*", nil), 400)
	c.check("GET", "/v1/groups/{groupId}/progress", s.do("GET", "/v1/groups/none/progress", "acme", nil), 404)
	for _, who := range []string{"acme", "*"} {
		c.check("GET", "/v1/overview", s.do("GET", "/v1/overview", who, nil), 200)
		c.check("GET", "/v1/overview/events", c.firstEvents(who, "/v1/overview/events", 2), 200)
		c.check("GET", "/v1/tenants", s.do("GET", "/v1/tenants", who, nil), 200)
	}
	c.check("GET", "/v1/overview", s.do("GET", "/v1/overview?tenant=acme", "*", nil), 200)
	c.check("GET", "/v1/overview", s.do("GET", "/v1/overview?tenant=a%20b", "*", nil), 400)
	c.check("GET", "/v1/overview", s.do("GET", "/v1/overview?tenant=hooli", "acme", nil), 404)
	c.check("GET", "/v1/overview/events", s.do("GET", "/v1/overview/events?tenant=a%20b", "*", nil), 400)
	c.check("GET", "/v1/overview/events", s.do("GET", "/v1/overview/events?tenant=hooli", "acme", nil), 404)

	// Errors.
	c.check("POST", jobs, s.do("POST", "/v1/groups/mixed/jobs", "acme", strings.NewReader(body), nd), 409)
	c.check("POST", jobs, s.do("POST", "/v1/groups/new/jobs?priority=urgent", "acme", strings.NewReader(body), nd), 400)
	c.check("POST", jobs, s.do("POST", "/v1/groups/new/jobs", "acme", strings.NewReader(`{"jobId":"a"}`+"\n"), nd), 400)
	c.check("POST", jobs, s.do("POST", "/v1/groups/new/jobs", "acme", strings.NewReader(`[{"jobId":"a","type":"t","payload":"`+strings.Repeat("x", 9<<10)+`"}]`), js), 400)
	c.check("POST", jobs, s.do("POST", "/v1/groups/new/jobs", "acme", strings.NewReader(`{"jobId":"a","type":"t","payload":"`+strings.Repeat("x", 70<<10)+`"}`), nd), 413)
	c.check("POST", jobs, s.do("POST", "/v1/groups/new/jobs", "acme", strings.NewReader(body), "Content-Type: text/plain"), 415)
	c.check("POST", jobs, s.do("POST", "/v1/groups/new/jobs?tenant=hooli", "acme", strings.NewReader(body), nd), 404)
	c.check("POST", jobs, s.do("POST", "/v1/groups/a%20b/jobs", "acme", strings.NewReader(body), nd), 400)
	c.check("POST", seal, s.do("POST", "/v1/groups/arr/seal", "acme", nil), 400)
	c.check("POST", seal, s.do("POST", "/v1/groups/arr/seal", "acme", strings.NewReader(`{"total":-1}`)), 400)
	c.check("POST", seal, s.do("POST", "/v1/groups/arr/seal", "acme", strings.NewReader(`{"total":2}`), "Idempotency-Key: seal"), 202)
	c.check("POST", seal, s.do("POST", "/v1/groups/arr/seal", "acme", strings.NewReader(`{"total":3}`), "Idempotency-Key: seal"), 409)
	c.check("POST", seal, s.do("POST", "/v1/groups/arr/seal?tenant=hooli", "acme", nil), 404)
	c.check("GET", group, s.do("GET", "/v1/groups/arr", "*", nil), 400)
	c.check("GET", group, s.do("GET", "/v1/groups/none", "acme", nil), 404)
	c.check("GET", group, s.do("GET", "/v1/groups/mixed", "hooli", nil), 404)
	c.check("GET", groups, s.do("GET", "/v1/groups?state=DONE", "acme", nil), 400)
	c.check("GET", groups, s.do("GET", "/v1/groups?cursor=zzz", "acme", nil), 400)
	c.check("GET", groups, s.do("GET", "/v1/groups?view=full&limit=500", "acme", nil), 400)
	c.check("GET", failures, s.do("GET", "/v1/groups/mixed/failures?limit=0", "acme", nil), 400)
	c.check("GET", failures, s.do("GET", "/v1/groups/none/failures", "acme", nil), 404)
	c.check("GET", events, s.do("GET", "/v1/groups/mixed/events", "acme", nil, "Last-Event-ID: abc"), 400)
	c.check("GET", events, s.do("GET", "/v1/groups/none/events", "acme", nil), 404)
	c.check("GET", events, s.do("GET", "/v1/groups/none/events", "acme", nil, "Last-Event-ID: 5"), 404)
	// Resumed after the final event: nothing more to send.
	c.check("GET", events, s.do("GET", "/v1/groups/mixed/events", "acme", nil, "Last-Event-ID: 1000000"), 204)
	// Over a tenant quota: nothing published.
	if err := s.st.Conns.Queue.SetTenantQuota(context.Background(), "globex", redisq.QuotaQueuedJobs, 2); err != nil {
		t.Fatal(err)
	}
	c.check("POST", jobs, s.do("POST", "/v1/groups/quota/jobs", "globex", strings.NewReader(ndjson("q", 3, "{}")), nd), 429)
	// No route: a problem, not an operation of the document. A known path
	// with another method is 405 with Allow; an unknown path 404.
	for _, m := range []string{"DELETE", "PUT", "GET"} {
		r := s.do(m, "/v1/groups/mixed/jobs", "acme", nil)
		if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
			t.Errorf("%s /v1/groups/mixed/jobs: %d, Allow %q; docs/api.md says 405 with Allow: POST", m, r.code, r.header.Get("Allow"))
		}
		r.problem(t)
	}
	if r := s.do("GET", "/v1/nothing", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("GET /v1/nothing: %d, want 404", r.code)
	} else {
		r.problem(t)
	}
	// Without a key, or with an unknown one, every operation but the
	// document is 401.
	for route, id := range new(gateway.Gateway).OperationIDs() {
		if id == "getOpenAPI" {
			continue
		}
		method, tmpl, _ := strings.Cut(route, " ")
		path := strings.ReplaceAll(tmpl, "{groupId}", "mixed")
		c.check(method, tmpl, s.do(method, path, "", nil), 401)
		c.check(method, tmpl, s.do(method, path, "", nil, "Authorization: Bearer bak_unknown"), 401)
	}

	// The limits at the door: a body past 1 MiB (413), a stalled jobs body
	// (408), and a tenant whose request rate is spent for an hour (429).
	for route, id := range new(gateway.Gateway).OperationIDs() {
		method, tmpl, _ := strings.Cut(route, " ")
		if (method != "POST" && method != "PUT") || id == "submitJobs" {
			continue
		}
		path := strings.ReplaceAll(tmpl, "{groupId}", "mixed")
		c.check(method, tmpl, s.do(method, path, "acme", strings.NewReader(strings.Repeat(" ", 1<<20+1))), 413)
	}
	stalled, stall := io.Pipe()
	go func() { _, _ = io.WriteString(stall, ndjson("st", 2, "{}")) }()
	c.check("POST", jobs, s.do("POST", "/v1/groups/stalled/jobs", "acme", stalled, nd), 408)
	_ = stall.Close()
	spent := time.Now().Add(time.Hour).UnixMilli()
	rdb, keys := pipelinetest.Raw(s.st)
	if err := rdb.Set(context.Background(), keys.DoorState("globex", "requests"), spent, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for route, id := range new(gateway.Gateway).OperationIDs() {
		if id == "getOpenAPI" {
			continue
		}
		method, tmpl, _ := strings.Cut(route, " ")
		path := strings.ReplaceAll(tmpl, "{groupId}", "mixed")
		r := c.check(method, tmpl, s.do(method, path, "globex", nil), 429)
		if r.header.Get("RateLimit") == "" || r.header.Get("RateLimit-Policy") == "" {
			t.Errorf("%s: a 429 without RateLimit headers", route)
		}
	}

	// Every documented response was produced, but those that need a
	// failing Redis or NATS, or a request that runs for 30 s.
	notExercised := map[string]bool{"503": true}
	for _, o := range c.d.operations(t) {
		for _, code := range o.codes() {
			if !c.seen[o.id()+" "+code] && !notExercised[code] {
				t.Errorf("%s %d is documented but no request of the test produced it", o.id(), mustAtoi(code))
			}
		}
	}
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }
