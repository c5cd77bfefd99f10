package pylon

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/internal/wire"
)

// Canary results (pylon_canary_checks_total{result}).
const (
	canaryOK      = "ok"
	canaryRunaway = "runaway"
	canaryFailed  = "failed"
)

// Canary failure reasons (pylon_canary_failures_total{reason}), a fixed set.
const (
	reasonTimeout       = "timeout"         // no answer within the canary timeout
	reasonConnection    = "connection"      // the engine could not be reached
	reasonModelNotFound = "model_not_found" // 404: the engine does not serve the model under this name
	reasonUnauthorized  = "unauthorized"    // 401 or 403: the engine wants an API key
	reasonRejected      = "rejected"        // 400 or 422: the engine refused the request (no chat template, context too small)
	reasonOverloaded    = "overloaded"      // 429 or 503
	reasonEngineError   = "engine_error"    // another 5xx
	reasonStatus        = "status"          // any other status
	reasonRunaway       = "runaway"         // exactly the threshold's tokens: the generation did not stop by itself
)

// mCanaryFailures counts failed canaries by model and reason.
const mCanaryFailures = "canary_failures_total"

// maxCanaryDetail bounds the engine's error message kept for logs and /debug/engine.
const maxCanaryDetail = 200

// startCanaries runs the canary loop until ctx ends: every CanaryInterval one tiny chat
// completion per served model, straight to the engine. A failed or runaway canary
// advertises every model INACTIVE (the registrars send at once); the next passing round
// makes them ACTIVE again. A kick (kickCanaries) runs a round at once.
func (p *Pylon) startCanaries(ctx context.Context, wg *sync.WaitGroup) {
	if p.cfg.CanaryInterval <= 0 {
		return
	}
	var n uint64
	wg.Go(func() { actors.EveryOrKicked(ctx, p.cfg.CanaryInterval, p.canaryKick, func() { p.canaryRound(&n) }) })
}

// kickCanaries asks the canary loop for a round now when the last one failed (the engine
// answers again after the liveness watch found it unresponsive: its models need not stay
// INACTIVE until the next period).
func (p *Pylon) kickCanaries() {
	if !p.canaryFailing.Load() {
		return
	}
	select {
	case p.canaryKick <- struct{}{}:
	default: // a round is asked for already
	}
}

// canaryRound sends one canary per served model (n numbers them) and flips the advertised
// state when the round's verdict changes.
func (p *Pylon) canaryRound(n *uint64) {
	ok := true
	for name, e := range *p.models.Load() {
		if e.cur.Load() == nil {
			continue
		}
		*n++
		o := p.canary(name, *n)
		p.metrics.counter(mCanaryChecks + `{model="` + escape(name) + `",result="` + o.result + `"}`).Inc()
		if o.result != canaryOK {
			p.metrics.counter(mCanaryFailures + `{model="` + escape(name) + `",reason="` + o.reason + `"}`).Inc()
		}
		p.noteCanary(name, o)
		ok = ok && o.result == canaryOK
	}
	if p.canaryFailing.Swap(!ok) != !ok {
		p.log.Warn("canary_state", "failing", !ok)
		p.structure.Add(1)
		p.publish()
	}
}

// canaryOutcome is one canary's verdict: result, and unless ok a reason and a detail
// (the engine's error message, cut to maxCanaryDetail bytes).
type canaryOutcome struct {
	result, reason, detail string
}

// noteCanary keeps a model's last canary outcome for /debug/engine and logs a change:
// a warning with the reason when a model starts failing (or fails for another reason),
// a line when it passes again.
func (p *Pylon) noteCanary(model string, o canaryOutcome) {
	now := p.now()
	p.eng.mu.Lock()
	if p.eng.canaries == nil {
		p.eng.canaries = map[string]canaryStatus{}
	}
	prev, seen := p.eng.canaries[model]
	s := canaryStatus{Result: o.result, Reason: o.reason, Detail: o.detail, At: now, LastOKAt: prev.LastOKAt}
	if o.result == canaryOK {
		s.LastOKAt = now
	} else {
		s.ConsecutiveFailures = prev.ConsecutiveFailures + 1
	}
	p.eng.canaries[model] = s
	p.eng.mu.Unlock()
	switch {
	case o.result != canaryOK && (prev.Result != o.result || prev.Reason != o.reason):
		p.log.Warn("canary_failed", "model", model, "result", o.result, "reason", o.reason, "detail", o.detail)
	case o.result == canaryOK && seen && prev.Result != canaryOK:
		p.log.Info("canary_passed", "model", model, "after_failures", prev.ConsecutiveFailures)
	}
}

// canary sends one canary for model and classifies the answer. The request is one that
// vLLM and SGLang accept from any chat model: POST /v1/chat/completions with the model's
// name (engines that check names need the one they serve; a 404 says so), one user message,
// max_tokens CanaryThreshold (1: a liveness check without the runaway test) and no
// streaming. Its x-request-id is unique per pylon, since
// vLLM takes it as the engine's request id and refuses a duplicate of a running one.
func (p *Pylon) canary(model string, n uint64) canaryOutcome {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(p.upstreamScheme + "://" + p.upstreamHost + "/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.Header.Set(wire.HeaderRequestID, "canary-"+p.cfg.ID+"-"+strconv.FormatUint(n, 10))
	req.SetBodyString(`{"model":` + strconv.Quote(model) + `,"messages":[{"role":"user","content":"1+1="}],"max_tokens":` +
		strconv.Itoa(p.cfg.CanaryThreshold) + `,"stream":false}`)
	if err := p.client.DoTimeout(req, resp, p.cfg.CanaryTimeout); err != nil {
		reason := reasonConnection
		if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) {
			reason = reasonTimeout
		}
		return canaryOutcome{result: canaryFailed, reason: reason, detail: cut(err.Error())}
	}
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		detail := "status " + strconv.Itoa(code)
		if msg := engineErrorMessage(resp.Body()); msg != "" {
			detail += ": " + msg
		}
		reason := statusReason(code)
		if reason == reasonModelNotFound {
			if names := p.servedNames(); names != "" {
				detail += " (the engine serves: " + names + ")"
			}
		}
		return canaryOutcome{result: canaryFailed, reason: reason, detail: cut(detail)}
	}
	var s relay.Scanner
	s.JSON(resp.Body())
	// A threshold of 1 is a liveness check only (a reasoning model thinks longer than
	// any small threshold): one token is all it may generate, so it cannot run away.
	if p.cfg.CanaryThreshold > 1 && s.Usage.OutputTokens() == uint64(p.cfg.CanaryThreshold) {
		return canaryOutcome{
			result: canaryRunaway, reason: reasonRunaway,
			detail: "generated max_tokens (" + strconv.Itoa(p.cfg.CanaryThreshold) + ") tokens without stopping",
		}
	}
	return canaryOutcome{result: canaryOK}
}

func statusReason(code int) string {
	switch {
	case code == fasthttp.StatusNotFound:
		return reasonModelNotFound
	case code == fasthttp.StatusUnauthorized || code == fasthttp.StatusForbidden:
		return reasonUnauthorized
	case code == fasthttp.StatusBadRequest || code == fasthttp.StatusUnprocessableEntity:
		return reasonRejected
	case code == fasthttp.StatusTooManyRequests || code == fasthttp.StatusServiceUnavailable:
		return reasonOverloaded
	case code >= 500 && code <= 599:
		return reasonEngineError
	default:
		return reasonStatus
	}
}

// engineErrorMessage finds the message in an engine's error body: vLLM and SGLang answer
// {"object":"error","message":…}, OpenAI-style servers {"error":{"message":…}}, FastAPI's
// validation {"detail":…}.
func engineErrorMessage(body []byte) string {
	var e struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	if e.Message != "" {
		return e.Message
	}
	var nested struct {
		Message string `json:"message"`
	}
	var text string
	switch {
	case json.Unmarshal(e.Error, &nested) == nil && nested.Message != "":
		return nested.Message
	case json.Unmarshal(e.Error, &text) == nil && text != "":
		return text
	case json.Unmarshal(e.Detail, &text) == nil && text != "":
		return text
	case len(e.Detail) > 0:
		return string(e.Detail)
	}
	return ""
}

// cut bounds s to maxCanaryDetail bytes on a rune boundary.
func cut(s string) string {
	if len(s) <= maxCanaryDetail {
		return s
	}
	i := maxCanaryDetail
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
