package worker

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// TestExitedExecutorIsNotACrash: an executor that exited is marked dead
// before the run it was running returns, and the pool can still hold it
// for a moment (its process reaped, its done channel not yet closed). A
// job given to it was never sent: the pool runs it in another executor
// instead of reporting a crash, which would count toward the job's poison
// budget a run that never happened.
func TestExitedExecutorIsNotACrash(t *testing.T) {
	x := &executors{argv: []string{os.Args[0]}, size: 2}
	t.Cleanup(func() { x.close(time.Second) })
	_, in, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	gone := &executor{dead: true, in: in, done: make(chan struct{}), pending: map[uint64]chan *execResponse{}}
	t.Cleanup(func() { close(gone.done) })
	x.idle = []*executor{gone}
	job := &processor.Job{Tenant: "acme", GroupID: "g", JobID: "j", Type: "verdict",
		Payload: []byte(`{"outcome":"success"}`)}
	perr, err := x.run(context.Background(), job, 10*time.Second)
	if err != nil || perr != nil {
		t.Fatalf("run on a pool holding an exited executor: perr %v, err %v; want the job run in another", perr, err)
	}
	if gone.alive() {
		t.Error("an executor marked dead reports alive")
	}
}
