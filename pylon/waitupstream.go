package pylon

import (
	"context"
	"fmt"
	"time"
)

// upstreamPoll is how often waitForUpstream asks the engine.
const upstreamPoll = 200 * time.Millisecond

// waitForUpstream waits until the engine answers GET /v1/models, at most
// cfg.WaitForUpstream: a pylon started with its engine (same pod) registers only once the
// engine can serve, instead of advertising a backend every request to which fails.
func (p *Pylon) waitForUpstream(ctx context.Context) error {
	deadline := time.Now().Add(p.cfg.WaitForUpstream)
	tick := time.NewTicker(upstreamPoll)
	defer tick.Stop()
	for attempt := 0; ; attempt++ {
		_, err := p.fetchServedModels()
		if err == nil {
			if attempt > 0 {
				p.log.Info("upstream_ready", "url", p.cfg.UpstreamBaseURL, "waited", time.Since(deadline.Add(-p.cfg.WaitForUpstream)).Round(time.Millisecond))
			}
			return nil
		}
		if attempt == 0 {
			p.log.Info("upstream_waiting", "url", p.cfg.UpstreamBaseURL, "err", err, "detail", "not registering until the engine answers GET /v1/models")
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("the engine at %s did not answer GET /v1/models within %v (--wait-for-upstream): %w", p.cfg.UpstreamBaseURL, p.cfg.WaitForUpstream, err)
		}
		select {
		case <-ctx.Done():
			return nil // shutting down: Run stops as usual
		case <-tick.C:
		}
	}
}
