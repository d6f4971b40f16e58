package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Dockerfile builds a static binary with the Go version of go.mod into a non-root image
// whose entrypoint is the binary and whose command is a target, with the healthcheck command.
func TestDockerfile(t *testing.T) {
	df := readFile(t, "../../Dockerfile")
	gomod := readFile(t, "../../go.mod")
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	arg := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindStringSubmatch(df)
	if goVersion == nil || arg == nil || goVersion[1] != arg[1] {
		t.Errorf("Dockerfile GO_VERSION %v differs from go.mod's go %v", arg, goVersion)
	}
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(df, -1)
	if len(froms) < 2 || !strings.Contains(froms[len(froms)-1][1], "distroless/static") {
		t.Errorf("final stage %v: want a distroless static base", froms)
	}
	for _, want := range []string{
		"CGO_ENABLED=0",
		"go build -trimpath -ldflags=\"-s -w\" -o /out/bulkaction ./cmd/bulkaction",
		"COPY --from=build /out/bulkaction /usr/local/bin/bulkaction",
		"COPY --from=build /out/healthprobe /usr/local/bin/healthprobe",
		"USER 65532:65532",
		`HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 CMD ["/usr/local/bin/healthprobe"]`,
		`ENTRYPOINT ["/usr/local/bin/bulkaction"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	cmd := regexp.MustCompile(`(?m)^CMD \["([a-z]+)"`).FindStringSubmatch(df)
	if cmd == nil || !slices.Contains(Targets, cmd[1]) {
		t.Errorf("CMD %v: want a target", cmd)
	}
	if !regexp.MustCompile(`(?m)^EXPOSE .*\b8090\b`).MatchString(df) {
		t.Error("Dockerfile does not EXPOSE 8090, the gateway's API port")
	}
	// .dockerignore keeps what the build copies (web/ holds the dashboard the binary embeds).
	var ignored []string
	for _, l := range strings.Split(readFile(t, "../../.dockerignore"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			ignored = append(ignored, strings.TrimSuffix(l, "/"))
		}
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd/bulkaction", "internal", "pkg", "services", "web", "deployments/healthprobe"} {
		for _, ig := range ignored {
			if ok, _ := filepath.Match(ig, need); ok || need == ig || strings.HasPrefix(need, ig+"/") {
				t.Errorf(".dockerignore's %q drops %s, which the build needs", ig, need)
			}
		}
	}
	for _, must := range []string{".git", "**/.env"} {
		if !slices.Contains(ignored, must) {
			t.Errorf(".dockerignore must exclude %s", must)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
