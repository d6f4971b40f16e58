package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRedisURL names the variable that points the tests at an existing Redis
// server instead of a private one.
const EnvRedisURL = "BULKACTION_TEST_REDIS_URL"

var (
	sharedOnce   sync.Once
	sharedServer *RedisServer
	sharedURL    string
	sharedErr    error
	prefixSeq    atomic.Int64
)

// Main runs the tests of m and stops the shared redis-server afterwards.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if sharedServer != nil {
		sharedServer.Stop()
	}
	os.Exit(code)
}

// RedisEnv is one test's view of the shared Redis server.
type RedisEnv struct {
	URL    string
	Client *redis.Client
	// Prefix is unique to the test; every key the test writes starts with it.
	Prefix string
}

// Redis returns a client of the shared test server (started on first use)
// and a key prefix of the test's own. The client is closed when the test ends.
func Redis(t testing.TB) *RedisEnv {
	t.Helper()
	url := SharedRedisURL(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("testenv: %s: %v", EnvRedisURL, err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return &RedisEnv{URL: url, Client: c, Prefix: NewPrefix(t)}
}

// NewPrefix returns a key prefix no other test of this process uses.
func NewPrefix(t testing.TB) string {
	name := regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("t%d-%d-%s:", os.Getpid(), prefixSeq.Add(1), name)
}

// SharedRedisURL returns the URL of the test binary's shared server,
// starting it on first use.
func SharedRedisURL(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() {
		if u := os.Getenv(EnvRedisURL); u != "" {
			sharedURL = u
			return
		}
		sharedServer, sharedErr = StartRedisServer("")
		if sharedErr == nil {
			sharedURL = sharedServer.URL()
		}
	})
	if sharedErr != nil {
		t.Fatalf("testenv: %v", sharedErr)
	}
	return sharedURL
}

// RedisServer is a private redis-server child process without persistence.
type RedisServer struct {
	mu   sync.Mutex
	port int
	// busPort is a cluster node's cluster bus port (--cluster-port)
	busPort int
	dir     string
	cmd     *exec.Cmd
	args    []string // further redis-server arguments
}

// NewRedisServer starts a private redis-server for one test and stops it
// when the test ends. Tests use it to stop and restart a server.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	s, err := StartRedisServer(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartRedisServer starts redis-server on a free loopback port, working in
// dir ("" = a new temporary directory), and waits until it answers PING.
func StartRedisServer(dir string) (*RedisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: install it (Debian: `apt-get install -y redis-server`, or run `make redis`) or set %s", EnvRedisURL)
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "bulkaction-redis-")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	s := &RedisServer{dir: dir}
	return s, s.startOnFreePorts(nil)
}

// startOnFreePorts starts the server on a free port (and whatever more
// args asks for, given a second free port), and again on other ports when
// the server exits before it answers: a free port found is free only
// until another process binds it.
func (s *RedisServer) startOnFreePorts(args func(port2 int) []string) error {
	var err error
	for range 5 {
		var port, port2 int
		if port, err = freePort(); err != nil {
			return err
		}
		if args != nil {
			if port2, err = freePort(); err != nil {
				return err
			}
			s.args = args(port2)
		}
		s.port = port
		if err = s.Start(); !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

// errExited: redis-server exited before it answered.
var errExited = errors.New("redis-server exited before it answered")

// Start (re)starts the server on its port.
func (s *RedisServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start("")
}

// RestartWith stops the server and starts it again with what load writes,
// as a server that starts from a snapshot loads it before it answers
// anyone: until load returns, every other client is refused (NOAUTH).
func (s *RedisServer) RestartWith(load func(context.Context, *redis.Client) error) error {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	pw := fmt.Sprintf("loading-%d", time.Now().UnixNano())
	if err := s.start(pw); err != nil {
		return err
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Password: pw, MaxRetries: -1})
	defer c.Close()
	if err := load(ctx, c); err != nil {
		return err
	}
	return c.ConfigSet(ctx, "requirepass", "").Err()
}

// start starts the server; the caller holds s.mu. A password, when given,
// is required of every client.
func (s *RedisServer) start(password string) error {
	if s.cmd != nil {
		return nil
	}
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log")}
	if password != "" {
		args = append(args, "--requirepass", password)
	}
	cmd := exec.Command("redis-server", append(args, s.args...)...)
	// The server dies with the test binary even if Main is not used.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Password: password, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	exited := func() error {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.cmd = nil
		return fmt.Errorf("%w: port %d (log: %s)", errExited, s.port, filepath.Join(s.dir, "redis.log"))
	}
	for {
		// the probe stops waiting when the server exits (a port taken
		// meanwhile: "Address already in use"; what holds it may accept
		// the connection and never answer)
		answer := make(chan *redis.StringCmd, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			answer <- c.Info(ctx, "server")
		}()
		var a *redis.StringCmd
		for a == nil {
			select {
			case a = <-answer:
			case <-time.After(20 * time.Millisecond):
				if processExited(cmd.Process.Pid) {
					return exited()
				}
			}
		}
		info, err := a.Result()
		if err == nil {
			// the answer is this server's, not another's on a port taken
			// meanwhile
			if !strings.Contains(info, fmt.Sprintf("process_id:%d\r", cmd.Process.Pid)) {
				return exited()
			}
			return nil
		}
		if processExited(cmd.Process.Pid) {
			return exited()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d did not answer: %w (log: %s)", s.port, err, filepath.Join(s.dir, "redis.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server at once (SIGKILL), as a crash would, and waits for
// it to exit: nothing is saved and no replica is waited for.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Stop kills the server and waits for it to exit.
func (s *RedisServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "redis://" + s.addr() + "/0" }

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return s.addr() }

func (s *RedisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// processExited reports whether process pid has exited (a zombie not
// reaped yet, or gone), without reaping it: no goroutine waits on a
// server for its whole life.
func processExited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// the state follows the command's name in parentheses
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
