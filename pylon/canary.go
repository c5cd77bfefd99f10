package pylon

import (
	"context"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/gateway/control"
	"github.com/switchyard/switchyard/pylon/relay"
)

// Canary results (pylon_canary_checks_total{result}).
const (
	canaryOK      = "ok"
	canaryRunaway = "runaway"
	canaryFailed  = "failed"
)

// startCanaries runs the canary loop until ctx ends (REFERENCE.md §4.7): every
// CanaryInterval one tiny completion per served model, straight to the engine. A failed or
// runaway canary advertises every model INACTIVE (the registrars send at once); the next
// passing round makes them ACTIVE again.
func (p *Pylon) startCanaries(ctx context.Context, wg *sync.WaitGroup) {
	if p.cfg.CanaryInterval <= 0 {
		return
	}
	var n uint64
	wg.Go(func() { actors.Every(ctx, p.cfg.CanaryInterval, func() { p.canaryRound(&n) }) })
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
		result := p.canary(name, *n)
		p.metrics.counter(mCanaryChecks + `{model="` + escape(name) + `",result="` + result + `"}`).Inc()
		ok = ok && result == canaryOK
	}
	if p.canaryFailing.Swap(!ok) != !ok {
		p.log.Warn("canary_state", "failing", !ok)
		p.structure.Add(1)
		p.publish()
	}
}

// canary sends one canary completion for model and classifies the answer.
func (p *Pylon) canary(model string, n uint64) string {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(p.upstreamScheme + "://" + p.upstreamHost + "/v1/chat/completions")
	req.Header.SetContentType("application/json")
	req.Header.Set(control.HeaderRequestID, "canary-"+strconv.FormatUint(n, 10))
	req.SetBodyString(`{"model":` + strconv.Quote(model) + `,"messages":[{"role":"user","content":"1+1="}],"max_tokens":` +
		strconv.Itoa(p.cfg.CanaryThreshold) + `,"stream":false}`)
	if err := p.client.DoTimeout(req, resp, p.cfg.CanaryTimeout); err != nil {
		p.log.Debug("canary_failed", "model", model, "err", err)
		return canaryFailed
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		p.log.Debug("canary_failed", "model", model, "status", resp.StatusCode())
		return canaryFailed
	}
	var s relay.Scanner
	s.JSON(resp.Body())
	if s.Usage.OutputTokens() == uint64(p.cfg.CanaryThreshold) { //nolint:gosec // validated > 0
		return canaryRunaway
	}
	return canaryOK
}
