package pylon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/valyala/fasthttp"
)

// modelList is the part of the engine's GET /v1/models answer that discovery reads.
type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
}

// discover polls GET /v1/models and applies the list (first poll retried every 500 ms).
func (p *Pylon) discover(ctx context.Context) {
	polls := func(outcome string) {
		p.metrics.counter(mDiscoveryPolls + `{provider="openai",outcome="` + outcome + `"}`).Inc()
	}
	count := p.metrics.gauge(mDiscoveryModels + `{provider="openai"}`)
	interval := 500 * time.Millisecond
	for {
		names, err := p.listModels()
		if err != nil {
			polls("error")
			p.log.Debug("model_discovery_failed", "err", err)
		} else {
			polls("ok")
			count.Set(float64(len(names)))
			p.setModels(names)
			interval = p.cfg.DiscoveryPollInterval
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listModels asks the engine for its models: the distinct non-empty ids, in its order.
func (p *Pylon) listModels() ([]string, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.cfg.UpstreamBaseURL + "/v1/models")
	if err := p.client.DoTimeout(req, resp, 5*time.Second); err != nil {
		return nil, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: status %d", resp.StatusCode())
	}
	var l modelList
	if err := json.Unmarshal(resp.Body(), &l); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	names := make([]string, 0, len(l.Data))
	for _, m := range l.Data {
		if m.ID != "" && !slices.Contains(names, m.ID) {
			names = append(names, m.ID)
		}
	}
	return names, nil
}
