package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// Process isolation (docs/ARCHITECTURE.md §6.3). With Config.Isolation
// [IsolationProcess] the worker does not run processors itself: it keeps a
// pool of child processes, executors, each running one job at a time (up to
// Config.Concurrency of them), and keeps everything else (the READY
// messages, claims, results, acknowledgements) in the worker. A processor
// that crashes its process then takes down its executor and its own job,
// not the worker nor the jobs beside it: the worker sees it at once and
// runs the job again, alone as always, counting those runs toward the
// job's poison budget (Config.MaxDeliveries) as it does for suspects. A new
// executor replaces the one that exited, and one spare is kept started. No
// READY message waits for AckWait or for a restarted worker.
//
// The executor is the worker's own program started again (Config.
// ExecutorCommand, by default the running executable with the same
// arguments), with ExecutorEnv set: the program's entry point must call
// [ServeExecutor] with the same processors before anything else
// (pkg/server and the bulkaction command do). The two processes speak JSON
// lines over two pipes of their own (file descriptors 3 and 4 in the
// executor), so the processors' stdout and stderr stay the program's.

// Isolation modes (Config.Isolation).
const (
	// IsolationNone runs processors in the worker process.
	IsolationNone = "none"
	// IsolationProcess runs them in an executor child process.
	IsolationProcess = "process"
)

// ExecutorEnv is set to "1" in the environment of an executor process.
const ExecutorEnv = "BULKACTION_WORKER_EXECUTOR"

// IsExecutor reports whether this process was started as a worker's
// executor.
func IsExecutor() bool { return os.Getenv(ExecutorEnv) == "1" }

// errExecutorDied is the error of the jobs that were running in an executor
// that exited.
var errExecutorDied = errors.New("worker: the executor process running the job exited")

// errExecutorGone is the error of a run given to an executor that had
// already exited: the job was never sent, so the run is tried again in
// another executor and does not count as a crash.
var errExecutorGone = errors.New("worker: the executor process had exited before the job was sent")

// execRequest runs a job (Job set) or cancels the run of job ID (Cancel).
type execRequest struct {
	ID        uint64         `json:"id"`
	Job       *processor.Job `json:"job,omitempty"`
	TimeoutMs int64          `json:"timeoutMs,omitempty"`
	Cancel    bool           `json:"cancel,omitempty"`
}

// execResponse is the outcome of a run: processor.Classify's outcome and
// delay, and the error's text.
type execResponse struct {
	ID      uint64 `json:"id"`
	Outcome string `json:"outcome"`
	AfterMs int64  `json:"afterMs,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ServeExecutor runs an executor: it reads jobs from file descriptor 3,
// runs each with p (through [processor.Run], under the timeout the worker
// sends) and writes their outcomes to file descriptor 4, until the worker
// closes the pipe; then it cancels the runs still under way (the worker
// is gone) and returns once they did. The end of ctx does not stop it: the
// worker decides when runs are cancelled, as its shutdown grace says. It
// is called in the executor process only ([IsExecutor]), with ctx's values
// for the processors.
func ServeExecutor(ctx context.Context, p processor.Processor) error {
	in, out := os.NewFile(3, "executor-requests"), os.NewFile(4, "executor-responses")
	if in == nil || out == nil {
		return errors.New("worker: executor started without its pipes")
	}
	defer in.Close()
	defer out.Close()
	return serveExecutor(ctx, in, out, p)
}

func serveExecutor(ctx context.Context, in io.Reader, out io.Writer, p processor.Processor) error {
	ctx, cancelAll := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAll()
	var (
		mu      sync.Mutex // guards running and enc
		running = map[uint64]context.CancelFunc{}
		enc     = json.NewEncoder(out)
		wg      sync.WaitGroup
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		var req execRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("worker: executor request: %w", err)
		}
		if req.Cancel {
			mu.Lock()
			if cancel := running[req.ID]; cancel != nil {
				cancel()
			}
			mu.Unlock()
			continue
		}
		if req.Job == nil {
			continue
		}
		var jctx context.Context
		var cancel context.CancelFunc
		if req.TimeoutMs > 0 {
			jctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		} else {
			jctx, cancel = context.WithCancel(ctx)
		}
		mu.Lock()
		running[req.ID] = cancel
		mu.Unlock()
		wg.Go(func() {
			err := processor.Run(jctx, p, req.Job)
			cancel()
			kind, after := processor.Classify(err)
			resp := execResponse{ID: req.ID, Outcome: kind.String(), AfterMs: after.Milliseconds()}
			if err != nil {
				resp.Error = err.Error()
			}
			mu.Lock()
			delete(running, req.ID)
			werr := enc.Encode(&resp)
			mu.Unlock()
			if werr != nil {
				cancelAll() // the worker is gone
			}
		})
	}
	cancelAll()
	wg.Wait()
	return sc.Err()
}

// outcomeError rebuilds, in the worker, an error that processor.Classify
// maps to the executor's outcome.
func outcomeError(r *execResponse) error {
	msg := errors.New(r.Error)
	switch r.Outcome {
	case processor.OutcomeSuccess.String():
		return nil
	case processor.OutcomeFailed.String():
		return processor.Permanent(msg)
	case processor.OutcomeRateLimited.String():
		return processor.RateLimited(time.Duration(r.AfterMs)*time.Millisecond, msg)
	case processor.OutcomeRetry.String():
		return msg
	default:
		return processor.Permanent(fmt.Errorf("executor: unknown outcome %q: %s", r.Outcome, r.Error))
	}
}

// executor is the worker's side of one executor process.
type executor struct {
	cmd  *exec.Cmd
	in   *os.File // requests
	done chan struct{}

	mu      sync.Mutex
	enc     *json.Encoder
	next    uint64
	pending map[uint64]chan *execResponse
	dead    bool
}

// startExecutor starts an executor process with command argv.
func startExecutor(argv []string) (*executor, error) {
	if len(argv) == 0 {
		return nil, errors.New("worker: no executor command")
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), ExecutorEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{reqR, respW} // fd 3 and 4
	err = cmd.Start()
	reqR.Close()
	respW.Close()
	if err != nil {
		reqW.Close()
		respR.Close()
		return nil, fmt.Errorf("worker: start executor %s: %w", argv[0], err)
	}
	e := &executor{cmd: cmd, in: reqW, done: make(chan struct{}), enc: json.NewEncoder(reqW),
		pending: map[uint64]chan *execResponse{}}
	go e.read(respR)
	return e, nil
}

// read delivers the executor's responses until it exits; then every run
// still pending gets nil (the executor died).
func (e *executor) read(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var resp execResponse
		if json.Unmarshal(sc.Bytes(), &resp) != nil {
			continue
		}
		e.mu.Lock()
		ch := e.pending[resp.ID]
		delete(e.pending, resp.ID)
		e.mu.Unlock()
		if ch != nil {
			ch <- &resp
		}
	}
	_ = e.cmd.Wait()
	e.mu.Lock()
	e.dead = true
	for id, ch := range e.pending {
		delete(e.pending, id)
		close(ch)
	}
	e.mu.Unlock()
	e.in.Close()
	close(e.done)
}

// run runs job in the executor under timeout; ctx's end cancels the run
// (the processor's context). It returns the processor's outcome as an
// error (perr), or err errExecutorDied when the executor exited before
// answering.
func (e *executor) run(ctx context.Context, job *processor.Job, timeout time.Duration) (perr, err error) {
	ch := make(chan *execResponse, 1)
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return nil, errExecutorGone
	}
	e.next++
	id := e.next
	e.pending[id] = ch
	werr := e.enc.Encode(&execRequest{ID: id, Job: job, TimeoutMs: max(timeout.Milliseconds(), 1)})
	e.mu.Unlock()
	if werr != nil {
		<-e.done // a broken pipe: the executor exited before it read the job
		return nil, errExecutorGone
	}
	var resp *execResponse
	ok := true
	select {
	case resp, ok = <-ch:
	case <-ctx.Done():
		e.mu.Lock()
		if !e.dead {
			_ = e.enc.Encode(&execRequest{ID: id, Cancel: true})
		}
		e.mu.Unlock()
		resp, ok = <-ch
	}
	if !ok {
		return nil, errExecutorDied
	}
	return outcomeError(resp), nil
}

// alive reports whether the executor has not exited (nor been closed). It
// reads dead, which is set before the runs pending in an exited executor
// return, so an executor whose run just failed is never taken back.
func (e *executor) alive() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.dead
}

// close ends the executor: its requests pipe is closed, so it exits once
// the runs under way returned; after wait it is killed.
func (e *executor) close(wait time.Duration) {
	e.mu.Lock()
	e.dead = true
	e.mu.Unlock()
	e.in.Close()
	select {
	case <-e.done:
	case <-time.After(wait):
		_ = e.cmd.Process.Kill()
		<-e.done
	}
}

// executors runs jobs in executor processes, one job at a time in each (a
// pool of up to size of them, as many as the worker runs jobs at once), so
// that a processor that crashes its process takes down only its own job.
// An executor that exited is replaced; one spare is kept started, so that
// the jobs after a crash do not wait for a process to start.
type executors struct {
	argv []string
	size int

	mu       sync.Mutex
	idle     []*executor // started, running nothing
	spare    *executor
	starting bool // the spare is being started
	done     bool
	runs     sync.WaitGroup
	spawn    sync.WaitGroup
}

// get returns an executor running nothing: an idle one, else the spare
// (and a new spare is started), else a new one.
func (x *executors) get() (*executor, error) {
	x.mu.Lock()
	for len(x.idle) > 0 {
		e := x.idle[len(x.idle)-1]
		x.idle = x.idle[:len(x.idle)-1]
		if e.alive() {
			x.mu.Unlock()
			return e, nil
		}
	}
	e := x.spare
	x.spare = nil
	if !x.done {
		x.spawn.Go(x.prepareSpare)
	}
	x.mu.Unlock()
	if e != nil && e.alive() {
		return e, nil
	}
	return startExecutor(x.argv)
}

// put takes back an executor whose run ended.
func (x *executors) put(e *executor) {
	x.mu.Lock()
	keep := e.alive() && !x.done && len(x.idle) < x.size
	if keep {
		x.idle = append(x.idle, e)
	}
	x.mu.Unlock()
	if !keep {
		e.close(abandonWait)
	}
}

// prepareSpare starts the spare executor if there is none.
func (x *executors) prepareSpare() {
	x.mu.Lock()
	if x.done || x.spare != nil || x.starting {
		x.mu.Unlock()
		return
	}
	x.starting = true
	x.mu.Unlock()
	e, err := startExecutor(x.argv)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.starting = false
	if err != nil {
		return
	}
	if x.done || x.spare != nil {
		go e.close(abandonWait)
		return
	}
	x.spare = e
}

// run runs job alone in an executor; err is errExecutorDied when the
// executor exited before answering (it is not used again). An executor
// found exited before the job was sent to it is replaced, up to
// maxExecutorTries times.
func (x *executors) run(ctx context.Context, job *processor.Job, timeout time.Duration) (perr, err error) {
	x.runs.Add(1)
	defer x.runs.Done()
	for range maxExecutorTries {
		e, gerr := x.get()
		if gerr != nil {
			return nil, gerr
		}
		perr, err = e.run(ctx, job, timeout)
		x.put(e)
		if !errors.Is(err, errExecutorGone) {
			return perr, err
		}
	}
	return nil, err
}

// maxExecutorTries bounds how many executors found exited one run tries.
const maxExecutorTries = 3

// start starts the pool's size executors at once, so that the first jobs
// do not wait for processes to start; an executor that cannot be started
// is an error (the program cannot serve as its own executor).
func (x *executors) start() error {
	es := make([]*executor, x.size)
	errs := make([]error, x.size)
	var wg sync.WaitGroup
	for i := range es {
		wg.Go(func() { es[i], errs[i] = startExecutor(x.argv) })
	}
	wg.Wait()
	for _, e := range es {
		if e != nil {
			x.put(e)
		}
	}
	return errors.Join(errs...)
}

// close ends every executor once the runs under way returned (after wait,
// an executor still running is killed).
func (x *executors) close(wait time.Duration) {
	x.mu.Lock()
	x.done = true
	x.mu.Unlock()
	x.runs.Wait()
	x.spawn.Wait()
	x.mu.Lock()
	all := append([]*executor{x.spare}, x.idle...)
	x.spare, x.idle = nil, nil
	x.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range all {
		if e != nil {
			wg.Go(func() { e.close(wait) })
		}
	}
	wg.Wait()
}
