package natsutil

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds how long StartEmbedded waits for the server to accept
// connections.
const readyTimeout = 10 * time.Second

// EmbeddedOptions configure [StartEmbedded]. The zero value starts a server
// on 127.0.0.1:4222 with its JetStream store in a temporary directory.
type EmbeddedOptions struct {
	// Dir is the JetStream store directory. "" means a new temporary
	// directory that is removed after the server has shut down.
	Dir string
	// Host is the client listen address. "" means 127.0.0.1.
	Host string
	// Port is the client port. 0 means 4222; -1 picks a free port (read it
	// back with (*server.Server).ClientURL).
	Port int
	// MaxPayload is the largest message the server accepts, in bytes.
	// 0 means the server default (1 MiB).
	MaxPayload int32
}

// StartEmbedded starts an in-process NATS server with JetStream enabled and
// waits up to 10 seconds for it to accept connections. Logging and signal
// handling are off. The caller stops it with Shutdown followed by
// WaitForShutdown.
func StartEmbedded(opts EmbeddedOptions) (*server.Server, error) {
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if opts.MaxPayload < 0 {
		return nil, fmt.Errorf("natsutil: MaxPayload %d: must be >= 0", opts.MaxPayload)
	}
	if opts.Port >= 0 {
		// The server reports a busy port only through its log, after the
		// ready timeout; probing first turns that into an immediate error.
		port := opts.Port
		if port == 0 {
			port = server.DEFAULT_PORT
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("natsutil: embedded server: %w", err)
		}
		_ = l.Close()
	}
	dir, tempDir := opts.Dir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "bulkaction-nats-*")
		if err != nil {
			return nil, fmt.Errorf("natsutil: store dir: %w", err)
		}
		dir, tempDir = d, true
	}
	sopts := &server.Options{
		Host:       host,
		Port:       opts.Port, // the server maps 0 to 4222 and -1 to a free port
		MaxPayload: opts.MaxPayload,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	}
	cleanup := func() {
		if tempDir {
			_ = os.RemoveAll(dir)
		}
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("natsutil: new server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		cleanup()
		return nil, errors.New("natsutil: embedded server not ready for connections after " + readyTimeout.String())
	}
	if tempDir {
		go func() {
			s.WaitForShutdown()
			cleanup()
		}()
	}
	return s, nil
}
