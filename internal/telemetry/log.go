package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// NewLogger returns a slog.Logger writing to w (nil means os.Stderr).
//
// format is "json" (one JSON object per line, for production) or "text" (key=value pairs);
// "" means "json". level is "debug", "info", "warn" (or "warning") or "error", case-insensitive;
// "" means "info". Any other value is an error that names it.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
	var lvl slog.Level
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "debug":
		lvl = slog.LevelDebug
	case "", "info":
		lvl = slog.LevelInfo
	case "warn", "warning":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return nil, fmt.Errorf("telemetry: unknown log level %q (want debug, info, warn or error)", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("telemetry: unknown log format %q (want text or json)", format)
	}
}

// LogComponent is the one log key naming the part of bulkaction that emits
// a line ("fetcher", "dispatcher", "worker", "aggregator", "events",
// "stack", "http"). Messages are lower-case sentences without the
// component's name in front: the key says who speaks.
const LogComponent = "component"
