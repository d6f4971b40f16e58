package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The Redis Cluster rows run the installation on three primaries, each
// with a replica (envOptions.RedisCluster): the whole installation is the
// one slot of its prefix's hash tag (docs/ARCHITECTURE.md §11).

// clusterRun is the shape of T18 and T19: http jobs counted at a real
// endpoint, and fault once a third of them were called; fault describes
// what it did, and an error fails the row. A job called more than once is
// noted, not failed: after a failover the promoted replica may lack a
// run's record, and that run is run again (docs/ARCHITECTURE.md §6.7); a
// job never called is a failure.
func clusterRun(t *testing.T, p profile, id string, jobs int, fault func(ctx context.Context, e *env, calls int) (string, error)) run {
	var faultErr error
	se := newSideEffects(t)
	tag := strings.ToLower(id)
	w := workload{Tenants: 3, Groups: 2, Jobs: jobs / 6, Job: se.job(tag, 5*time.Millisecond)}
	return run{
		id:           id,
		opts:         envOptions{RedisCluster: true, Settings: map[string]string{"HTTP_ALLOWED_HOSTS": "127.0.0.1"}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: 10 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			for se.total() < w.total()/3 {
				if !sleepRand(ctx, 100*time.Millisecond, 200*time.Millisecond) {
					return "the run ended before the fault"
				}
			}
			desc, err := fault(ctx, e, se.total())
			faultErr = err
			<-ctx.Done()
			return desc
		},
		check: func(*env, *tally) []string {
			var out []string
			if faultErr != nil {
				out = append(out, "the fault failed: "+faultErr.Error())
			}
			// called more than once only: noted below
			if never, _, _, _ := se.count(tag, w); never > 0 {
				out = append(out, se.check(tag, w)[1:]...)
			}
			return out
		},
		note: func() string { return strings.Join(se.check(tag, w), "; ") },
	}
}

// installationSlot is the hash slot of every key of e.
func (e *env) installationSlot(ctx context.Context) (slot, owner int, err error) {
	if slot, err = e.cluster.KeySlot(ctx, e.prefix); err != nil {
		return 0, 0, err
	}
	owner, err = e.cluster.SlotOwner(ctx, slot)
	return slot, owner, err
}

// t18: the primary holding the installation's slot is killed (SIGKILL)
// mid-run; its replica takes over, and the killed node comes back as the
// new primary's replica.
func t18(t *testing.T, p profile) run {
	return clusterRun(t, p, "T18", p.t18Jobs, func(ctx context.Context, e *env, calls int) (string, error) {
		slot, owner, err := e.installationSlot(ctx)
		if err != nil {
			return "none", err
		}
		killed := time.Now()
		e.cluster.Nodes[owner].Kill()
		replica := owner + 3
		for {
			if o, err := e.cluster.SlotOwnerSeenBy(ctx, slot, replica); err == nil && o == replica {
				break
			}
			if !sleepRand(ctx, 50*time.Millisecond, 100*time.Millisecond) {
				return fmt.Sprintf("primary of slot %d killed at %d calls", slot, calls), fmt.Errorf("its replica did not take over")
			}
		}
		took := time.Since(killed)
		err = e.cluster.Nodes[owner].Start()
		return fmt.Sprintf("the slot's primary killed (SIGKILL) at %d calls; its replica took over in %s; the old primary back as a replica",
			calls, took.Round(100*time.Millisecond)), err
	})
}

// t19: the installation's slot moves to another primary and on to the
// third mid-run, its keys 20 at a time (as `redis-cli --cluster reshard`
// moves them), so that the slot stays half moved for a while.
func t19(t *testing.T, p profile) run {
	return clusterRun(t, p, "T19", p.t19Jobs, func(ctx context.Context, e *env, calls int) (string, error) {
		slot, owner, err := e.installationSlot(ctx)
		if err != nil {
			return "none", err
		}
		var moves []string
		for hop := 1; hop <= 2; hop++ {
			to := (owner + hop) % 3
			start := time.Now()
			if err := e.cluster.MigrateSlot(ctx, slot, to, 20, 2*time.Millisecond); err != nil {
				return fmt.Sprintf("move %d of slot %d", hop, slot), err
			}
			moves = append(moves, time.Since(start).Round(100*time.Millisecond).String())
		}
		return fmt.Sprintf("the slot moved twice between primaries from %d calls on, keys 20 at a time (moves took %s)",
			calls, strings.Join(moves, " and ")), nil
	})
}
