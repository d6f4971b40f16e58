package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	profileFlag = flag.String("chaos.profile", "", "short (default) or long; BULKACTION_CHAOS_PROFILE too")
	onlyFlag    = flag.String("chaos.only", "", "comma-separated scenarios to run (T1,...,T22); BULKACTION_CHAOS_ONLY too")
)

// profile sizes the scenarios.
type profile struct {
	name string
	// settle is how long the groups get to end once the faults stop.
	settle time.Duration

	// rate paces the submission of most scenarios (jobs/s), so that the
	// faults hit a pipeline at work; t1Rate is T1's.
	rate, t1Rate     int
	t1Jobs, t1Groups int
	t1FaultTime      time.Duration
	t2Jobs, t2Kills  int
	t3Jobs           int
	t3NodeDown       time.Duration
	t4Jobs           int
	t4Outage         time.Duration
	t5Jobs, t5Rate   int
	t5Deliveries     string
	t6Jobs, t6Bad    int
	t7Jobs           int
	t8Backoff        int
	t8Soon           int
	t10Jobs          int
	t11Jobs, t12Jobs int
	// T13: pause/resume pairs on one group of t13Jobs jobs; T14: jobs of a
	// tenant held at its queued-jobs quota t14Quota, submitted at t14Rate.
	t13Pairs, t13Jobs          int
	t14Jobs, t14Rate, t14Quota int
	// T15: the well-behaved tenant's jobs, submitted through the gateway
	// over the flood's duration.
	t15Jobs  int
	t15Flood time.Duration
	// T16: jobs of the groups whose completion callbacks go through the
	// faults.
	t16Jobs int
	// T17: jobs of the groups with start times and sending windows.
	t17Jobs int
	// T18, T19: jobs of the Redis Cluster rows (a failover, slot moves).
	t18Jobs, t19Jobs int
	// T20, T21, T22: jobs of the sharded Redis Cluster rows (a failover,
	// slot moves, fetchers killed under the global limit).
	t20Jobs, t21Jobs, t22Jobs int
	scenarios                 []string
}

var profiles = map[string]profile{
	// short runs inside `make test` (go test ./...): small counts, fewer
	// faults, about three minutes on two cores.
	"short": {
		name: "short", settle: 90 * time.Second, rate: 60, t1Rate: 100,
		t1Jobs: 2000, t1Groups: 2, t1FaultTime: 20 * time.Second,
		t2Jobs: 1200, t2Kills: 3,
		t3Jobs: 1200, t3NodeDown: 10 * time.Second,
		t4Jobs: 1200, t4Outage: 10 * time.Second,
		t5Jobs: 400, t5Rate: 100, t5Deliveries: "2",
		t6Jobs: 600, t6Bad: 1000,
		t7Jobs:    600,
		t8Backoff: 100_000, t8Soon: 200,
		t10Jobs: 2000,
		t11Jobs: 8, t12Jobs: 4000,
		t13Pairs: 40, t13Jobs: 600,
		t14Jobs: 3000, t14Rate: 300, t14Quota: 300,
		t15Jobs: 2000, t15Flood: 20 * time.Second,
		t16Jobs: 1000,
		t17Jobs: 720,
		t18Jobs: 3000, t19Jobs: 3000,
		t20Jobs: 3000, t21Jobs: 3000, t22Jobs: 6000,
		scenarios: []string{"T1", "T2", "T4", "T5", "T6", "T17"},
	},
	// long is `make chaos`.
	"long": {
		name: "long", settle: 3 * time.Minute, rate: 300, t1Rate: 250,
		t1Jobs: 100_000, t1Groups: 5, t1FaultTime: 15 * time.Minute,
		t2Jobs: 20_000, t2Kills: 10,
		t3Jobs: 20_000, t3NodeDown: 30 * time.Second,
		t4Jobs: 20_000, t4Outage: 10 * time.Second,
		t5Jobs: 4000, t5Rate: 200, t5Deliveries: "5",
		t6Jobs: 9000, t6Bad: 10_000,
		t7Jobs:    6000,
		t8Backoff: 1_000_000, t8Soon: 1000,
		t10Jobs: 20_000,
		t11Jobs: 24, t12Jobs: 20_000,
		t13Pairs: 200, t13Jobs: 2400,
		t14Jobs: 9000, t14Rate: 300, t14Quota: 300,
		t15Jobs: 12_000, t15Flood: 60 * time.Second,
		t16Jobs: 6000,
		t17Jobs: 8400,
		t18Jobs: 20_000, t19Jobs: 20_000,
		t20Jobs: 20_000, t21Jobs: 20_000, t22Jobs: 24_000,
		scenarios: []string{"T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T10", "T11", "T12", "T13", "T14", "T15", "T16", "T17", "T18", "T19", "T20", "T21", "T22"},
	},
}

func currentProfile() profile {
	name := *profileFlag
	if name == "" {
		name = os.Getenv("BULKACTION_CHAOS_PROFILE")
	}
	if name == "" {
		name = "short"
	}
	p, ok := profiles[name]
	if !ok {
		panic("chaos: unknown profile " + name)
	}
	if only := firstNonEmpty(*onlyFlag, os.Getenv("BULKACTION_CHAOS_ONLY")); only != "" {
		p.scenarios = strings.Split(only, ",")
	}
	return p
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// need reports whether a tool is on PATH; without it the row is skipped,
// or the suite fails when CI=true.
func need(t *testing.T, tool string) bool {
	if _, err := exec.LookPath(tool); err == nil {
		return true
	}
	if os.Getenv("CI") == "true" {
		t.Errorf("%s is not installed (CI=true: required)", tool)
	} else {
		t.Logf("%s is not installed: skipping", tool)
	}
	return false
}

// TestChaos runs the chaos scenarios against the real binary as separate
// processes (docs/chaos.md) and prints one row per scenario. It fails if
// any row lost, double-counted or unexpectedly failed a job, or broke a
// scenario's own check.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite: not in -short")
	}
	p := currentProfile()
	if !need(t, "redis-server") {
		return
	}
	var rows []row
	add := func(r row) {
		rows = append(rows, r)
		t.Logf("%s %s: %s", r.id, r.verdict, strings.Join(r.notes, "; "))
	}
	skip := func(id, why string) { rows = append(rows, row{id: id, verdict: "SKIP", notes: []string{why}}) }
	for _, id := range p.scenarios {
		t.Run(id, func(t *testing.T) {
			switch id {
			case "T1":
				add(t1(p).execute(t))
			case "T2":
				add(t2(p).execute(t))
			case "T3":
				add(t3(p).execute(t))
			case "T4":
				add(t4(p).execute(t))
			case "T5":
				add(t5(t, p))
			case "T6":
				r := t6(p).execute(t)
				if v, ok := t6Reasons.Load().(string); ok {
					r.notes = append(r.notes, "DLQ reasons: "+v)
				}
				add(r)
			case "T7":
				if !need(t, "faketime") {
					skip("T7", "faketime not installed")
					return
				}
				ignored, probe := goIgnoresFaketime(buildBinaries(t).node)
				if err := redisUnderFaketime(t); err != nil {
					why := "faketime cannot run redis-server here (" + err.Error() + ")"
					if ignored {
						why += ", and " + probe + " (Go reads the vDSO clock, not libc's): no process can be skewed"
					}
					skip("T7", why)
					t.Log("T7 skipped: " + why)
					return
				}
				for _, v := range []struct{ id, skew string }{{"T7+", "+5m"}, {"T7-", "-5m"}} {
					r := t7(p, v.id, v.skew).execute(t)
					if n, ok := t7Notes.Load(v.id); ok {
						r.notes = append(r.notes, n.(string))
					}
					if ignored {
						r.notes = append(r.notes, probe+": the services' own clocks cannot be skewed this way")
					}
					add(r)
				}
			case "T8":
				add(t8(t, p))
			case "T10":
				add(t10(p).execute(t))
			case "T11":
				add(t11(t, p).execute(t))
			case "T12":
				add(t12(t, p).execute(t))
			case "T13":
				add(t13(t, p).execute(t))
			case "T14":
				add(t14(p).execute(t))
			case "T15":
				add(t15(t, p).execute(t))
			case "T16":
				add(t16(t, p).execute(t))
			case "T17":
				r := t17(p).execute(t)
				if v, ok := t17Notes.Load().(string); ok {
					r.notes = append(r.notes, v)
				}
				add(r)
			case "T18":
				add(t18(t, p).execute(t))
			case "T19":
				add(t19(t, p).execute(t))
			case "T20":
				add(t20(t, p).execute(t))
			case "T21":
				add(t21(t, p).execute(t))
			case "T22":
				add(t22(t, p).execute(t))
			default:
				t.Fatalf("unknown scenario %s", id)
			}
		})
	}
	table := formatTable(p, rows)
	fmt.Println(table)
	t.Log("\n" + table)
	if dir := runDir(t); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "results.md"), []byte(table), 0o644)
		t.Logf("logs and data of the run: %s", dir)
	}
	for _, r := range rows {
		if r.verdict == "FAIL" {
			t.Errorf("%s failed: lost %d, double-counted %d, failed unexpectedly %d; %s", r.id, r.lost, r.double, r.failed, strings.Join(r.notes, "; "))
		}
	}
}

func formatTable(p profile, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos suite, %s profile, %s\n\n", p.name, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintln(&b, "| scenario | faults | jobs | lost | double | failed unexpectedly | time | verdict | notes |")
	fmt.Fprintln(&b, "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %s | %s | %s |\n", r.id, r.faults, r.jobs, r.lost, r.double, r.failed,
			r.dur.Round(time.Second), r.verdict, strings.ReplaceAll(strings.Join(r.notes, "; "), "|", "/"))
	}
	t9 := "PASS"
	for _, r := range rows {
		for _, n := range r.notes {
			if strings.HasPrefix(n, "T9") {
				t9 = "FAIL"
			}
		}
	}
	fmt.Fprintf(&b, "| T9 | checked after every row above | | | | | | %s | keys of ended groups have a TTL; SUBMIT, READY, RESULT empty |\n", t9)
	return b.String()
}
