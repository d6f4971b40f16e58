package gateway_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/services/gateway"
)

// openAPITool finds a tool of .tools/node (make openapi-tools installs them
// from npm at pinned versions): a test without it fails when CI=true and is
// skipped otherwise.
func openAPITool(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", ".tools", "node", "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing: run make openapi-tools (make test does)", name)
	}
	t.Skipf("%s is missing: make openapi-tools installs it", name)
	return ""
}

// TestOpenAPIGeneratedClients holds the OpenAPI document to the tools that
// read it: Spectral's OpenAPI rules find no error or warning, and the types
// openapi-typescript generates let a TypeScript client (testdata/openapi/
// client.ts, checked by tsc --strict) send an NDJSON body as text of
// SubmitJob lines and read each event of a stream as a typed object.
func TestOpenAPIGeneratedClients(t *testing.T) {
	t.Parallel()
	spectral, openapiTS, tsc := openAPITool(t, "spectral"), openAPITool(t, "openapi-typescript"), openAPITool(t, "tsc")
	dir := t.TempDir()
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, gateway.OpenAPI(), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	ruleset, err := filepath.Abs(filepath.Join("testdata", "openapi", "spectral.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	run(spectral, "lint", "--ruleset", ruleset, "--fail-severity", "warn", "openapi.json")

	run(openapiTS, "openapi.json", "-o", "api.d.ts")
	types, err := os.ReadFile(filepath.Join(dir, "api.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"application/x-ndjson": string;`, "GroupStreamEvent: {", "OverviewStreamEvent: {", `event: "state";`} {
		if !bytes.Contains(types, []byte(want)) {
			t.Errorf("the generated types lack %s", want)
		}
	}
	client, err := os.ReadFile(filepath.Join("testdata", "openapi", "client.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.ts"), client, 0o600); err != nil {
		t.Fatal(err)
	}
	run(tsc, "--strict", "--noEmit", "--skipLibCheck", "--target", "es2020", "--moduleResolution", "node", "client.ts")
}
