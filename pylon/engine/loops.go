package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon/stats"
)

// Sink receives what the loops learn. An empty model means "every model".
type Sink interface {
	EngineStats(model string, ev *stats.RequestEvent)
	EnginePing(model string, report *stats.ConcurrencyReport)
	EngineKV(model string, kv stats.KVStats)
	EngineMetrics(model string, m stats.EngineMetrics)
}

// Doer performs one HTTP exchange (a *fasthttp.HostClient).
type Doer interface {
	Do(req *fasthttp.Request, resp *fasthttp.Response) error
}

// Stream modes of --engine-stats-stream.
const (
	ModeAuto     = "auto"
	ModeRequired = "required"
	ModeOff      = "off"
)

// Reconnect backoff of the stats stream.
const (
	StreamBackoffMin = 100 * time.Millisecond
	StreamBackoffMax = 5 * time.Second
	PollInterval     = time.Second
	PollTimeout      = time.Second
)

// StreamMetrics are the stats-stream metric families (REFERENCE.md §4.8).
type StreamMetrics struct {
	Set    *metrics.Set
	Prefix string
}

func (m StreamMetrics) counter(name string) *metrics.Counter {
	if m.Set == nil {
		return &metrics.Counter{}
	}
	return m.Set.GetOrCreateCounter(m.Prefix + name)
}

// StatsStream follows GET {engine}{Path} (NDJSON) with reconnects.
type StatsStream struct {
	Client  Doer
	BaseURL string
	Path    string
	Mode    string
	Sink    Sink
	Logger  *slog.Logger
	Metrics StreamMetrics
	// OnFallback is called once when auto mode gives up on the stream (404/405/501 before
	// any valid event); the OpenAI-stream fallback then stays in use.
	OnFallback func()
	// OnConnected reports connection changes.
	OnConnected func(bool)
}

// ErrStreamUnsupported is returned by Run in auto mode when the engine has no stream.
var ErrStreamUnsupported = errors.New("engine has no stats stream")

// Run follows the stream until ctx is done (nil) or auto mode falls back.
func (s *StatsStream) Run(ctx context.Context) error {
	if s.Mode == ModeOff {
		return nil
	}
	backoff := StreamBackoffMin
	everValid := false
	for ctx.Err() == nil {
		valid, status, err := s.once(ctx)
		everValid = everValid || valid
		if !everValid && s.Mode == ModeAuto && (status == fasthttp.StatusNotFound || status == fasthttp.StatusMethodNotAllowed || status == fasthttp.StatusNotImplemented) {
			s.Logger.Info("engine_stats_stream_unsupported", "status", status)
			if s.OnFallback != nil {
				s.OnFallback()
			}
			return ErrStreamUnsupported
		}
		if ctx.Err() != nil {
			break
		}
		reason := "eof"
		switch {
		case err != nil:
			reason = "error"
		case status != fasthttp.StatusOK:
			reason = "status"
		}
		s.Metrics.counter(`engine_stats_stream_reconnects_total{reason="` + reason + `"}`).Inc()
		s.Logger.Debug("engine_stats_stream_reconnect", "reason", reason, "status", status, "err", err, "backoff", backoff)
		if valid {
			backoff = StreamBackoffMin
		}
		if !sleep(ctx, backoff) {
			break
		}
		backoff = min(2*backoff, StreamBackoffMax)
	}
	return nil //nolint:nilerr // failed attempts are retried; Run ends with ctx or the auto fallback
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *StatsStream) once(ctx context.Context) (valid bool, status int, err error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(s.BaseURL + s.Path)
	req.Header.Set("Accept", "application/x-ndjson")
	resp.StreamBody = true
	if err := s.Client.Do(req, resp); err != nil {
		return false, 0, err
	}
	defer resp.CloseBodyStream() //nolint:errcheck // closing a finished or failed stream
	if resp.StatusCode() != fasthttp.StatusOK {
		return false, resp.StatusCode(), nil
	}
	body := resp.BodyStream()
	if body == nil {
		body = bytesReader(resp.Body())
	}
	if rc, ok := body.(fasthttp.ReadCloserWithError); ok {
		stop := context.AfterFunc(ctx, func() { _ = rc.CloseWithError(ctx.Err()) })
		defer stop()
	}
	if s.OnConnected != nil {
		s.OnConnected(true)
		defer s.OnConnected(false)
	}
	r := bufio.NewReaderSize(body, 4096)
	var long []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(line) <= MaxLineBytes {
				long = append(long, line...)
			} else {
				long = long[:MaxLineBytes+1]
			}
			continue
		}
		if len(long) > 0 {
			line = append(long, line...)
			long = long[:0]
		}
		if len(line) > 0 && (err == nil || errors.Is(err, io.EOF)) {
			if s.handleLine(line) {
				valid = true
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return valid, fasthttp.StatusOK, err
		}
	}
}

func (s *StatsStream) handleLine(line []byte) bool {
	if len(trimSpace(line)) == 0 {
		return false
	}
	ev, err := ParseLine(line)
	if err != nil {
		reason := ReasonJSON
		if ie, ok := errors.AsType[*InvalidEventError](err); ok {
			reason = ie.Reason
		}
		s.Metrics.counter(`engine_stats_stream_invalid_events_total{reason="` + reason + `"}`).Inc()
		return false
	}
	s.Metrics.counter(`engine_stats_stream_events_total{type="` + ev.Type + `"}`).Inc()
	switch ev.Type {
	case EventStats:
		s.Sink.EngineStats(ev.Model, ev.Stats)
	case EventPing:
		if ev.Concurrency != nil {
			s.Sink.EnginePing(ev.Model, ev.Concurrency)
		}
	}
	return true
}

// Poller polls a JSON or Prometheus endpoint every PollInterval.
type Poller struct {
	Client  Doer
	BaseURL string
	Path    string
	Sink    Sink
	Logger  *slog.Logger
	// Dialect is "" for the /kv-cache/stats JSON, else vllm or sglang (/metrics text).
	Dialect string
}

// Run polls until ctx is done.
func (p *Poller) Run(ctx context.Context) {
	// A small random phase keeps several pylons from polling in lock step.
	if !sleep(ctx, time.Duration(rand.Int64N(int64(PollInterval/10)))) {
		return
	}
	for {
		if err := p.once(); err != nil {
			p.Logger.Debug("engine_poll_failed", "path", p.Path, "err", err)
		}
		if !sleep(ctx, PollInterval) {
			return
		}
	}
}

type kvBody struct {
	Model    string  `json:"model"`
	Capacity *uint64 `json:"kv_cache_capacity_tokens"`
	Used     *uint64 `json:"kv_cache_used_tokens"`
	Free     *uint64 `json:"kv_cache_free_tokens"`
}

func (p *Poller) once() error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.BaseURL + p.Path)
	req.SetTimeout(PollTimeout)
	if err := p.Client.Do(req, resp); err != nil {
		return err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode())
	}
	if p.Dialect == "" {
		kv, model, err := ParseKV(resp.Body())
		if err != nil {
			return err
		}
		p.Sink.EngineKV(model, kv)
		return nil
	}
	byModel, err := ParseMetrics(p.Dialect, resp.Body())
	if err != nil {
		return err
	}
	for model, m := range byModel {
		p.Sink.EngineMetrics(model, m)
	}
	return nil
}

// ErrBadKVStats is returned for a /kv-cache/stats body without the three token fields.
var ErrBadKVStats = errors.New("kv cache stats need kv_cache_capacity_tokens, kv_cache_used_tokens and kv_cache_free_tokens")

// ParseKV decodes a /kv-cache/stats body.
func ParseKV(body []byte) (kv stats.KVStats, model string, err error) {
	var b kvBody
	if err := json.Unmarshal(body, &b); err != nil {
		return stats.KVStats{}, "", err
	}
	if b.Capacity == nil || b.Used == nil || b.Free == nil {
		return stats.KVStats{}, "", ErrBadKVStats
	}
	return stats.KVStats{CapacityTokens: *b.Capacity, UsedTokens: *b.Used, FreeTokens: *b.Free}, b.Model, nil
}
