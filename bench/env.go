package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
)

// Redis database indexes of the three systems on the shared redis-server.
const (
	// PipelineDB is the database the pipeline uses.
	PipelineDB = 0
	// AsynqDB is the database asynq uses.
	AsynqDB = 1
	// BullMQDB is the database BullMQ uses.
	BullMQDB = 2
)

// Env is the servers of one benchmark run: a private redis-server (no
// persistence) and an embedded NATS server with JetStream on a free port,
// its store in a temporary directory. The zero value is not usable; call
// [StartEnv].
type Env struct {
	redis *testenv.RedisServer
	nats  *server.Server
	admin *redis.Client
}

// StartEnv starts the servers. Close stops them.
func StartEnv() (*Env, error) {
	rs, err := testenv.StartRedisServer("")
	if err != nil {
		return nil, err
	}
	ns, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Port: -1})
	if err != nil {
		rs.Stop()
		return nil, err
	}
	return &Env{redis: rs, nats: ns, admin: redis.NewClient(&redis.Options{Addr: rs.Addr()})}, nil
}

// Close stops both servers.
func (e *Env) Close() {
	_ = e.admin.Close()
	e.nats.Shutdown()
	e.nats.WaitForShutdown()
	e.redis.Stop()
}

// RedisAddr is the redis-server's host:port.
func (e *Env) RedisAddr() string { return e.redis.Addr() }

// RedisURL is the redis:// URL of database db.
func (e *Env) RedisURL(db int) string {
	return "redis://" + e.redis.Addr() + "/" + strconv.Itoa(db)
}

// NatsURL is the NATS server's client URL.
func (e *Env) NatsURL() string { return e.nats.ClientURL() }

// RedisStats are the redis-server's cumulative counters: command calls
// (INFO commandstats, without EVAL/EVALSHA/INFO/SCRIPT, so commands run by
// scripts count once each) and CPU seconds (INFO cpu, user + system).
type RedisStats struct {
	// Calls counts commands, those run by scripts included.
	Calls int64
	// Scripts counts EVAL and EVALSHA calls.
	Scripts int64
	// CPUSecs is the server's CPU time, user plus system, in seconds.
	CPUSecs float64
	// ByCommand holds the calls of every command, including EVAL and EVALSHA.
	ByCommand map[string]int64
	// UsecByCommand holds the time spent in every command, in µs; a
	// script's time includes that of the commands it calls.
	UsecByCommand map[string]int64
}

// Sub returns s - o.
func (s RedisStats) Sub(o RedisStats) RedisStats {
	d := RedisStats{Calls: s.Calls - o.Calls, Scripts: s.Scripts - o.Scripts, CPUSecs: s.CPUSecs - o.CPUSecs,
		ByCommand: map[string]int64{}, UsecByCommand: map[string]int64{}}
	for k, v := range s.ByCommand {
		if n := v - o.ByCommand[k]; n != 0 {
			d.ByCommand[k] = n
		}
	}
	for k, v := range s.UsecByCommand {
		if n := v - o.UsecByCommand[k]; n != 0 {
			d.UsecByCommand[k] = n
		}
	}
	return d
}

// RedisStats reads the redis-server's counters.
func (e *Env) RedisStats(ctx context.Context) (RedisStats, error) {
	s := RedisStats{ByCommand: map[string]int64{}, UsecByCommand: map[string]int64{}}
	stats, err := e.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, fmt.Errorf("bench: INFO commandstats: %w", err)
	}
	for _, line := range strings.Split(stats, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				s.UsecByCommand[cmd], _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.ByCommand[cmd] = n
				switch cmd {
				case "eval", "evalsha", "eval_ro", "evalsha_ro":
					s.Scripts += n
				case "info", "script", "ping", "client|setinfo", "client", "hello":
				default:
					s.Calls += n
				}
			}
		}
	}
	cpu, err := e.admin.Info(ctx, "cpu").Result()
	if err != nil {
		return s, fmt.Errorf("bench: INFO cpu: %w", err)
	}
	for _, line := range strings.Split(cpu, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			s.CPUSecs += f
		}
	}
	return s, nil
}

// UsedMemory is the redis-server's used_memory (INFO memory): the bytes its
// allocator holds for data, buffers and overhead.
func (e *Env) UsedMemory(ctx context.Context) (int64, error) {
	info, err := e.admin.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("bench: INFO memory has no used_memory")
}
