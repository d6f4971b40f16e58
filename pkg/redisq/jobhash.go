package redisq

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// A queued job that has not left its group's job list yet has no hash of its
// own: it is one field of its group's HASH P group:<tenant>:<gid>:queued
// ([Keys.GroupQueued], docs/ARCHITECTURE.md §3.1), named by its id, whose
// value is the record
//
//	<createdAt>:<len(type)>:<len(trace)>:<type><trace><payload>
//
// (lengths in bytes, in decimal; the payload whole). Its status is QUEUED and
// its attempt 0, neither stored. So a queued job costs a field of a hash its
// group shares, not a key (the key's name, its entry in the keyspace, its
// object) and a field name per value. When the job leaves the list
// (admitted, parked or cancelled; one that admission holds goes back as it
// was) its job hash is written and its record dropped; a job hash written
// for a queued job by an earlier version is read as before. [ReadJob] reads
// a job in either place.
//
// The job hash P job:<tenant>:<gid>:<jid> ([Keys.Job]) keeps every value
// within Redis's default hash-max-listpack-value (64 bytes) so that it stays
// a compact listpack rather than a hashtable: its tenant, group and id are in
// its key, an attempt of 0 is not stored (absent = 0), and its payload is
//   - absent when it is empty;
//   - the field "payload" when it has at most [PayloadChunk] bytes, or more
//     than [PayloadChunk] × [PayloadChunksMax] (a listpack could not hold it);
//   - otherwise cut into fields "p1", "p2", … of [PayloadChunk] bytes each
//     (the last one shorter).
//
// lua/lib.lua (queued_record, job_peek, job_leave, payload_fields, job_read)
// writes and reads this layout.
const (
	// PayloadChunk is the most bytes of a payload in one field of a job hash.
	PayloadChunk = 64
	// PayloadChunksMax is the most fields a payload is cut into; a larger
	// payload is stored whole in the field "payload".
	PayloadChunksMax = 100
)

// JobPayload puts together the payload of a job hash read with HGETALL
// (nil when it has none).
func JobPayload(h map[string]string) []byte {
	if p, ok := h["payload"]; ok {
		return []byte(p)
	}
	type part struct {
		n int
		v string
	}
	var parts []part
	for k, v := range h {
		s, ok := strings.CutPrefix(k, "p")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			parts = append(parts, part{n, v})
		}
	}
	if len(parts) == 0 {
		return nil
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })
	var b []byte
	for _, p := range parts {
		b = append(b, p.v...)
	}
	return b
}

// ReadJob returns job jid of group g as the fields of its job hash: for a
// queued job that has a record rather than a hash, the record's fields
// (type, createdAt, trace when it has one, dest when it names an explicit
// destination, its payload whole in "payload" when it has one) with status
// QUEUED. An empty map when the group has no such job (or its hash
// expired).
func ReadJob(ctx context.Context, rdb redis.Cmdable, k Keys, g contracts.GroupRef, jid string) (map[string]string, error) {
	pipe := rdb.Pipeline()
	rec := pipe.HGet(ctx, k.GroupQueued(g), jid)
	h := pipe.HGetAll(ctx, k.Job(g, jid))
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: read job %s/%s: %w", g, jid, err)
	}
	if f, ok := decodeQueued(rec.Val()); ok {
		return f, nil
	}
	return h.Val(), nil
}

// decodeQueued reads a queued job's record (see above; lua/lib.lua
// queued_record) into the fields its job hash would have; false when r is
// not a record. A record of a job with an explicit destination has its
// length after the trace's and a '/': <createdAt>:<lt>:<lr>/<ld>:.
func decodeQueued(r string) (map[string]string, bool) {
	var n [4]int
	var created string
	rest := r
	for i := range 3 {
		v, tail, ok := strings.Cut(rest, ":")
		if i == 2 {
			if a, b, slash := strings.Cut(v, "/"); ok && slash {
				d, err := strconv.Atoi(b)
				if err != nil || b == "" || strings.Trim(b, "0123456789") != "" {
					return nil, false
				}
				v, n[3] = a, d
			}
		}
		if !ok || v == "" || strings.Trim(v, "0123456789") != "" {
			return nil, false
		}
		x, err := strconv.Atoi(v)
		if err != nil {
			return nil, false
		}
		if i == 0 {
			created = v
		}
		n[i], rest = x, tail
	}
	if n[1]+n[2]+n[3] > len(rest) {
		return nil, false
	}
	f := map[string]string{"status": "QUEUED", "createdAt": created, "type": rest[:n[1]]}
	if n[2] > 0 {
		f["trace"] = rest[n[1] : n[1]+n[2]]
	}
	if n[3] > 0 {
		f["dest"] = rest[n[1]+n[2] : n[1]+n[2]+n[3]]
	}
	if p := rest[n[1]+n[2]+n[3]:]; p != "" {
		f["payload"] = p
	}
	return f, true
}
