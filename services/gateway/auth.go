package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// AdminTenant is the tenant column of an admin key in the keys file: the
// key reaches every tenant's groups.
const AdminTenant = "*"

// KeyPrefix starts every key [NewKey] makes, so a leaked key is easy to
// recognise and to search for.
const KeyPrefix = "bak_"

// Principal is who a request's API key belongs to.
type Principal struct {
	// Tenant is the key's tenant; "" for an admin key.
	Tenant string
	// Admin keys reach every tenant.
	Admin bool
	// Name is the key's name from the keys file (for logs), may be "".
	Name string
}

// NewKey returns a new random API key: KeyPrefix and 32 random bytes in
// unpadded base64url.
func NewKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashKey returns the form a key is stored in: "sha256:" and the hex
// SHA-256 of the key. Keys are long random strings, so a plain hash is
// enough to make a stolen keys file useless.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyLine returns the keys file line of a key: "<hash> <tenant> [name]".
func KeyLine(key, tenant, name string) string {
	line := HashKey(key) + " " + tenant
	if name != "" {
		line += " " + name
	}
	return line
}

// KeyLineError reports a line of a keys file that is not a valid key line.
type KeyLineError struct {
	// Line is the 1-based line number.
	Line int
	// Problem says what is wrong with the line.
	Problem string
}

// Error returns "line <Line>: <Problem>".
func (e *KeyLineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Problem) }

// ParseKeys reads a keys file: one key per line, "<hash> <tenant> [name]",
// where hash is [HashKey] of the key, tenant is a tenant id or
// [AdminTenant]; blank lines and lines starting with # are ignored. A
// malformed line, a bad tenant, or the same key twice is an error naming
// the line (a [*KeyLineError], joined when there are several); the keys
// are returned only when every line is valid.
func ParseKeys(r io.Reader) (map[string]Principal, error) {
	keys, bad, err := readKeys(r)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		errs := make([]error, len(bad))
		for i, e := range bad {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	return keys, nil
}

// readKeys reads a keys file like [ParseKeys], but returns the keys of
// every valid line and reports each bad line, in line order, instead of
// giving up. A key listed twice is not a key of either line: the lines
// disagree or are a copying mistake, so neither is trusted. err is a read
// error only.
func readKeys(r io.Reader) (keys map[string]Principal, bad []*KeyLineError, err error) {
	keys = map[string]Principal{}
	first := map[string]int{} // key hash -> line of its first listing
	twice := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, p, problem := parseKeyLine(line)
		if problem == "" {
			if l, dup := first[k]; dup {
				problem = fmt.Sprintf("the same key is listed twice (also on line %d): neither line is used", l)
				twice[k] = true
			} else {
				first[k] = n
				keys[k] = p
			}
		}
		if problem != "" {
			bad = append(bad, &KeyLineError{Line: n, Problem: problem})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	for k := range twice {
		delete(keys, k)
	}
	return keys, bad, nil
}

// parseKeyLine parses one non-blank, non-comment line; problem is "" when
// it is valid.
func parseKeyLine(line string) (key string, p Principal, problem string) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 {
		return "", p, fmt.Sprintf("want \"<sha256:hex> <tenant or *> [name]\", got %d fields", len(f))
	}
	hash, ok := strings.CutPrefix(f[0], "sha256:")
	if b, err := hex.DecodeString(hash); !ok || err != nil || len(b) != sha256.Size {
		return "", p, "the key hash must be sha256: and 64 hex digits (bulkaction gateway key prints one)"
	}
	p.Tenant = f[1]
	if len(f) == 3 {
		p.Name = f[2]
	}
	if p.Tenant == AdminTenant {
		p.Tenant, p.Admin = "", true
	} else if err := contracts.ValidateTenant(p.Tenant); err != nil {
		return "", p, err.Error()
	}
	return "sha256:" + strings.ToLower(hash), p, ""
}

// Keys holds the API keys, read from a file and re-read when the file
// changes (a mounted Kubernetes Secret is replaced in place). Every valid
// line of the file is applied, also when other lines are bad: each bad
// line is logged with its number and skipped, and counted in the
// bulk_action_gateway_keys_file_bad_lines gauge, so that a key deleted
// from the file stops working even when the edit broke another line. A
// file that cannot be read leaves the keys in use unchanged.
type Keys struct {
	path string
	log  *slog.Logger

	mu      sync.RWMutex
	keys    map[string]Principal
	stamp   string           // size and modification time of the file last read
	bad     int              // bad lines of the file last read
	gauge   prometheus.Gauge // bulk_action_gateway_keys_file_bad_lines; nil = none
	changed chan struct{}    // closed (and replaced) when a reload applies a new key set
}

// LoadKeys reads the keys file at path. Only a file that cannot be read
// is an error; bad lines are logged and skipped, as on every reload.
func LoadKeys(path string, log *slog.Logger) (*Keys, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keys{path: path, log: log, changed: make(chan struct{})}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// StaticKeys returns keys that are never reloaded (tests, `bulkaction dev`).
func StaticKeys(keys map[string]Principal) *Keys {
	return &Keys{keys: keys, changed: make(chan struct{})}
}

// Reload re-reads the file and applies every valid line; each bad line is
// logged and skipped (see [Keys]). It returns an error, and keeps the keys
// in use, only when the file cannot be read.
func (k *Keys) Reload() error {
	if k.path == "" {
		return nil
	}
	f, err := os.Open(k.path)
	if err != nil {
		return fmt.Errorf("gateway: keys file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("gateway: keys file: %w", err)
	}
	keys, bad, err := readKeys(f)
	if err != nil {
		return fmt.Errorf("gateway: keys file %s: %w", k.path, err)
	}
	for _, e := range bad {
		k.log.Error("keys file: line skipped", "path", k.path, "line", e.Line, "problem", e.Problem)
	}
	k.mu.Lock()
	k.keys, k.stamp, k.bad = keys, stamp(st), len(bad)
	if k.gauge != nil {
		k.gauge.Set(float64(k.bad))
	}
	if k.changed != nil {
		close(k.changed)
	}
	k.changed = make(chan struct{})
	k.mu.Unlock()
	return nil
}

// BadLines is the number of lines of the keys file last read that were
// skipped as invalid.
func (k *Keys) BadLines() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.bad
}

// setGauge makes the keys report their bad lines in g from now on.
func (k *Keys) setGauge(g prometheus.Gauge) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gauge = g
	if g != nil {
		g.Set(float64(k.bad))
	}
}

// reloaded returns a channel that is closed when a reload applies a new
// key set.
func (k *Keys) reloaded() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.changed == nil {
		k.changed = make(chan struct{})
	}
	return k.changed
}

func stamp(st os.FileInfo) string { return fmt.Sprint(st.Size(), st.ModTime().UnixNano()) }

// Len is the number of keys.
func (k *Keys) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.keys)
}

// Lookup returns the principal of a key.
func (k *Keys) Lookup(key string) (Principal, bool) {
	h := HashKey(key)
	k.mu.RLock()
	defer k.mu.RUnlock()
	p, ok := k.keys[h]
	return p, ok
}

// watch re-reads the file every interval when its size or modification
// time changed, until ctx ends.
func (k *Keys) watch(ctx context.Context, every time.Duration) {
	if k.path == "" {
		return
	}
	loop.Every(ctx, every, func(context.Context) {
		st, err := os.Stat(k.path)
		if err != nil {
			k.log.Warn("keys file unreadable; keeping the keys in use", "path", k.path, "err", err)
			return
		}
		k.mu.RLock()
		same := k.stamp == stamp(st)
		k.mu.RUnlock()
		if same {
			return
		}
		if err := k.Reload(); err != nil {
			k.log.Error("keys file not reloaded; keeping the keys in use", "err", err)
			return
		}
		k.log.Info("keys file reloaded", "path", k.path, "keys", k.Len(), "bad_lines", k.BadLines())
	})
}

// errNoKey and errBadKey are the two ways authentication fails.
var (
	errNoKey  = errors.New("no API key: send Authorization: Bearer <key>")
	errBadKey = errors.New("unknown API key")
)

// authenticate returns the principal of the request's bearer key.
func (k *Keys) authenticate(r *http.Request) (Principal, error) {
	return k.authenticateHeader(r.Header.Get("Authorization"))
}

// authenticateHeader returns the principal of an Authorization header's
// bearer key.
func (k *Keys) authenticateHeader(h string) (Principal, error) {
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return Principal{}, errNoKey
	}
	p, ok := k.Lookup(strings.TrimSpace(key))
	if !ok {
		return Principal{}, errBadKey
	}
	return p, nil
}

// tenantFor returns the tenant a request acts on: the key's own, or for an
// admin key the tenant query parameter. ok is false when the request names
// a tenant its key does not reach (answered 404, as if nothing were there)
// or when an admin request names none and one is needed.
func (p Principal) tenantFor(r *http.Request) (tenant string, ok bool) {
	q := r.URL.Query().Get("tenant")
	if !p.Admin {
		return p.Tenant, q == "" || q == p.Tenant
	}
	return q, q != ""
}
