package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// RedisCluster is a Redis Cluster of local redis-server child processes
// (cluster mode, no persistence): primaries only, the hash slots split
// evenly between them.
type RedisCluster struct {
	Nodes     []*RedisServer
	primaries int
}

// NewRedisCluster starts a cluster of n primaries for one test and stops it
// when the test ends.
func NewRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	c, err := StartRedisCluster(t.TempDir(), n)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewRedisClusterWithReplicas starts a cluster of n primaries, each with
// one replica, for one test and stops it when the test ends. Nodes[0:n]
// are the primaries, Nodes[n+i] the replica of Nodes[i].
func NewRedisClusterWithReplicas(t testing.TB, n int) *RedisCluster {
	t.Helper()
	c, err := StartRedisClusterWithReplicas(t.TempDir(), n)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartRedisClusterWithReplicas is StartRedisCluster with one replica per
// primary: Nodes[0:n] are the primaries, Nodes[n+i] the replica of
// Nodes[i].
func StartRedisClusterWithReplicas(dir string, n int) (*RedisCluster, error) {
	return startRedisCluster(dir, n, true)
}

// StartRedisCluster starts n redis-server processes in cluster mode, each
// working in a directory of its own under dir, gives each an even range of
// the hash slots, joins them and waits until every node reports the
// cluster ok.
func StartRedisCluster(dir string, n int) (*RedisCluster, error) {
	return startRedisCluster(dir, n, false)
}

func startRedisCluster(dir string, n int, replicas bool) (*RedisCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testenv: a cluster of %d nodes", n)
	}
	c := &RedisCluster{primaries: n}
	nodes := n
	if replicas {
		nodes = 2 * n
	}
	for i := range nodes {
		d := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		// the cluster bus on a free port of its own (by default it is the
		// port + 10000, which may be taken, or past 65535)
		s := &RedisServer{dir: d}
		c.Nodes = append(c.Nodes, s)
		if err := s.startOnFreePorts(func(bus int) []string {
			s.busPort = bus
			return []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
				"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
		}); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.form(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// form assigns the slots, introduces the nodes to each other and waits
// until the cluster is ok on every node.
func (c *RedisCluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, p := len(c.Nodes), c.primaries
	clients := make([]*redis.Client, n)
	for i, s := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer clients[i].Close()
	}
	for i, cl := range clients[:p] {
		from, to := i*ClusterSlots/p, (i+1)*ClusterSlots/p-1
		if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err(); err != nil {
			return fmt.Errorf("cluster addslotsrange on %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.port, s.busPort).Err(); err != nil {
			return fmt.Errorf("cluster meet %s: %w", s.Addr(), err)
		}
	}
	if err := c.attachReplicas(ctx, clients); err != nil {
		return err
	}
	for i, cl := range clients {
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r") {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("cluster node %s not ok: %v %q", c.Nodes[i].Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// attachReplicas makes node p+i a replica of primary i, once every node
// knows every other, and waits until each replica is in sync.
func (c *RedisCluster) attachReplicas(ctx context.Context, clients []*redis.Client) error {
	p := c.primaries
	if len(clients) == p {
		return nil
	}
	for i, cl := range clients {
		for {
			nodes, err := cl.ClusterNodes(ctx).Result()
			if err == nil && strings.Count(strings.TrimSpace(nodes), "\n")+1 == len(clients) && !strings.Contains(nodes, "handshake") {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("cluster node %s does not know every node: %v", c.Nodes[i].Addr(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range p {
		id, err := clients[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return err
		}
		if err := clients[p+i].ClusterReplicate(ctx, id).Err(); err != nil {
			return fmt.Errorf("cluster replicate on %s: %w", c.Nodes[p+i].Addr(), err)
		}
	}
	for i := range p {
		for {
			info, err := clients[p+i].Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("replica %s not in sync: %v", c.Nodes[p+i].Addr(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Addrs are the nodes' host:port addresses (the seeds of a cluster client).
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// Client returns a cluster client of c, closed when the test ends.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Stop stops every node.
func (c *RedisCluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// KeysPerNode counts, on each node, the keys that start with prefix.
func (c *RedisCluster) KeysPerNode(ctx context.Context, prefix string) ([]int, error) {
	out := make([]int, len(c.Nodes))
	for i, s := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
		iter := cl.Scan(ctx, 0, escapeGlob(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			out[i]++
		}
		err := iter.Err()
		_ = cl.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// escapeGlob escapes the glob characters of s for a SCAN MATCH pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// nodeClient is a client of node i alone, for the tests' administration
// (slot moves wait on the other node: reads may take long on a loaded
// machine).
func (c *RedisCluster) nodeClient(i int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr(), ReadTimeout: 30 * time.Second})
}

// migrateRetryable reports whether a MIGRATE failed for a timeout (of the
// read, or of MIGRATE's own transfer), which sending it again may cure.
func migrateRetryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return strings.HasPrefix(err.Error(), "IOERR")
}

// SlotOwner returns the index of the node that serves slot, as node 0
// sees it.
func (c *RedisCluster) SlotOwner(ctx context.Context, slot int) (int, error) {
	return c.SlotOwnerSeenBy(ctx, slot, 0)
}

// SlotOwnerSeenBy returns the index of the node that serves slot, as node
// by sees it.
func (c *RedisCluster) SlotOwnerSeenBy(ctx context.Context, slot, by int) (int, error) {
	cl := c.nodeClient(by)
	defer cl.Close()
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return -1, err
	}
	for _, s := range slots {
		if int(s.Start) <= slot && slot <= int(s.End) && len(s.Nodes) > 0 {
			for i, n := range c.Nodes {
				if s.Nodes[0].Addr == n.Addr() {
					return i, nil
				}
			}
		}
	}
	return -1, fmt.Errorf("testenv: no node serves slot %d", slot)
}

// MigrateSlot moves slot, with its keys, from the node serving it to node
// to, as `redis-cli --cluster reshard` does: the target imports it, the
// source migrates it, the keys move batch keys at a time with pause between
// batches (so that clients meet the slot half moved), and then every node
// is told the slot's new owner.
func (c *RedisCluster) MigrateSlot(ctx context.Context, slot, to, batch int, pause time.Duration) error {
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	src, dst := c.nodeClient(from), c.nodeClient(to)
	defer src.Close()
	defer dst.Close()
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("testenv: setslot importing: %w", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("testenv: setslot migrating: %w", err)
	}
	host, port := "127.0.0.1", strconv.Itoa(c.Nodes[to].port)
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		// a loaded machine may take longer than MIGRATE's own timeout, or
		// than a read: the keys already moved are gone from the source, so
		// the same batch is simply sent again
		var err2 error
		for attempt := 0; attempt < 5; attempt++ {
			err2 = src.Do(ctx, args...).Err()
			if err2 == nil || err2.Error() == "NOKEY" || !migrateRetryable(err2) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err2 != nil && err2.Error() != "NOKEY" {
			return fmt.Errorf("testenv: migrate: %w", err2)
		}
		time.Sleep(pause)
	}
	// the target first, then the source, then the others
	order := []int{to, from}
	for i := range c.Nodes {
		if i != to && i != from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		cl := c.nodeClient(i)
		err := cl.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		_ = cl.Close()
		if err != nil && strings.Contains(err.Error(), "only with masters") {
			continue // a replica learns it from its primary
		}
		if err != nil {
			return fmt.Errorf("testenv: setslot node on %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	return nil
}

// KeySlot is the hash slot of key.
func (c *RedisCluster) KeySlot(ctx context.Context, key string) (int, error) {
	cl := c.nodeClient(0)
	defer cl.Close()
	n, err := cl.ClusterKeySlot(ctx, key).Result()
	return int(n), err
}
