package gateway

import (
	"time"

	"github.com/switchyard/switchyard/gateway/dispatch"
)

// ttftProbe compares one streamed attempt's TTFT estimate with its observed time to first
// byte: from the moment the gateway sent the request to the pylon to the first body byte
// the pylon answered (the first read of the event stream). Only an event stream is
// observed: a buffered answer's first byte comes with its last, after the whole
// generation, which no TTFT estimate covers. The observation counts once the stream has
// ended and only when it did not fail (a broken stream, an error event): a failed
// attempt's first byte (often its error) says nothing about the cluster's TTFT, and a
// retried attempt never reaches a stream. It then updates the ttft_estimate_error_*
// series and feeds the cluster's TTFT correction.
type ttftProbe struct {
	sent     time.Time // zero: nothing to observe
	first    time.Time // the first body byte (zero until then)
	estimate time.Duration
	feedback dispatch.Feedback
	series   *ttftSeries
}

// arm starts observing an attempt sent at sent with outcome out, served by the backend
// of series bs (nothing without an estimate).
func (p *ttftProbe) arm(ts *targetSeries, bs *backendSeries, out *dispatch.Outcome, sent time.Time) {
	if !out.HasEstimate {
		*p = ttftProbe{}
		return
	}
	*p = ttftProbe{sent: sent, estimate: out.Estimate, feedback: out.Feedback, series: ts.ttftOf(bs, out.ClusterID)}
}

// read notes the arrival of body bytes at now.
func (p *ttftProbe) read(n int, now func() time.Time) {
	if n > 0 && p.first.IsZero() && !p.sent.IsZero() {
		p.first = now()
	}
}

// finish records the observation of a stream that ended without failing, and disarms p.
func (p *ttftProbe) finish(failed bool) {
	if !failed && !p.first.IsZero() {
		observed := p.first.Sub(p.sent)
		p.series.observe(p.estimate, observed)
		p.feedback.Observe(observed)
	}
	*p = ttftProbe{}
}
