// Command chaosnode is the helper process of the chaos suite (package
// chaos). It is built by the suite and never shipped. It has two modes:
//
//	chaosnode nats -port P -dir D [-name N -cluster-port C -routes nats://h:p,...]
//
// runs a NATS server with JetStream (one node of a cluster when
// -cluster-port is set) until SIGTERM, so that NATS lives in a process of
// its own that the suite can kill and restart like any other;
//
//	chaosnode now
//
// prints the time as a Go program sees it (the suite checks whether
// faketime moves it);
//
//	chaosnode worker
//
// runs the stock worker target through pkg/server with the built-in
// processors plus a "crash" job type: a job whose payload is
// {"poison":true} ends the whole process with exit code 2 (a poison job
// that takes its worker down), any other "crash" job succeeds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	pserver "github.com/bulkaction/bulkaction/pkg/server"
)

// TypeCrash is the job type whose poison payloads kill the worker process.
const TypeCrash = "crash"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: chaosnode nats|worker [flags]")
		os.Exit(64)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "nats":
		err = runNATS(ctx, os.Args[2:])
	case "worker":
		err = runWorker(ctx)
	case "now":
		// The clock as a Go program sees it: faketime cannot move it (Go
		// reads the vDSO clock directly, not through libc).
		fmt.Println(time.Now().UTC().Format(time.RFC3339Nano))
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
}

func runNATS(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	port := fs.Int("port", -1, "client port")
	dir := fs.String("dir", "", "JetStream store directory")
	name := fs.String("name", "", "server name (cluster mode)")
	clusterPort := fs.Int("cluster-port", 0, "cluster port (0 = no cluster)")
	routes := fs.String("routes", "", "comma-separated cluster routes")
	maxPayload := fs.Int("max-payload", 0, "max_payload (0 = default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := &server.Options{
		ServerName: *name,
		Host:       "127.0.0.1",
		Port:       *port,
		JetStream:  true,
		StoreDir:   *dir,
		MaxPayload: int32(*maxPayload),
		NoSigs:     true,
		NoLog:      true,
	}
	if *clusterPort > 0 {
		opts.Cluster = server.ClusterOpts{Name: "chaos", Host: "127.0.0.1", Port: *clusterPort}
		for _, r := range strings.Split(*routes, ",") {
			if r == "" {
				continue
			}
			u, err := url.Parse(r)
			if err != nil {
				return fmt.Errorf("route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		return fmt.Errorf("nats server not ready")
	}
	fmt.Println("ready", s.ClientURL())
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

func runWorker(ctx context.Context) error {
	mux := processor.NewMux()
	builtin.Register(mux, builtin.Options{})
	mux.HandleFunc(TypeCrash, func(_ context.Context, job *processor.Job) error {
		var p struct {
			Poison bool `json:"poison"`
		}
		if json.Unmarshal(job.Payload, &p) == nil && p.Poison {
			os.Exit(2) // the whole process, with every job it was running
		}
		return nil
	})
	return pserver.RunWorker(ctx, mux)
}
