package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
)

// Passive health and the first-byte deadline on the proxy's side: each attempt waits for
// the pylon's first response byte no longer than a deadline derived from that backend's
// own TTFT estimate, and every attempt's outcome feeds the backend's outlier state (see
// package fleet: consecutive failures eject a backend for a growing backoff).

// Metric names of passive health (without the prefix).
const (
	// mEjections counts ejections by the failure that triggered them.
	mEjections = "backend_ejections_total"
	// mEjected is the number of backends ejected right now.
	mEjected = "backends_ejected"
)

// setUpHealth registers the passive health metrics and returns the fleet's policy and
// ejection callback.
func (g *Gateway) setUpHealth() (fleet.Outlier, func(string, fleet.Failure)) {
	for _, f := range fleet.Failures {
		g.metrics.set.GetOrCreateCounter(g.metrics.series(mEjections, "reason", f.String()))
	}
	g.metrics.set.NewGauge(g.metrics.series(mEjected), func() float64 {
		if g.fleet == nil {
			return 0
		}
		return float64(g.fleet.Ejected())
	})
	o := fleet.Outlier{
		ConsecutiveFailures: max(g.cfg.OutlierConsecutiveFailures, 0),
		BaseEjection:        g.cfg.OutlierBaseEjection,
		MaxEjection:         g.cfg.OutlierMaxEjection,
		MaxEjectionPercent:  g.cfg.OutlierMaxEjectionPercent,
	}
	return o, func(_ string, why fleet.Failure) { g.metrics.inc(mEjections, "reason", why.String()) }
}

// firstByteDeadline is how long an attempt waits for the pylon's first response byte:
// factor × the backend's TTFT estimate, at least the floor, at most the headers timeout.
// It applies to a request that asks for a stream, whose first byte is the response
// headers; a buffered answer's first byte comes only once the whole answer is generated,
// which the TTFT estimate does not cover, so it waits up to the headers timeout. An
// unknown estimate waits up to the headers timeout too.
func (g *Gateway) firstByteDeadline(out *dispatch.Outcome, stream bool) time.Duration {
	limit := g.cfg.HeadersTimeout
	if !stream || !out.HasTTFT || g.cfg.FirstByteTimeoutFactor <= 0 {
		return limit
	}
	d := time.Duration(min(float64(out.TTFT)*g.cfg.FirstByteTimeoutFactor, float64(limit)))
	return min(max(d, g.cfg.FirstByteTimeoutFloor), limit)
}

var streamTrue = []byte("true")

// asksForStream reports whether a request body sets "stream": true (a top-level key in
// practice: a quoted "stream" can only appear unescaped as a key).
func asksForStream(body []byte) bool {
	for rest := body; ; {
		i := bytes.Index(rest, streamKey)
		if i < 0 {
			return false
		}
		rest = rest[i+len(streamKey):]
		v := bytes.TrimLeft(rest, " \t\r\n")
		if len(v) == 0 || v[0] != ':' {
			continue
		}
		if bytes.HasPrefix(bytes.TrimLeft(v[1:], " \t\r\n"), streamTrue) {
			return true
		}
	}
}

// transportFailure classifies an attempt that got no answer: a first-byte timeout when the
// wait reached its deadline (the watchdog closed the connection), else a connect failure
// (refused, reset, closed before answering). It returns the error to report, naming the
// deadline that passed.
func transportFailure(err error, waited, deadline, headersTimeout time.Duration) (fleet.Failure, error) {
	if waited < deadline && !errors.Is(err, fasthttp.ErrTimeout) {
		return fleet.FailConnect, err
	}
	if deadline < headersTimeout {
		return fleet.FailFirstByteTimeout, fmt.Errorf("%w of %v (waited %v): %w", errFirstByteTimeout, deadline, waited.Round(time.Millisecond), err)
	}
	return fleet.FailFirstByteTimeout, fmt.Errorf("%w (waited %v): %w", errHeadersTimeout, waited.Round(time.Millisecond), err)
}

// pylonFailed reports whether a response is the pylon's own failure answer (a 5xx
// problem+json): neither the engine's answer nor proof that the backend works.
func pylonFailed(resp *fasthttp.Response, status int) bool {
	return status >= 500 && bytes.HasPrefix(resp.Header.ContentType(), problemJSON)
}

var problemJSON = []byte("application/problem+json")
