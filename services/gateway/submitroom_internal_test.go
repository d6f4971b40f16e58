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
