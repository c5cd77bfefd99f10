package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/echo"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
)

// Control is one model's fault injection, set with PUT /test-control/models/{model}.
// The zero value injects nothing. A PUT replaces the whole control.
type Control struct {
	// ChatFailure fails every generation request (status FailStatus, default 503).
	ChatFailure bool `json:"chat_failure"`
	// BringupBlocked holds pylon-generated requests (IDs starting with calibration- or
	// canary-) before their headers until released.
	BringupBlocked bool `json:"bringup_blocked"`
	// FailStatus is the status of injected failures (400–599; default 503).
	FailStatus int `json:"fail_status,omitempty"`
	// FailNext fails the next N requests; it counts down.
	FailNext int `json:"fail_next,omitempty"`
	// FailFraction fails this fraction of requests (deterministic for a seed).
	FailFraction float64 `json:"fail_fraction,omitempty"`
	// RetryAfterSeconds adds Retry-After to injected failures when positive.
	RetryAfterSeconds int `json:"retry_after_s,omitempty"`
	// DelayMs adds latency before admission.
	DelayMs int `json:"delay_ms,omitempty"`
	// Hang holds requests before their headers until the control changes or the engine closes.
	Hang bool `json:"hang,omitempty"`
	// DropAfterTokens closes the connection after this many output tokens (nil: never).
	DropAfterTokens *int `json:"drop_after_tokens,omitempty"`
}

func (c *Control) validate() error {
	var msgs []string
	if c.FailStatus != 0 && (c.FailStatus < 400 || c.FailStatus > 599) {
		msgs = append(msgs, fmt.Sprintf("fail_status is %d, want 400–599", c.FailStatus))
	}
	if c.FailNext < 0 {
		msgs = append(msgs, "fail_next must be ≥ 0")
	}
	if !(c.FailFraction >= 0 && c.FailFraction <= 1) {
		msgs = append(msgs, "fail_fraction must be in [0, 1]")
	}
	if c.RetryAfterSeconds < 0 {
		msgs = append(msgs, "retry_after_s must be ≥ 0")
	}
	if c.DelayMs < 0 {
		msgs = append(msgs, "delay_ms must be ≥ 0")
	}
	if c.DropAfterTokens != nil && *c.DropAfterTokens < 0 {
		msgs = append(msgs, "drop_after_tokens must be ≥ 0")
	}
	if len(msgs) > 0 {
		return badRequest("invalid_value", strings.Join(msgs, "; "))
	}
	return nil
}

// applyFaults runs the model's fault injection for one request: hang, delay, failure.
// It returns the drop-after-tokens limit (-1 for none).
func (e *Engine) applyFaults(ms *modelState, class string) (dropAfter int, err error) {
	var c Control
	fail := false
	for {
		e.mu.Lock()
		c = ms.control
		changed := ms.changed
		if c.Hang || (c.BringupBlocked && class == classPylon) {
			e.mu.Unlock()
			select {
			case <-changed:
				continue
			case <-e.done:
				return -1, errEngineClosed
			}
		}
		switch {
		case c.ChatFailure:
			fail = true
		case c.FailNext > 0:
			ms.control.FailNext--
			fail = true
		case c.FailFraction > 0:
			ms.requests++
			u := xxh3.HashStringSeed(ms.name, e.cfg.Seed^(ms.requests*0x9e3779b97f4a7c15))
			fail = float64(u>>11)/float64(1<<53) < c.FailFraction
		}
		e.mu.Unlock()
		break
	}
	if err := e.sleep(time.Duration(c.DelayMs) * time.Millisecond); err != nil {
		return -1, err
	}
	if fail {
		status := c.FailStatus
		if status == 0 {
			status = fasthttp.StatusServiceUnavailable
		}
		typ := typeServer
		switch {
		case status == fasthttp.StatusTooManyRequests:
			typ = typeRateLimit
		case status == fasthttp.StatusServiceUnavailable:
			typ = typeUnavailable
		case status < 500:
			typ = typeInvalidRequest
		}
		return -1, &apiError{
			Status: status, Type: typ, Code: "injected_failure", RetryAfter: c.RetryAfterSeconds,
			Message: "injected failure: " + fasthttp.StatusMessage(status),
		}
	}
	if c.DropAfterTokens != nil {
		return *c.DropAfterTokens, nil
	}
	return -1, nil
}

// routeTestControl serves the fault-injection endpoints (only with
// Config.EnableTestControl); it reports false for any other path.
func (e *Engine) routeTestControl(ctx *fasthttp.RequestCtx, path []byte) bool {
	switch string(path) {
	case "/test-control":
		e.get(ctx, e.serveTestControl)
	case "/test-control/discovery-models":
		e.put(ctx, e.putDiscoveryModels)
	case "/test-control/health":
		e.put(ctx, e.putHealth)
	default:
		model, ok := bytes.CutPrefix(path, []byte("/test-control/models/"))
		if !ok || len(model) == 0 {
			return false
		}
		name := string(model)
		e.put(ctx, func(ctx *fasthttp.RequestCtx) { e.putModelControl(ctx, name) })
	}
	return true
}

func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid_json", "invalid control body: "+decodeMessage(err))
	}
	return nil
}

// decodeMessage is a JSON decoding error's message with the one part that can be long
// client input, an unknown field's name, bounded (quoteClient).
func decodeMessage(err error) string {
	msg := err.Error()
	const unknown = "json: unknown field "
	if quoted, ok := strings.CutPrefix(msg, unknown); ok {
		if name, uerr := strconv.Unquote(quoted); uerr == nil {
			return unknown + echo.Quote(name)
		}
		return unknown + echo.Quote(quoted)
	}
	return msg
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, err)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (e *Engine) putModelControl(ctx *fasthttp.RequestCtx, model string) {
	var c Control
	if err := decodeStrict(ctx.PostBody(), &c); err != nil {
		writeError(ctx, err)
		return
	}
	if err := c.validate(); err != nil {
		writeError(ctx, err)
		return
	}
	e.mu.Lock()
	ms := e.models[model]
	if ms != nil {
		ms.control = c
		close(ms.changed)
		ms.changed = make(chan struct{})
	}
	e.mu.Unlock()
	if ms == nil {
		writeError(ctx, &apiError{Status: fasthttp.StatusNotFound, Type: typeNotFound, Code: "model_not_found", Message: "the model " + echo.Quote(model) + " does not exist"})
		return
	}
	writeJSON(ctx, c)
}

type discoveryBody struct {
	Models []string `json:"models"`
}

func (e *Engine) putDiscoveryModels(ctx *fasthttp.RequestCtx) {
	var b discoveryBody
	if err := decodeStrict(ctx.PostBody(), &b); err != nil {
		writeError(ctx, err)
		return
	}
	for _, m := range b.Models {
		if m == "" {
			writeError(ctx, badRequest("invalid_value", "model names must not be empty"))
			return
		}
	}
	e.mu.Lock()
	e.discovery = append([]string(nil), b.Models...)
	for _, m := range b.Models {
		if e.models[m] == nil {
			e.models[m] = e.newModelState(m)
		}
	}
	e.mu.Unlock()
	writeJSON(ctx, b)
}

type healthBody struct {
	// DelayMs delays GET /health; negative restores the configured delay.
	DelayMs int `json:"delay_ms"`
}

func (e *Engine) putHealth(ctx *fasthttp.RequestCtx) {
	var b healthBody
	if err := decodeStrict(ctx.PostBody(), &b); err != nil {
		writeError(ctx, err)
		return
	}
	e.mu.Lock()
	e.healthDelay = time.Duration(b.DelayMs) * time.Millisecond
	if b.DelayMs < 0 {
		e.healthDelay = -1
	}
	e.mu.Unlock()
	writeJSON(ctx, b)
}

// RequestCount is one row of the request counters in GET /test-control.
type RequestCount struct {
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	Class    string `json:"class"`
	Count    uint64 `json:"count"`
}

// ControlSnapshot is the body of GET /test-control.
type ControlSnapshot struct {
	Models            []string           `json:"models"`
	DiscoveryRequests uint64             `json:"discovery_requests"`
	HealthDelayMs     int64              `json:"health_delay_ms"`
	Controls          map[string]Control `json:"controls"`
	Requests          []RequestCount     `json:"requests"`
}

func (e *Engine) serveTestControl(ctx *fasthttp.RequestCtx) {
	e.mu.Lock()
	snap := ControlSnapshot{
		Models:            append([]string{}, e.discovery...),
		DiscoveryRequests: e.discoveryRequests,
		HealthDelayMs:     e.cfg.HealthDelay.Milliseconds(),
		Controls:          make(map[string]Control, len(e.models)),
		Requests:          make([]RequestCount, 0, len(e.counters)),
	}
	if e.healthDelay >= 0 {
		snap.HealthDelayMs = e.healthDelay.Milliseconds()
	}
	for name, ms := range e.models {
		snap.Controls[name] = ms.control
	}
	for k, n := range e.counters {
		snap.Requests = append(snap.Requests, RequestCount{Endpoint: k.endpoint, Model: k.model, Class: k.class, Count: n})
	}
	e.mu.Unlock()
	slices.SortFunc(snap.Requests, func(a, b RequestCount) int {
		return strings.Compare(a.Endpoint+"\x00"+a.Model+"\x00"+a.Class, b.Endpoint+"\x00"+b.Model+"\x00"+b.Class)
	})
	writeJSON(ctx, snap)
}
