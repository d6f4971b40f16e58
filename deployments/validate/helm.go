package validate

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// KubeVersion is the Kubernetes version the chart is linted and rendered for.
const KubeVersion = "v1.33.0"

// Release is the release name and namespace charts are rendered with.
var Release = chartutil.ReleaseOptions{Name: "bulkaction", Namespace: "bulkaction", Revision: 1, IsInstall: true}

// ReadValues reads values files and merges them in order, like `helm -f a.yaml -f b.yaml`:
// maps are merged key by key, anything else in a later file replaces the earlier value.
func ReadValues(files ...string) (map[string]any, error) {
	out := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = mergeMaps(out, v)
	}
	return out, nil
}

func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Lint is `helm lint --strict`: the chart's lint rules (Chart.yaml, values against
// values.schema.json, templates rendered and parsed) with user values vals; any message of
// warning severity or above is an error.
func Lint(chartDir string, vals map[string]any) error {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return err
	}
	linter := lint.AllWithKubeVersion(chartDir, vals, Release.Namespace, kv)
	var errs []error
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			errs = append(errs, fmt.Errorf("helm lint: %s", m))
		}
	}
	return errors.Join(errs...)
}

// Manifest is one YAML document a chart renders.
type Manifest struct {
	// Template is the template file it came from, e.g. bulkaction/templates/service.yaml.
	Template string
	// Index is its position among the documents of that file.
	Index int
	// YAML is the document.
	YAML string
}

func (m Manifest) String() string { return fmt.Sprintf("%s#%d", m.Template, m.Index) }

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Render is `helm template` with user values vals: the chart's values merged with vals,
// validated against values.schema.json, and every template rendered in strict mode (a
// reference to a missing value is an error). It returns the non-empty documents in template
// order; NOTES.txt is rendered but not returned.
func Render(chartDir string, vals map[string]any) ([]Manifest, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	caps.KubeVersion = *kv
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, not %s", c, caps.KubeVersion)
	}
	top, err := chartutil.ToRenderValues(ch, vals, Release, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return nil, err
	}
	names := keys(files)
	sort.Strings(names)
	var out []Manifest
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			continue // NOTES.txt, partials
		}
		for i, doc := range docSep.Split(files[name], -1) {
			if isEmptyDoc(doc) {
				continue
			}
			out = append(out, Manifest{Template: name, Index: i, YAML: doc})
		}
	}
	return out, nil
}

// isEmptyDoc reports whether a YAML document holds nothing but blank lines and comments.
func isEmptyDoc(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}
