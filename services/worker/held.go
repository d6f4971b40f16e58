package worker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/loop"
)

// A worker process that dies (a crash, kill -9, an out-of-memory kill)
// leaves the READY messages it held unacknowledged, and JetStream delivers
// them again only after the consumer's AckWait. With a state directory
// (Config.StateDir, an emptyDir in Kubernetes, which survives container
// restarts) the worker keeps the acknowledgement subjects of the messages
// it holds in a file there, written before any of their jobs runs; the
// worker started next in the same place negatively acknowledges them at
// once, so their jobs run again within moments of the restart instead of
// AckWait later (docs/ARCHITECTURE.md §6.3). A job found RUNNING that way
// is still a suspect that runs alone.

// heldFlushEvery is how often the held file is rewritten after messages
// were settled (additions are written before their jobs run).
const heldFlushEvery = 100 * time.Millisecond

// heldFile is the file of the acknowledgement subjects of the READY messages
// a worker holds. The file is locked (flock) while a worker uses it: worker
// instances of one process, or processes sharing a directory, each take
// the first file no live worker holds.
type heldFile struct {
	mu   sync.Mutex
	f    *os.File
	held map[string]uint64 // ack subject -> deliveries
	// holder is the id of the worker's claims, written first so that the
	// worker started next in its place can declare it gone.
	holder string
	dirty  bool
	stop   context.CancelFunc // ends the flusher
	done   chan struct{}
}

// openHeld locks the first free held file of dir (held-0, held-1, …) for
// holder and returns it with the subjects a previous worker left in it and
// that worker's holder id ("" when none is known).
func openHeld(dir, durable, holder string) (h *heldFile, left []string, before string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, "", err
	}
	for i := 0; i < 64; i++ {
		path := filepath.Join(dir, fmt.Sprintf("held-%s-%d", durable, i))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, "", err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return nil, nil, "", fmt.Errorf("lock %s: %w", path, err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// "holder <id>", then "<deliveries> <ack subject>" per message:
			// only messages on their first delivery are handed back (see
			// recoverHeld).
			n, subj, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
			switch {
			case ok && n == "holder":
				before = subj
			case ok && n == "1" && strings.HasPrefix(subj, "$JS.ACK."):
				left = append(left, subj)
			}
		}
		fctx, stop := context.WithCancel(context.Background())
		h = &heldFile{f: f, holder: holder, held: map[string]uint64{}, stop: stop, done: make(chan struct{})}
		h.mu.Lock()
		err = h.writeLocked()
		h.mu.Unlock()
		if err != nil {
			f.Close()
			return nil, nil, "", err
		}
		go h.flusher(fctx)
		return h, left, before, nil
	}
	return nil, nil, "", fmt.Errorf("every held file of %s is in use", dir)
}

// recoverHeld negatively acknowledges the messages a dead worker held on
// their first delivery, so that JetStream delivers them again now. A message
// delivered more than once may be what kills its workers (a poison job):
// handing it back at once would only crash the next worker sooner, so it
// waits for AckWait as before.
func recoverHeld(nc *nats.Conn, subjects []string) error {
	for _, s := range subjects {
		if err := nc.Publish(s, []byte("-NAK")); err != nil {
			return err
		}
	}
	return nc.Flush()
}

// add records msgs as held and writes the file before returning.
func (h *heldFile) add(msgs []jetstream.Msg) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range msgs {
		if r := m.Reply(); r != "" {
			n := uint64(0)
			if md, err := m.Metadata(); err == nil {
				n = md.NumDelivered
			}
			h.held[r] = n
		}
	}
	return h.writeLocked()
}

// remove forgets a settled message; the file follows within heldFlushEvery.
func (h *heldFile) remove(m jetstream.Msg) {
	if h == nil || m == nil {
		return
	}
	h.mu.Lock()
	if _, ok := h.held[m.Reply()]; ok {
		delete(h.held, m.Reply())
		h.dirty = true
	}
	h.mu.Unlock()
}

// writeLocked rewrites the file with the held subjects (no fsync: the file
// is for a process that dies, not for a machine that does).
func (h *heldFile) writeLocked() error {
	var b strings.Builder
	if h.holder != "" {
		fmt.Fprintf(&b, "holder %s\n", h.holder)
	}
	for s, n := range h.held {
		fmt.Fprintf(&b, "%d %s\n", n, s)
	}
	if _, err := h.f.WriteAt([]byte(b.String()), 0); err != nil {
		return err
	}
	h.dirty = false
	return h.f.Truncate(int64(b.Len()))
}

func (h *heldFile) flusher(ctx context.Context) {
	defer close(h.done)
	loop.Every(ctx, heldFlushEvery, func(context.Context) {
		h.mu.Lock()
		if h.dirty {
			_ = h.writeLocked()
		}
		h.mu.Unlock()
	})
}

// newHolderID returns a new random holder id.
func newHolderID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// close empties the file (every message was settled or handed back) and
// releases it.
func (h *heldFile) close() {
	if h == nil {
		return
	}
	h.stop()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.held)
	_ = h.writeLocked()
	_ = h.f.Close()
}
