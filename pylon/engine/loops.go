package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
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
	// EngineMetrics receives one whole scrape of the engine's /metrics, keyed by the
	// engine's model names ("" only when no series names a model), so that the sink can
	// hand each of its models exactly one entry per scrape.
	EngineMetrics(byEngineModel map[string]stats.EngineMetrics)
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

// StreamMetrics are where the stats stream and the metrics poller count what they see.
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
	// Metrics counts scrapes of /metrics by result and the scrapes whose counters gave no
	// rate by reason (optional).
	Metrics StreamMetrics
	// Now is the clock of the counter rates (default time.Now).
	Now func() time.Time

	rates  Rates
	mu     sync.Mutex
	status ScrapeStatus
}

// ScrapeStatus is the state of the /metrics scraper, for the pylon's debug output.
type ScrapeStatus struct {
	Dialect      string    `json:"dialect"`
	LastAt       time.Time `json:"last_scrape_at,omitzero"`
	LastOK       bool      `json:"last_scrape_ok"`
	LastError    string    `json:"last_error,omitempty"`
	Scrapes      uint64    `json:"scrapes"`
	Failures     uint64    `json:"failures"`
	EngineModels []string  `json:"engine_models,omitempty"` // model names of the last good scrape
	// CounterResets counts scrapes whose token counters belonged to another engine process
	// than the previous scrape's (an engine restart): they gave no rate.
	CounterResets uint64 `json:"counter_resets"`
}

// Status returns the scraper's state.
func (p *Poller) Status() ScrapeStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.status
	s.Dialect = p.Dialect
	s.EngineModels = slices.Clone(s.EngineModels)
	return s
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

// Scrape results (engine_metrics_scrapes_total{result}).
const (
	ScrapeOK             = "ok"
	ScrapeError          = "error"          // no answer (connection refused, timeout)
	ScrapeStatusCode     = "status"         // an answer other than 200
	ScrapeBadExposition  = "bad_exposition" // a body that is not Prometheus text
	scrapeFailedLogEvery = 60               // failed scrapes between two warnings
)

func (p *Poller) once() error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.BaseURL + p.Path)
	req.SetTimeout(PollTimeout)
	if p.Dialect != "" {
		// The classic text format: Prometheus' Python client answers OpenMetrics only to
		// clients asking for it.
		req.Header.Set("Accept", "text/plain; version=0.0.4")
	}
	err := p.Client.Do(req, resp)
	if err == nil && resp.StatusCode() != fasthttp.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode())
		if p.Dialect != "" {
			p.scraped(ScrapeStatusCode, err, nil)
		}
		return err
	}
	if err != nil {
		if p.Dialect != "" {
			p.scraped(ScrapeError, err, nil)
		}
		return err
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
		p.scraped(ScrapeBadExposition, err, nil)
		return err
	}
	p.Sink.EngineMetrics(p.convert(byModel))
	p.scraped(ScrapeOK, nil, byModel)
	return nil
}

// convert turns parsed figures into the sink's form, counters into rates.
func (p *Poller) convert(byModel map[string]Figures) map[string]stats.EngineMetrics {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	at := now()
	out := make(map[string]stats.EngineMetrics, len(byModel))
	for model, f := range byModel {
		m := stats.EngineMetrics{KVUsage: f.KVUsage, KVCapacityTokens: f.KVCapacityTokens, MeanPromptTokens: f.MeanPromptTokens}
		if !math.IsNaN(f.Running) || !math.IsNaN(f.Waiting) {
			m.HasLoad = true
			m.Running, m.Waiting = count(f.Running), count(f.Waiting)
		}
		var skip string
		m.GenerationTPS, m.PromptTPS, skip = p.rates.Observe(model, &f, at)
		if skip != "" {
			p.Metrics.counter(`engine_metrics_rate_skips_total{reason="` + skip + `"}`).Inc()
		}
		if skip == RateReset {
			p.mu.Lock()
			p.status.CounterResets++
			p.mu.Unlock()
			p.Logger.Info("engine_counters_reset", "engine_model", model)
		}
		out[model] = m
	}
	p.rates.Retain(func(model string) bool { _, ok := byModel[model]; return ok })
	return out
}

// count converts a scraped count (NaN = not exported) to an integer.
func count(v float64) uint64 {
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	if v >= math.MaxUint32 {
		return math.MaxUint32
	}
	return uint64(math.Round(v))
}

// scraped records a scrape's result; failures are logged when they start, every
// scrapeFailedLogEvery-th time, and when scraping recovers.
func (p *Poller) scraped(result string, err error, byModel map[string]Figures) {
	p.Metrics.counter(`engine_metrics_scrapes_total{result="` + result + `"}`).Inc()
	p.mu.Lock()
	wasOK, failures := p.status.LastOK || p.status.Scrapes == 0, p.status.Failures
	p.status.Scrapes++
	p.status.LastAt = time.Now()
	if p.Now != nil {
		p.status.LastAt = p.Now()
	}
	p.status.LastOK = err == nil
	p.status.LastError = ""
	if err != nil {
		p.status.Failures++
		p.status.LastError = err.Error()
	} else {
		p.status.EngineModels = p.status.EngineModels[:0]
		for m := range byModel {
			p.status.EngineModels = append(p.status.EngineModels, m)
		}
		slices.Sort(p.status.EngineModels)
	}
	p.mu.Unlock()
	switch {
	case err != nil && (wasOK || (failures+1)%scrapeFailedLogEvery == 0):
		p.Logger.Warn("engine_metrics_scrape_failed", "url", p.BaseURL+p.Path, "dialect", p.Dialect, "result", result, "err", err)
	case err == nil && !wasOK:
		p.Logger.Info("engine_metrics_scrape_recovered", "url", p.BaseURL+p.Path, "dialect", p.Dialect)
	}
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
