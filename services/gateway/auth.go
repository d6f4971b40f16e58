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

// ParseKeys reads a keys file: one key per line, "<hash> <tenant> [name]",
// where hash is [HashKey] of the key, tenant is a tenant id or
// [AdminTenant]; blank lines and lines starting with # are ignored. An
// error names the line.
func ParseKeys(r io.Reader) (map[string]Principal, error) {
	keys := map[string]Principal{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want \"<sha256:hex> <tenant or *> [name]\", got %d fields", n, len(f))
		}
		hash, ok := strings.CutPrefix(f[0], "sha256:")
		if b, err := hex.DecodeString(hash); !ok || err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d: the key hash must be sha256: and 64 hex digits (bulkaction gateway key prints one)", n)
		}
		p := Principal{Tenant: f[1]}
		if len(f) == 3 {
			p.Name = f[2]
		}
		if p.Tenant == AdminTenant {
			p.Tenant, p.Admin = "", true
		} else if err := contracts.ValidateTenant(p.Tenant); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		k := "sha256:" + strings.ToLower(hash)
		if _, dup := keys[k]; dup {
			return nil, fmt.Errorf("line %d: the same key is listed twice", n)
		}
		keys[k] = p
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

// Keys holds the API keys, read from a file and re-read when the file
// changes (a mounted Kubernetes Secret is replaced in place). A file that
// fails to parse leaves the keys in use unchanged and is logged.
type Keys struct {
	path string
	log  *slog.Logger

	mu    sync.RWMutex
	keys  map[string]Principal
	stamp string // size and modification time of the file last read
}

// LoadKeys reads the keys file at path.
func LoadKeys(path string, log *slog.Logger) (*Keys, error) {
	k := &Keys{path: path, log: log}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// StaticKeys returns keys that are never reloaded (tests, `bulkaction dev`).
func StaticKeys(keys map[string]Principal) *Keys { return &Keys{keys: keys} }

// Reload re-reads the file; on error the keys in use stay.
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
	keys, err := ParseKeys(f)
	if err != nil {
		return fmt.Errorf("gateway: keys file %s: %w", k.path, err)
	}
	k.mu.Lock()
	k.keys, k.stamp = keys, stamp(st)
	k.mu.Unlock()
	return nil
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
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := os.Stat(k.path)
		if err != nil {
			k.log.Warn("keys file unreadable; keeping the keys in use", "path", k.path, "err", err)
			continue
		}
		k.mu.RLock()
		same := k.stamp == stamp(st)
		k.mu.RUnlock()
		if same {
			continue
		}
		if err := k.Reload(); err != nil {
			k.log.Error("keys file not reloaded; keeping the keys in use", "err", err)
			continue
		}
		k.log.Info("keys file reloaded", "path", k.path, "keys", k.Len())
	}
}

// errNoKey and errBadKey are the two ways authentication fails.
var (
	errNoKey  = errors.New("no API key: send Authorization: Bearer <key>")
	errBadKey = errors.New("unknown API key")
)

// authenticate returns the principal of the request's bearer key.
func (k *Keys) authenticate(r *http.Request) (Principal, error) {
	h := r.Header.Get("Authorization")
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
