// Package httpserver holds the connection and request-body limits shared by the
// gateway, pylon and engine fasthttp servers: how long a client may take to send its
// headers and its body, how long a keep-alive connection may sit idle, how many
// connections a server keeps open, and how much memory large request bodies may hold.
//
// Apply configures one fasthttp.Server. Request bodies are then read by this package
// instead of fasthttp's buffering reader: a body is refused with 413 as soon as it
// crosses the server's limit (a chunked body is not read past it), and bodies larger
// than SmallBodyBytes share a memory budget, so a burst of huge uploads cannot grow the
// process without bound.
package httpserver

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Defaults of Limits (a zero field takes its default).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyReadTimeout   = 60 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultMaxConnections    = 10000
)

// SmallBodyBytes is the largest body read without the shared large-body budget. Buffers
// up to this size are pooled; larger ones are dropped once their request is done.
const SmallBodyBytes = 1 << 20

// Limits are one server's connection limits. For each field zero means the default and a
// negative value means no limit.
type Limits struct {
	// ReadHeaderTimeout bounds the wait for a request's first byte on a new connection and
	// for its whole header once its first byte has arrived.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds the time from the end of the headers to the end of the body.
	BodyReadTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a keep-alive connection.
	IdleTimeout time.Duration
	// WriteTimeout bounds how long a write of a response may wait for the client to take
	// any byte (relay.BoundWrites): a client that stops reading is treated as gone. A slow
	// reader is never cut, nor is a long stream.
	WriteTimeout time.Duration
	// MaxConnections caps the connections open at once; one more is answered 503 (plain
	// HTTP) or closed (TLS) at once.
	MaxConnections int
	// BodyMemoryBytes bounds the memory that bodies larger than SmallBodyBytes hold at
	// once, for the whole life of their request (zero: twice the server's body limit; it
	// is raised to the body limit when smaller). A request that finds the budget spent
	// waits for it up to its body read timeout, then gets 503.
	BodyMemoryBytes int
}

// Flags are the command-line flags of Limits, the same on every binary (embedded in each
// command's flags). Zero turns a timeout or the connection cap off.
type Flags struct {
	ReadHeaderTimeout time.Duration `name:"read-header-timeout" default:"10s" help:"Longest wait for a new connection's first request and for the headers of any request once its first byte has arrived; past it the connection is closed (0 = no limit)."`
	BodyReadTimeout   time.Duration `name:"body-read-timeout" default:"60s" help:"Longest time from the end of a request's headers to the end of its body, for the whole body (a slow upload included); past it the connection is closed (0 = no limit)."`
	IdleTimeout       time.Duration `name:"idle-timeout" default:"90s" help:"Longest wait for the next request on a keep-alive connection; then it is closed (0 = no limit). Responses and streams are never cut by it."`
	WriteTimeout      time.Duration `name:"write-timeout" default:"30s" help:"Longest a response write may wait for the client to take any byte (a client that stops reading a stream or a large answer); past it the client is treated as gone and the connection is closed. A client that reads, however slowly, and a stream of any length are never cut (0 = no limit)."`
	MaxConnections    int           `name:"max-connections" default:"10000" help:"Most client connections open at once (on each listener); one more is answered 503 and closed (over TLS: closed) (0 = no limit)."`
	BodyMemoryBytes   int           `name:"body-memory-bytes" default:"0" help:"Memory that request bodies over 1 MiB may hold at once, for the life of their requests; a request that finds it spent waits up to --body-read-timeout, then gets 503 (0 = twice the largest accepted body)."`
}

// Validate rejects negative values.
func (f *Flags) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-header-timeout", f.ReadHeaderTimeout}, {"body-read-timeout", f.BodyReadTimeout}, {"idle-timeout", f.IdleTimeout}, {"write-timeout", f.WriteTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %v must be >= 0 (0 = no limit)", d.name, d.v))
		}
	}
	if f.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("--max-connections %d must be >= 0 (0 = no limit)", f.MaxConnections))
	}
	if f.BodyMemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("--body-memory-bytes %d must be >= 0", f.BodyMemoryBytes))
	}
	return errors.Join(errs...)
}

// Limits maps the flags, where zero turns a limit off, to Limits, where zero means the
// default.
func (f *Flags) Limits() Limits {
	off := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	maxConns := f.MaxConnections
	if maxConns == 0 {
		maxConns = -1
	}
	return Limits{
		ReadHeaderTimeout: off(f.ReadHeaderTimeout), BodyReadTimeout: off(f.BodyReadTimeout), IdleTimeout: off(f.IdleTimeout),
		WriteTimeout: off(f.WriteTimeout), MaxConnections: maxConns, BodyMemoryBytes: f.BodyMemoryBytes,
	}
}

// WithDefaults fills zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	return l
}

// WriteStall is the effective write timeout: the default for zero, 0 when it is off (the
// argument relay.Listener and relay.BoundWrites take).
func (l Limits) WriteStall() time.Duration {
	if l = l.WithDefaults(); l.WriteTimeout < 0 {
		return 0
	}
	return l.WriteTimeout
}

// Validate rejects a negative body memory budget (the one field without an "off").
func (l Limits) Validate() error {
	if l.BodyMemoryBytes < 0 {
		return errors.New("body-memory-bytes must be >= 0 (0 = twice the body limit)")
	}
	return nil
}

// String names the effective limits for a startup log line.
func (l Limits) String() string {
	l = l.WithDefaults()
	d := func(v time.Duration) string {
		if v < 0 {
			return "off"
		}
		return v.String()
	}
	c := "off"
	if l.MaxConnections > 0 {
		c = strconv.Itoa(l.MaxConnections)
	}
	return fmt.Sprintf("read_header=%s body_read=%s idle=%s write=%s max_connections=%s", d(l.ReadHeaderTimeout), d(l.BodyReadTimeout), d(l.IdleTimeout), d(l.WriteTimeout), c)
}
