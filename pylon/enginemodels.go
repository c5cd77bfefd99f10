package pylon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon/engine"
	"github.com/switchyard/switchyard/pylon/stats"
)

// Metric names of the engine's model names and of its metrics scrape, without the prefix.
const (
	// mEngineModelServed is 1 when the engine's GET /v1/models lists a configured model
	// under that very name, 0 when it does not (absent until the engine answered once).
	mEngineModelServed = "engine_model_served"
	// mEngineMetricsMatched is 1 when the last scrape of the engine's /metrics had figures
	// for the model (under its own name, a name the engine serves it under, or as the
	// engine's only model), 0 when it had none.
	mEngineMetricsMatched = "engine_metrics_model_matched"
)

// Served-model check timing: retried while the engine is still loading, then re-checked
// now and then (an engine may be restarted with other names).
const (
	servedRetryInterval = 2 * time.Second
	servedCheckInterval = time.Minute
	servedCheckTimeout  = 5 * time.Second
)

// engineState is what the pylon knows of the engine behind it beyond the data path: the
// names it serves, which of its metrics' model names each pylon model gets, the metrics
// scraper and the canaries' last outcomes (for /debug/engine, metrics and logs).
type engineState struct {
	mu        sync.Mutex
	served    []engine.ServedModel // the last GET /v1/models answer (nil before one)
	servedErr string
	isServed  map[string]bool        // configured model → listed under its name
	matches   map[string]engineMatch // pylon model → where its figures came from
	unmatched []string               // engine models of the last scrape no pylon model took
	warned    map[string]bool        // engine models already reported as unmatched
	canaries  map[string]canaryStatus
	poller    *engine.Poller
}

type engineMatch struct {
	EngineModel string `json:"engine_model"`
	Match       string `json:"match"`
}

// canaryStatus is a model's last canary outcome.
type canaryStatus struct {
	Result              string    `json:"result"`
	Reason              string    `json:"reason,omitempty"`
	Detail              string    `json:"detail,omitempty"`
	At                  time.Time `json:"at"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastOKAt            time.Time `json:"last_ok_at,omitzero"`
}

// EngineMetrics implements engine.Sink: every served model gets at most one entry of the
// scrape (see engine.MatchModel), marked Shared when other backends of the cluster
// (--cluster-id differs from --inference-server-id) front the same engine.
func (p *Pylon) EngineMetrics(byEngine map[string]stats.EngineMetrics) {
	shared := p.cfg.ClusterID != p.cfg.ID
	p.eng.mu.Lock()
	served := p.eng.served
	p.eng.mu.Unlock()
	matches := map[string]engineMatch{}
	taken := map[string]bool{}
	for name, e := range *p.models.Load() {
		if e.cur.Load() == nil {
			continue
		}
		src, how := engine.MatchModel(name, byEngine, served)
		if how == "" {
			continue
		}
		taken[src] = true
		matches[name] = engineMatch{EngineModel: src, Match: how}
		m := byEngine[src]
		m.Shared = shared
		p.update(name, stats.Update{Metrics: &m})
	}
	var unmatched []string
	for _, k := range slices.Sorted(maps.Keys(byEngine)) {
		if !taken[k] {
			unmatched = append(unmatched, k)
		}
	}
	p.noteMatches(matches, unmatched)
}

// noteMatches records a scrape's matches: the matched gauge of every model, a log line
// when a model's source changes, and a warning for an engine model no pylon model takes.
func (p *Pylon) noteMatches(matches map[string]engineMatch, unmatched []string) {
	p.eng.mu.Lock()
	prev := p.eng.matches
	p.eng.matches, p.eng.unmatched = matches, unmatched
	if p.eng.warned == nil {
		p.eng.warned = map[string]bool{}
	}
	var warn []string
	for _, u := range unmatched {
		if !p.eng.warned[u] {
			p.eng.warned[u] = true
			warn = append(warn, u)
		}
	}
	p.eng.mu.Unlock()
	for name := range *p.models.Load() {
		m, ok := matches[name]
		v := 0.0
		if ok {
			v = 1
		}
		p.metrics.gauge(mEngineMetricsMatched + `{model="` + escape(name) + `"}`).Set(v)
		if ok && prev[name] != m {
			if m.Match == engine.MatchOnly && m.EngineModel != "" && m.EngineModel != name {
				p.log.Warn("engine_metrics_under_another_model_name", "model", name, "engine_model", m.EngineModel,
					"hint", "the engine reports this model under another name; its figures are used as the engine has no other model")
			} else {
				p.log.Info("engine_metrics_model_matched", "model", name, "engine_model", m.EngineModel, "match", m.Match)
			}
		}
	}
	for _, u := range warn {
		p.log.Warn("engine_metrics_model_unmatched", "engine_model", u,
			"hint", "the engine reports figures for a model no pylon model maps to (set --model-name to the engine's served name)")
	}
}

// watchServedModels asks the engine which names it serves (GET /v1/models) until it
// answers, then every servedCheckInterval, and reports every configured model the engine
// does not serve under that name: engines that check the name (vLLM) answer requests for
// it with 404.
func (p *Pylon) watchServedModels(ctx context.Context) {
	warnedErr := false
	for {
		served, err := p.fetchServedModels()
		interval := servedCheckInterval
		if err != nil {
			interval = servedRetryInterval
			if !warnedErr {
				warnedErr = true
				p.log.Warn("engine_models_unavailable", "url", p.cfg.UpstreamBaseURL+"/v1/models", "err", err)
			}
		} else {
			warnedErr = false
		}
		p.servedChecked(served, err)
		if !sleepCtx(ctx, interval) {
			return
		}
	}
}

// servedChecked records a GET /v1/models outcome and reports changes.
func (p *Pylon) servedChecked(served []engine.ServedModel, err error) {
	p.eng.mu.Lock()
	if err != nil {
		p.eng.servedErr = err.Error()
		p.eng.mu.Unlock()
		return
	}
	p.eng.served, p.eng.servedErr = served, ""
	prev := p.eng.isServed
	p.eng.isServed = map[string]bool{}
	for _, m := range p.cfg.ModelNames {
		p.eng.isServed[m] = slices.ContainsFunc(served, func(s engine.ServedModel) bool { return s.ID == m })
	}
	now := p.eng.isServed
	p.eng.mu.Unlock()
	ids := servedIDs(served)
	for _, m := range p.cfg.ModelNames {
		ok := now[m]
		v := 0.0
		if ok {
			v = 1
		}
		p.metrics.gauge(mEngineModelServed + `{model="` + escape(m) + `"}`).Set(v)
		if was, known := prev[m]; known && was == ok {
			continue
		}
		if !ok {
			p.log.Warn("engine_model_not_served", "model", m, "engine_models", strings.Join(ids, ","),
				"hint", "the engine serves this model under another name: engines that check the name (vLLM) answer 404; "+
					"serve the name too (vLLM: --served-model-name with several names) or give the pylon --model-name with the engine's name")
		} else if prev != nil {
			p.log.Info("engine_model_served", "model", m)
		}
	}
}

// fetchServedModels is one GET /v1/models.
func (p *Pylon) fetchServedModels() ([]engine.ServedModel, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.cfg.UpstreamBaseURL + "/v1/models")
	if err := p.client.DoTimeout(req, resp, servedCheckTimeout); err != nil {
		return nil, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: status %d", resp.StatusCode())
	}
	var l struct {
		Data []engine.ServedModel `json:"data"`
	}
	if err := json.Unmarshal(resp.Body(), &l); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	out := make([]engine.ServedModel, 0, len(l.Data))
	for _, m := range l.Data {
		if m.ID != "" {
			out = append(out, m)
		}
	}
	return out, nil
}

// servedNames is the engine's served names as last listed ("" when unknown).
func (p *Pylon) servedNames() string {
	p.eng.mu.Lock()
	defer p.eng.mu.Unlock()
	return strings.Join(servedIDs(p.eng.served), ", ")
}

// servedIDs is the names of a GET /v1/models answer, in its order.
func servedIDs(served []engine.ServedModel) []string {
	ids := make([]string, 0, len(served))
	for _, s := range served {
		ids = append(ids, s.ID)
	}
	return ids
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// engineDebug is the /debug/engine answer.
type engineDebug struct {
	Scraper      *engine.ScrapeStatus  `json:"engine_metrics,omitempty"`
	ServedModels []string              `json:"served_models,omitempty"`
	ServedError  string                `json:"served_models_error,omitempty"`
	Unmatched    []string              `json:"unmatched_engine_models,omitempty"`
	Models       map[string]modelDebug `json:"models"`
}

type modelDebug struct {
	Served  *bool         `json:"served,omitempty"`
	Metrics *engineMatch  `json:"metrics,omitempty"`
	Canary  *canaryStatus `json:"canary,omitempty"`
}

// serveEngineDebug answers GET /debug/engine on the admin listener: the metrics scraper's
// state, the engine's served names, and per model where its engine figures come from, if
// the engine serves it under its name, and its last canary (with the failure reason).
func (p *Pylon) serveEngineDebug(ctx *fasthttp.RequestCtx) {
	var d engineDebug
	p.eng.mu.Lock()
	if p.eng.poller != nil {
		s := p.eng.poller.Status()
		d.Scraper = &s
	}
	d.ServedModels = servedIDs(p.eng.served) // empty: left out, as omitempty drops an empty slice
	d.ServedError, d.Unmatched = p.eng.servedErr, slices.Clone(p.eng.unmatched)
	d.Models = map[string]modelDebug{}
	for name, e := range *p.models.Load() {
		if e.cur.Load() == nil {
			continue
		}
		var md modelDebug
		if ok, known := p.eng.isServed[name]; known {
			md.Served = &ok
		}
		if m, ok := p.eng.matches[name]; ok {
			md.Metrics = &m
		}
		if c, ok := p.eng.canaries[name]; ok {
			md.Canary = &c
		}
		d.Models[name] = md
	}
	p.eng.mu.Unlock()
	body, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		internalError().write(ctx)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(append(body, '\n'))
}
