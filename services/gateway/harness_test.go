package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/services/gateway"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// server is a whole stack with the gateway, on real Redis, NATS and HTTP.
type server struct {
	t     *testing.T
	st    *stack.Stack
	base  string
	keys  map[string]string // tenant -> key; "*" -> the admin key
	cfg   *config.Config
	httpc *http.Client
}

// tenants of every test server, each with a key, and an admin key.
var tenants = []string{"acme", "hooli", "globex"}

// newServer starts every target, the gateway on a free port, with a key
// per tenant and an admin key under "*".
func newServer(t *testing.T, mutate func(*config.Config)) *server {
	t.Helper()
	g := pipelinetest.StartGateway(t, tenants, mutate)
	return &server{t: t, st: g.Stack, base: g.URL, keys: g.Keys, cfg: g.Config,
		httpc: &http.Client{Timeout: 2 * time.Minute}}
}

// reply is a response read whole.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response %d %q: %v", r.code, r.body, err)
	}
}

// problem decodes a problem+json body, checking its content type.
func (r reply) problem(t *testing.T) gateway.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d: Content-Type %q, want application/problem+json (body %s)", r.code, ct, r.body)
	}
	var p gateway.Problem
	r.json(t, &p)
	if p.Status != r.code || !strings.HasPrefix(p.Type, gateway.ProblemTypePrefix) || p.Title == "" {
		t.Fatalf("problem %+v of a %d response", p, r.code)
	}
	return p
}

// do sends a request with the key of who ("" = none) and headers h
// ("Name: value" each).
func (s *server) do(method, path, who string, body io.Reader, h ...string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+s.keys[who])
	}
	for _, kv := range h {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	resp, err := s.httpc.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b}
}

// ndjson returns n sleep jobs with ids <prefix><i>, one per line.
func ndjson(prefix string, n int, payload string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"jobId":"%s%d","type":"sleep","payload":%s}`+"\n", prefix, i, payload)
	}
	return b.String()
}

// submit posts NDJSON jobs and wants 202.
func (s *server) submit(who, gid, query, body string) gateway.SubmitResponse {
	s.t.Helper()
	r := s.do("POST", "/v1/groups/"+gid+"/jobs"+query, who, strings.NewReader(body), "Content-Type: application/x-ndjson")
	if r.code != http.StatusAccepted {
		s.t.Fatalf("submit %s: %d %s", gid, r.code, r.body)
	}
	var out gateway.SubmitResponse
	r.json(s.t, &out)
	return out
}

// group reads a group and wants 200.
func (s *server) group(who, path string) gateway.GroupView {
	s.t.Helper()
	r := s.do("GET", "/v1/groups/"+path, who, nil)
	if r.code != http.StatusOK {
		s.t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	var v gateway.GroupView
	r.json(s.t, &v)
	return v
}

// seen reads a group that may not exist yet: a submit is answered once its
// jobs are on SUBMIT, and the group appears when ingest has taken them. A
// group not found yet reads as the zero view; any other error fails.
func (s *server) seen(who, path string) gateway.GroupView {
	s.t.Helper()
	r := s.do("GET", "/v1/groups/"+path, who, nil)
	var v gateway.GroupView
	switch r.code {
	case http.StatusOK:
		r.json(s.t, &v)
	case http.StatusNotFound:
	default:
		s.t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	return v
}

// waitState polls a group until it reaches state.
func (s *server) waitState(who, path, state string) gateway.GroupView {
	s.t.Helper()
	var v gateway.GroupView
	testkit.WaitFor(s.t, path+" "+state, 60*time.Second, func() bool {
		r := s.do("GET", "/v1/groups/"+path, who, nil)
		if r.code != http.StatusOK {
			return false
		}
		r.json(s.t, &v)
		return string(v.State) == state
	})
	return v
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, name string
	data     map[string]any
}

// sse opens a group's event stream; events arrive on the channel, which is
// closed when the stream ends.
func (s *server) sse(ctx context.Context, who, gid, lastID string) (<-chan sseEvent, *http.Response) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/groups/"+gid+"/events", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.keys[who])
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	ch := make(chan sseEvent, 1024)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		var data bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data.Len() > 0 {
					_ = json.Unmarshal(data.Bytes(), &ev.data)
					ch <- ev
				}
				ev, data = sseEvent{}, bytes.Buffer{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				data.WriteString(line[6:])
			}
		}
	}()
	return ch, resp
}
