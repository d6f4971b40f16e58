package telemetry

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const dashboardPath = "../../deployments/grafana/bulkaction.json"

var metricNameRE = regexp.MustCompile(`bulk_action_[a-zA-Z0-9_]+`)

type dashboardDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboardPanel struct {
	ID         int                  `json:"id"`
	Type       string               `json:"type"`
	Title      string               `json:"title"`
	Datasource *dashboardDatasource `json:"datasource"`
	Targets    []struct {
		Expr       string               `json:"expr"`
		Datasource *dashboardDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	UID        string           `json:"uid"`
	Title      string           `json:"title"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string               `json:"name"`
			Definition string               `json:"definition"`
			Datasource *dashboardDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// flatten returns every panel, rows' nested panels included.
func flatten(ps []dashboardPanel) []dashboardPanel {
	var out []dashboardPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// registeredNames returns every metric family name NewMetrics and the state collector expose.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	observeAll(NewMetrics(reg))
	// one learned destination, so that its per-destination gauges exist
	st := QueueState{Destinations: []DestinationState{{Destination: "partner", Rate: 1}}}
	reg.MustRegister(NewStateCollector(func(context.Context) (QueueState, error) { return st, nil }, 0))
	names := map[string]bool{}
	for name := range gatherFamilies(t, reg) {
		names[name] = true
	}
	return names
}

func TestDashboardUsesOnlyRegisteredMetrics(t *testing.T) {
	d := loadDashboard(t)
	registered := registeredNames(t)

	var exprs []string
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}

	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricNameRE.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			used[name] = true
			if !registered[name] {
				t.Errorf("dashboard queries %s, which is not registered (in %q)", name, e)
			}
		}
	}
	var unused []string
	for name := range registered {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("metrics without a dashboard panel: %v", unused)
	}
	if len(used) < 20 {
		t.Errorf("dashboard uses %d metrics; expected the full set", len(used))
	}
}

func TestDashboardIsImportable(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed", d.UID, d.Title)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v, want one prometheus datasource input DS_PROMETHEUS", d.Inputs)
	}
	checkDS := func(where string, ds *dashboardDatasource) {
		if ds == nil || ds.Type != "prometheus" || ds.UID != "${DS_PROMETHEUS}" {
			t.Errorf("%s: datasource %+v, want prometheus ${DS_PROMETHEUS}", where, ds)
		}
	}
	ids := map[int]string{}
	for _, p := range flatten(d.Panels) {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or also used by %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		checkDS("panel "+p.Title, p.Datasource)
		for _, tg := range p.Targets {
			checkDS("query of "+p.Title, tg.Datasource)
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
				t.Errorf("panel %q: unbalanced parentheses in %q", p.Title, tg.Expr)
			}
		}
	}
	for _, v := range d.Templating.List {
		checkDS("variable "+v.Name, v.Datasource)
	}
}
