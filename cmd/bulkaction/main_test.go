package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testenv"
)

// asMainEnv, set to 1, makes the test binary run as bulkaction itself
// (main, with os.Args after "--"): see runBinary.
const asMainEnv = "BA_CLI_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"bulkaction"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	testenv.Main(m)
}

// runBinary runs bulkaction as its own process (this test binary running
// main) with args and the environment env (KEY=value, added to the
// process's), returning what it printed and its exit code.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(append(os.Environ(), asMainEnv+"=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running bulkaction %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

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
	return execute(ctx, root)
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
