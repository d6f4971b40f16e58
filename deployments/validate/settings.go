package validate

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/bulkaction/bulkaction/internal/config"
)

// Setting is one BULKACTION_* variable of the binary.
type Setting struct {
	// Name is the full variable name, e.g. BULKACTION_GLOBAL_RPS.
	Name string
	// Kind is the Go kind of its config.Config field (int, bool, float64, string; durations
	// are int64).
	Kind reflect.Kind
	// Duration is true for time.Duration fields (written like "24h").
	Duration bool
}

// Settings returns every BULKACTION_* variable config.Load reads, keyed by name, from the
// envconfig tags of config.Config.
func Settings() map[string]Setting {
	out := map[string]Setting{}
	t := reflect.TypeOf(config.Config{})
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("envconfig")
		if tag == "" {
			continue
		}
		name := config.Prefix + "_" + tag
		out[name] = Setting{Name: name, Kind: f.Type.Kind(), Duration: f.Type.String() == "time.Duration"}
	}
	return out
}

// CheckNames returns an error naming every variable of names that starts with BULKACTION_ and
// is not a setting. where says whose variables they are.
func CheckNames(where string, names []string) error {
	known := Settings()
	var bad []string
	for _, n := range names {
		if strings.HasPrefix(n, config.Prefix+"_") {
			if _, ok := known[n]; !ok {
				bad = append(bad, n)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%s: %s: not a bulkaction setting (see `bulkaction config`)", where, strings.Join(bad, ", "))
}

// envMu serialises CheckValues, which sets the process environment.
var envMu sync.Mutex

// CheckValues loads env (name → value) the way a target starts, with config.Load and its
// validation, and returns its error. Variables of env that are not BULKACTION_* are ignored,
// and so are BULKACTION_* variables of the process itself, which are cleared for the call.
func CheckValues(where string, env map[string]string) error {
	if err := CheckNames(where, keys(env)); err != nil {
		return err
	}
	envMu.Lock()
	defer envMu.Unlock()
	saved := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.Prefix+"_") {
			saved[k] = v
			os.Unsetenv(k)
		}
	}
	defer func() {
		for k := range env {
			os.Unsetenv(k)
		}
		for k, v := range saved {
			os.Setenv(k, v)
		}
	}()
	for k, v := range env {
		if strings.HasPrefix(k, config.Prefix+"_") {
			os.Setenv(k, v)
		}
	}
	if _, err := config.Load(); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
