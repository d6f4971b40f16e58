package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFloorCacheReadsOncePerTTL: concurrent requests share one read of the
// ack floor, reuse it for floorTTL, read again after it, and a failed read
// is an error that is not kept.
func TestFloorCacheReadsOncePerTTL(t *testing.T) {
	var c floorCache
	var reads atomic.Int64
	var fail atomic.Bool
	read := func(context.Context) (uint64, error) {
		if fail.Load() {
			return 0, errors.New("no JetStream")
		}
		time.Sleep(5 * time.Millisecond)
		return uint64(reads.Add(1)) * 10, nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if f, err := c.get(ctx, read); err != nil || f != 10 {
				t.Errorf("floor %d, %v; want 10", f, err)
			}
		})
	}
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for 50 concurrent requests, want 1", n)
	}
	time.Sleep(floorTTL + 10*time.Millisecond)
	fail.Store(true)
	if _, err := c.get(ctx, read); err == nil {
		t.Fatal("a failed read after the TTL answered no error")
	}
	fail.Store(false)
	if f, err := c.get(ctx, read); err != nil || f != 20 {
		t.Fatalf("after the TTL: floor %d, %v; want a new read (20)", f, err)
	}
}

// TestFloorCacheServesWhileReading: once the floor is older than floorTTL,
// one request reads it again while the others go on at once with the floor
// they have, instead of queueing behind a JetStream call that a busy
// server may answer late.
func TestFloorCacheServesWhileReading(t *testing.T) {
	var c floorCache
	ctx := context.Background()
	if f, err := c.get(ctx, func(context.Context) (uint64, error) { return 10, nil }); err != nil || f != 10 {
		t.Fatalf("first floor %d, %v; want 10", f, err)
	}
	c.mu.Lock()
	c.at = time.Now().Add(-2 * floorTTL)
	c.mu.Unlock()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan uint64)
	go func() {
		f, _ := c.get(ctx, func(context.Context) (uint64, error) {
			close(started)
			<-release
			return 20, nil
		})
		done <- f
	}()
	<-started
	answered := make(chan uint64)
	go func() {
		f, _ := c.get(ctx, func(context.Context) (uint64, error) {
			t.Error("a second read while one is under way")
			return 0, nil
		})
		answered <- f
	}()
	select {
	case f := <-answered:
		if f != 10 {
			t.Errorf("floor %d while the new one is read, want the one kept (10)", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request waited for another's read of the floor")
	}
	close(release)
	if f := <-done; f != 20 {
		t.Fatalf("the reading request got %d, want 20", f)
	}
	if f, _ := c.get(ctx, nil); f != 20 {
		t.Fatalf("after the read: floor %d, want 20", f)
	}
}
