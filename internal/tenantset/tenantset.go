// Package tenantset writes the tenant settings that SUBMIT does not carry, a
// tenant's default sending windows and its callback secrets, durably: their
// record is the JetStream key-value bucket [contracts.Names.BucketTenants],
// Redis holds their working copy. Every writer writes the bucket first,
// then Redis; the fetchers copy the bucket into Redis again at start and
// whenever Redis comes back older (docs/ARCHITECTURE.md §6.7), so a Redis
// restored from an older snapshot or a promoted replica does not bring back
// older windows or a secret the receivers no longer accept.
package tenantset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Keys of a tenant's entries in the bucket: "<tenant>.windows" and
// "<tenant>.callback-secret".
const (
	kindWindows = "windows"
	kindSecret  = "callback-secret"
)

// rotateAttempts bounds the rotations of one secret that lose the race to
// another rotation of the same tenant's.
const rotateAttempts = 5

// Settings writes and restores the tenant settings of one installation.
type Settings struct {
	kv jetstream.KeyValue
	q  *redisq.Queue
	// bucket tells this bucket from one made again after it was deleted
	// (its stream's creation time), whose revisions start again at 1.
	bucket string
}

// Open binds the bucket named by n, which [natsutil.EnsureStreams] creates
// (a service's start does), and q, Redis's copy.
func Open(ctx context.Context, js jetstream.JetStream, n contracts.Names, q *redisq.Queue) (*Settings, error) {
	kv, err := js.KeyValue(ctx, n.BucketTenants())
	if err != nil {
		return nil, fmt.Errorf("tenantset: bucket %s (a bulkaction service creates it at start): %w", n.BucketTenants(), err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("tenantset: bucket %s: %w", n.BucketTenants(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, fmt.Errorf("tenantset: bucket %s: status %T has no stream info", n.BucketTenants(), st)
	}
	return &Settings{kv: kv, q: q, bucket: strconv.FormatInt(bs.StreamInfo().Created.UnixNano(), 10)}, nil
}

func (s *Settings) version(rev uint64) redisq.SettingVersion {
	return redisq.SettingVersion{Bucket: s.bucket, Rev: rev}
}

// SetWindows makes ws tenant's default sending windows (none: removes
// them), in the bucket and then in Redis.
func (s *Settings) SetWindows(ctx context.Context, tenant string, ws []contracts.Window) error {
	if err := contracts.ValidateTenant(tenant); err != nil {
		return err
	}
	if len(ws) > 0 {
		if err := contracts.ValidateWindows("windows", ws); err != nil {
			return err
		}
	}
	b, err := json.Marshal(ws)
	if err != nil {
		return err
	}
	rev, err := s.kv.Put(ctx, tenant+"."+kindWindows, b)
	if err != nil {
		return fmt.Errorf("tenantset: windows of tenant %s: %w", tenant, err)
	}
	_, err = s.q.PutTenantWindows(ctx, tenant, ws, s.version(rev))
	return err
}

// secretRecord is a tenant's callback secrets in the bucket (times in ms).
type secretRecord struct {
	Current       string `json:"current,omitempty"`
	CreatedAt     int64  `json:"createdAt,omitempty"`
	Previous      string `json:"previous,omitempty"`
	PreviousUntil int64  `json:"previousUntil,omitempty"`
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func timeOf(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func (r secretRecord) secrets() redisq.CallbackSecrets {
	return redisq.CallbackSecrets{Current: r.Current, CreatedAt: timeOf(r.CreatedAt), Previous: r.Previous, PreviousUntil: timeOf(r.PreviousUntil)}
}

// RotateCallbackSecret makes secret tenant's current callback secret, in
// the bucket and then in Redis; the one it replaces, as the bucket has it,
// keeps signing for grace (0 = it stops at once). It returns the secrets
// after the change.
func (s *Settings) RotateCallbackSecret(ctx context.Context, tenant, secret string, grace time.Duration) (redisq.CallbackSecrets, error) {
	if err := contracts.ValidateTenant(tenant); err != nil {
		return redisq.CallbackSecrets{}, err
	}
	key := tenant + "." + kindSecret
	for range rotateAttempts {
		now, err := s.q.Now(ctx)
		if err != nil {
			return redisq.CallbackSecrets{}, err
		}
		var old string
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Not in the bucket yet: a secret set before the bucket
			// existed is in Redis only.
			cur, err := s.q.CallbackSecretsOf(ctx, tenant)
			if err != nil {
				return redisq.CallbackSecrets{}, err
			}
			old = cur.Current
		case err != nil:
			return redisq.CallbackSecrets{}, fmt.Errorf("tenantset: callback secret of tenant %s: %w", tenant, err)
		default:
			var r secretRecord
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return redisq.CallbackSecrets{}, fmt.Errorf("tenantset: callback secret of tenant %s: %w", tenant, err)
			}
			old, rev = r.Current, e.Revision()
		}
		r := secretRecord{Current: secret, CreatedAt: msOf(now)}
		if old != "" && grace > 0 {
			r.Previous, r.PreviousUntil = old, msOf(now.Add(grace))
		}
		b, err := json.Marshal(r)
		if err != nil {
			return redisq.CallbackSecrets{}, err
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = s.kv.Create(ctx, key, b)
		} else {
			nrev, err = s.kv.Update(ctx, key, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another rotation came first: rotate from its secret
		}
		if err != nil {
			return redisq.CallbackSecrets{}, fmt.Errorf("tenantset: callback secret of tenant %s: %w", tenant, err)
		}
		out := r.secrets()
		if _, err := s.q.PutCallbackSecrets(ctx, tenant, out, s.version(nrev)); err != nil {
			return redisq.CallbackSecrets{}, err
		}
		return out, nil
	}
	return redisq.CallbackSecrets{}, fmt.Errorf("tenantset: callback secret of tenant %s: other rotations kept coming first", tenant)
}

// Restore copies every entry of the bucket into Redis, over an older
// revision only (the bucket is the record): after it Redis has the
// bucket's settings, or later ones written meanwhile. It returns how many
// it wrote. Restoring twice writes nothing the second time.
func (s *Settings) Restore(ctx context.Context) (int, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("tenantset: watch bucket: %w", err)
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			return n, nil // every entry there was at the start delivered
		}
		wrote, err := s.restore(ctx, e)
		if err != nil {
			return n, err
		}
		if wrote {
			n++
		}
	}
}

// restore copies one entry into Redis.
func (s *Settings) restore(ctx context.Context, e jetstream.KeyValueEntry) (bool, error) {
	tenant, kind, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return false, nil // not a key of this package's
	}
	switch kind {
	case kindWindows:
		var ws []contracts.Window
		if err := json.Unmarshal(e.Value(), &ws); err != nil {
			return false, fmt.Errorf("tenantset: entry %s: %w", e.Key(), err)
		}
		return s.q.PutTenantWindows(ctx, tenant, ws, s.version(e.Revision()))
	case kindSecret:
		var r secretRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return false, fmt.Errorf("tenantset: entry %s: %w", e.Key(), err)
		}
		return s.q.PutCallbackSecrets(ctx, tenant, r.secrets(), s.version(e.Revision()))
	}
	return false, nil
}
