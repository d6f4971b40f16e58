package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run executes the root command in-process with args and stdin, returning
// what it printed.
func run(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errb syncBuffer
	err = runTo(ctx, &out, &errb, stdin, args...)
	return out.String(), errb.String(), err
}

func runTo(ctx context.Context, out, errw *syncBuffer, stdin string, args ...string) error {
	root := newRoot()
	root.SetOut(out)
	root.SetErr(errw)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// clearEnv unsets every BULKACTION_* variable for the test (restored
// afterwards), so the tests see only what they set.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.Prefix+"_") && k != testenv.EnvRedisURL {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
