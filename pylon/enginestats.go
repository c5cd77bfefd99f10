package pylon

import (
	"context"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/pylon/engine"
	"github.com/switchyard/switchyard/pylon/stats"
)

// startEngineLoops starts the configured engine-side loops until ctx ends: the engine's
// stats stream, the KV-cache poller, the vLLM/SGLang metrics scrape and, with configured
// model names, the check of the names the engine serves. Their updates reach the
// generations through the engine.Sink methods below.
func (p *Pylon) startEngineLoops(ctx context.Context, wg *sync.WaitGroup) {
	base := p.cfg.UpstreamBaseURL
	if p.cfg.EngineStatsStream != engine.ModeOff {
		// Not on the data path's relay.Conns: the stats stream is long-lived and may idle.
		streamClient := &fasthttp.HostClient{
			Addr: p.upstreamHost, Dial: p.dial, MaxIdleConnDuration: time.Second,
			IsTLS: p.client.IsTLS, TLSConfig: p.client.TLSConfig,
		}
		connected := p.metrics.gauge(mStreamConnected + `{mode="` + p.cfg.EngineStatsStream + `"}`)
		s := &engine.StatsStream{
			Client: streamClient, BaseURL: base, Path: p.cfg.EngineStatsStreamPath, Mode: p.cfg.EngineStatsStream,
			Sink: p, Logger: p.log, Metrics: engine.StreamMetrics{Set: p.metrics.set, Prefix: p.cfg.MetricsPrefix},
			OnConnected: func(ok bool) {
				if ok {
					connected.Set(1)
				} else {
					connected.Set(0)
				}
			},
		}
		wg.Go(func() {
			_ = s.Run(ctx)
			streamClient.CloseIdleConnections()
		})
	}
	if p.cfg.KVCacheStatsPath != "" {
		kv := &engine.Poller{Client: p.client, BaseURL: base, Path: p.cfg.KVCacheStatsPath, Sink: p, Logger: p.log}
		wg.Go(func() { kv.Run(ctx) })
	}
	if d := p.cfg.EngineMetrics; d == engine.DialectVLLM || d == engine.DialectSGLang {
		sc := &engine.Poller{
			Client: p.client, BaseURL: base, Path: "/metrics", Sink: p, Logger: p.log, Dialect: d,
			Metrics: engine.StreamMetrics{Set: p.metrics.set, Prefix: p.cfg.MetricsPrefix}, Now: p.now,
		}
		p.eng.mu.Lock()
		p.eng.poller = sc
		p.eng.mu.Unlock()
		wg.Go(func() { sc.Run(ctx) })
	}
	if len(p.cfg.ModelNames) > 0 { // discovered names are the engine's own
		wg.Go(func() { p.watchServedModels(ctx) })
	}
}

// update routes a model update to the current generation of model ("" = every model).
func (p *Pylon) update(model string, u stats.Update) {
	send := func(g *generation) {
		u.Generation = g.gen
		g.remember(&u, p.now)
		p.sys.Root.Send(g.pid, &updated{update: u})
	}
	if model == "" {
		for _, e := range *p.models.Load() {
			if g := e.cur.Load(); g != nil {
				send(g)
			}
		}
		return
	}
	if e := p.lookup([]byte(model)); e != nil {
		if g := e.cur.Load(); g != nil {
			send(g)
		}
	}
}

// EngineStats implements engine.Sink.
func (p *Pylon) EngineStats(model string, ev *stats.RequestEvent) {
	p.update(model, stats.Update{Stats: ev})
}

// EnginePing implements engine.Sink.
func (p *Pylon) EnginePing(model string, r *stats.ConcurrencyReport) {
	p.update(model, stats.Update{Concurrency: r})
}

// EngineKV implements engine.Sink.
func (p *Pylon) EngineKV(model string, kv stats.KVStats) { p.update(model, stats.Update{KV: &kv}) }
