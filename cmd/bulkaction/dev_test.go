package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/demo"
	"github.com/bulkaction/bulkaction/internal/devenv"
)

// devEnv points `dev` at a fresh data directory and free ports.
func devEnv(t *testing.T) (dir string, natsPort, redisPort int) {
	t.Helper()
	clearEnv(t)
	dir = t.TempDir()
	natsPort, redisPort = freePort(t), freePort(t)
	for k, v := range map[string]string{
		"DEV_DIR": dir, "DEV_NATS_PORT": strconv.Itoa(natsPort), "DEV_REDIS_PORT": strconv.Itoa(redisPort),
		"HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
	} {
		t.Setenv(config.Prefix+"_"+k, v)
	}
	return dir, natsPort, redisPort
}

func portClosed(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// The small demo runs the same on redis-server and on miniredis: exit 0,
// every group COMPLETED with all its jobs, a summary with verdicts.
func TestDevDemoSmall(t *testing.T) {
	w, err := demo.ForScale(demo.ScaleSmall)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{redisChild, redisMini} {
		t.Run(kind, func(t *testing.T) {
			if _, err := exec.LookPath("redis-server"); err != nil && kind == redisChild {
				t.Fatal("redis-server is not on PATH (scripts/ensure-redis.sh installs it)")
			}
			dir, natsPort, redisPort := devEnv(t)
			// The demo itself gives up after a minute without progress; this
			// bound is for a machine much slower than a developer's.
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			start := time.Now()
			out, errOut, err := run(ctx, "", "dev", "--demo", "--scale", "small", "--redis", kind)
			if err != nil {
				t.Fatalf("dev --demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
			}
			t.Logf("demo took %s", time.Since(start).Round(time.Millisecond))
			// dev warns about nothing it set up itself; on miniredis it
			// says once that it is for trying things out, and the scripts
			// run there as on Redis (no batch fails and is redelivered).
			for _, l := range strings.Split(errOut, "\n") {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					if kind == redisMini && strings.Contains(l, "using the in-process miniredis") {
						continue
					}
					t.Errorf("dev --demo logged: %s", l)
				}
			}
			if testing.Verbose() {
				t.Log(out, errOut)
			}
			if !strings.Contains(out, "["+kind+"]") {
				t.Errorf("the banner does not name Redis %s:\n%s", kind, out)
			}
			if !strings.Contains(out, fmt.Sprintf("export %s_NATS_URL=nats://127.0.0.1:%d %s_REDIS_URL=redis://127.0.0.1:%d/0", config.Prefix, natsPort, config.Prefix, redisPort)) {
				t.Errorf("no export line for the other verbs:\n%s", out)
			}
			if !strings.Contains(out, fmt.Sprintf(" %s_GLOBAL_RPS=%d\n", config.Prefix, w.GlobalRps)) {
				t.Errorf("the export line does not carry the demo's rate:\n%s", out)
			}
			_, summary, ok := strings.Cut(out, "\nSummary (")
			if !ok {
				t.Fatalf("no summary:\n%s", out)
			}
			for _, g := range w.Groups {
				name := g.Tenant + "/" + g.ID // rows name the tenant and the group
				var row []string
				for _, l := range strings.Split(summary, "\n") {
					if f := strings.Fields(l); len(f) > 0 && f[0] == name && row == nil {
						row = f // the table comes before the verdicts
					}
				}
				// group priority state jobs succeeded failed makespan throttles/job finished-at
				if len(row) != 9 || row[1] != string(g.Priority) || row[2] != "COMPLETED" || row[3] != strconv.Itoa(g.Jobs) {
					t.Errorf("summary row of %s = %q", name, row)
					continue
				}
				ok, _ := strconv.Atoi(row[4])
				failed, _ := strconv.Atoi(row[5])
				if ok+failed != g.Jobs {
					t.Errorf("%s: %d succeeded + %d failed != %d jobs", name, ok, failed, g.Jobs)
				}
			}
			if !strings.Contains(summary, "umbrella/vip-recall (high priority, submitted at") {
				t.Errorf("no verdict on the urgent group:\n%s", summary)
			}
			// The small tenants (globex's four groups among them: a tenant
			// that splits its work still gets a tenant's share) did not wait
			// behind acme's newsletter.
			var early string
			for _, l := range strings.Split(summary, "\n") {
				if strings.HasSuffix(l, "the small tenants did not wait behind the big one.") {
					early, _, _ = strings.Cut(l, " finished by ")
				}
			}
			if early == "" {
				t.Errorf("no verdict on the small tenants:\n%s", summary)
			}
			earlyOnes := strings.Split(strings.ReplaceAll(early, " and ", ", "), ", ")
			// (umbrella/survey is not among them: its "sms" jobs run behind
			// a per-type rate limit, 5 jobs/s at this scale.)
			for _, g := range []string{"globex/sync-eu", "globex/sync-us", "globex/sync-apac", "globex/sync-latam", "initech/billing"} {
				if early != "" && !slices.Contains(earlyOnes, g) {
					t.Errorf("%s is not among the groups that finished before acme/newsletter was half done (%s):\n%s", g, early, summary)
				}
			}
			if !strings.Contains(out, "global: admitted") {
				t.Errorf("no live lines:\n%s", out)
			}
			// Everything stopped: the servers' ports are closed again.
			if !portClosed(natsPort) || !portClosed(redisPort) {
				t.Errorf("a dev server is still listening (nats %v, redis %v)", !portClosed(natsPort), !portClosed(redisPort))
			}
			if _, err := os.Stat(filepath.Join(dir, "nats")); err != nil {
				t.Errorf("no JetStream store under the data directory: %v", err)
			}
			if kind == redisChild {
				if _, err := os.Stat(filepath.Join(dir, "redis", "dump.rdb")); err != nil {
					t.Errorf("redis-server left no snapshot: %v", err)
				}
			}
		})
	}
}

// Plain `dev` resumes the data of the last run; --fresh starts clean.
func TestDevResumesAndFresh(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not on PATH (scripts/ensure-redis.sh installs it)")
	}
	_, natsPort, redisPort := devEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// dev takes BULKACTION_NATS_URL/REDIS_URL as servers to use instead of
	// its own, so they are set only while the verbs run.
	natsVar, redisVar := config.Prefix+"_NATS_URL", config.Prefix+"_REDIS_URL"
	t.Setenv(natsVar, "")
	t.Setenv(redisVar, "")
	os.Unsetenv(natsVar)
	os.Unsetenv(redisVar)
	verb := func(stdin string, args ...string) (string, error) {
		t.Helper()
		os.Setenv(natsVar, fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
		os.Setenv(redisVar, fmt.Sprintf("redis://127.0.0.1:%d/0", redisPort))
		defer os.Unsetenv(natsVar)
		defer os.Unsetenv(redisVar)
		out, _, err := run(ctx, stdin, args...)
		return out, err
	}

	// startDev runs `dev args...` until the returned stop is called, which
	// returns dev's error.
	startDev := func(args ...string) (stop func() error) {
		t.Helper()
		devCtx, devCancel := context.WithCancel(ctx)
		out, errw := &syncBuffer{}, &syncBuffer{}
		done := make(chan error, 1)
		go func() { done <- runTo(devCtx, out, errw, "", append([]string{"dev"}, args...)...) }()
		for !strings.Contains(out.String(), "bulkaction dev:") {
			select {
			case err := <-done:
				devCancel()
				t.Fatalf("dev ended early: %v\n%s\n%s", err, out, errw)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return func() error {
			devCancel()
			err := <-done
			if !strings.Contains(out.String(), "bulkaction dev stopped") {
				t.Errorf("dev did not say it stopped:\n%s", out)
			}
			if !portClosed(natsPort) || !portClosed(redisPort) {
				t.Error("a dev server is still listening after dev stopped")
			}
			return err
		}
	}

	stop := startDev()
	if _, err := verb(strings.Repeat(`{"ms":1}`+"\n", 50), "submit", "-g", "keep", "-t", "sleep", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if out, err := verb("", "watch", "keep"); err != nil || !strings.Contains(out, "keep COMPLETED: 50 jobs (50 succeeded") {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	if err := stop(); err != nil {
		t.Fatalf("dev after Ctrl-C: %v", err)
	}

	stop = startDev()
	out, err := verb("", "status", "keep", "--json")
	if err != nil || !strings.Contains(out, `"state": "COMPLETED"`) || !strings.Contains(out, `"succeeded": 50`) {
		t.Errorf("after a restart the group is not there as it was: %v\n%s", err, out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	stop = startDev("--fresh")
	if _, err := verb("", "status", "keep"); err == nil || !strings.Contains(err.Error(), "group not found") {
		t.Errorf("after --fresh: status keep = %v, want group not found", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestDevBannerHidesCredentials: external servers given with passwords
// are shown redacted and not repeated in the export line.
func TestDevBannerHidesCredentials(t *testing.T) {
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.GlobalRps = 7 // differs from the default, so the export line is printed
	env := &devenv.Env{NatsURL: "nats://u:nats-s3cret@127.0.0.1:4222", RedisURL: "redis://:redis-s3cret@127.0.0.1:6379/0",
		RedisKind: "external"}
	out := devBanner(cfg, env, "", "", false, "", "")
	for _, secret := range []string{"nats-s3cret", "redis-s3cret"} {
		if strings.Contains(out, secret) {
			t.Fatalf("banner shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "BULKACTION_GLOBAL_RPS=7") || !strings.Contains(out, "127.0.0.1:4222") {
		t.Fatalf("banner lost its content:\n%s", out)
	}
}
