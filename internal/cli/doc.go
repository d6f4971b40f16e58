// Package cli holds what bulkaction's command-line verbs share: connecting
// to Redis and NATS from the BULKACTION_* settings, a group's status read
// with READY's room measured ([Conn.Status]; the model is package
// pkg/status), the system-wide statistics, and reading job files (JSONL)
// with every bad line reported before anything is published.
//
// It never creates or changes streams: the verbs talk to a running system
// (started by `bulkaction dev` or the targets) and report clearly when there
// is none.
package cli
