// Package logx builds the process logger of every Switchyard binary: log/slog records on
// one writer (stderr), as text (key=value) or as JSON (one object per line), from a
// minimum level. The flags that choose them, --log-format and --log-level, are the same on
// every binary (internal/cmdline).
package logx

import (
	"fmt"
	"io"
	"log/slog"
)

// Formats.
const (
	FormatText = "text" // slog's key=value lines
	FormatJSON = "json" // one JSON object per line: time, level, msg, then the attributes
)

// New returns a logger that writes records at level or above to w in format.
// format is FormatText or FormatJSON; level is debug, info, warn or error.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case FormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want %s or %s", format, FormatText, FormatJSON)
	}
}
