package gateway

import (
	_ "embed" // the status page
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The status page: GET /ui on the admin listener is one self-contained HTML page (inline
// CSS and script, nothing fetched from elsewhere) that polls GET /ui/state every 2 s and
// draws each routing target's backends. The page itself holds no data and is served
// without the control token (a browser cannot attach one to a navigation); /ui/state is
// fleet state like /debug/state and needs the token like it: the page asks for it once
// and sends it as a bearer token (kept in the tab's sessionStorage).

// uiPage is the status page.
//
//go:embed ui/index.html
var uiPage []byte

// uiPath and uiStatePath are the status page and the JSON it polls.
const (
	uiPath      = "/ui"
	uiStatePath = "/ui/state"
)

// uiTTFTTokens is the prompt size of the TTFT estimate the page shows per backend.
const uiTTFTTokens = 1000

// uiCSP forbids the page every origin but its own (and inline script and style).
const uiCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (g *Gateway) handleUI(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Content-Security-Policy", uiCSP)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(uiPage)
}

// uiState is what /ui/state answers.
type uiState struct {
	GatewayID string     `json:"gateway_id"`
	Draining  bool       `json:"draining"`
	LBConfig  uiLBConfig `json:"lb_config"`
	Targets   []uiTarget `json:"targets"`
	// TTFTTokens is the prompt size of the backends' TTFT estimates.
	TTFTTokens int `json:"ttft_estimate_input_tokens"`
}

// uiLBConfig summarises the lb-config in force: the algorithm per model.
type uiLBConfig struct {
	Path              string            `json:"path"` // "": the built-in default
	Default           string            `json:"default"`
	Models            map[string]string `json:"models"`
	RequestAlgorithms []string          `json:"request_algorithms"`
	// Permissive: any algorithm may be chosen by x-routing-method (no file).
	Permissive bool `json:"permissive"`
}

// uiTarget is one routing target: its algorithm and settings, its scheduler's state and
// its backends.
type uiTarget struct {
	RoutingKey string `json:"routing_key"`
	Model      string `json:"model"`
	Algorithm  string `json:"algorithm"`
	// Settings is the lb-config entry in force, under the file's keys (ui_settings.go).
	Settings   []uiSetting `json:"settings"`
	Scheduler  bool        `json:"scheduler"`
	Parked     int         `json:"parked"`
	Candidates int         `json:"candidates"`
	Backends   []uiBackend `json:"backends"`
}

// uiBackend is one backend of a target.
type uiBackend struct {
	ID                string  `json:"id"`
	Cluster           string  `json:"cluster"`
	URL               string  `json:"url"`
	Status            string  `json:"status"` // the model's status on the backend
	Routable          bool    `json:"routable"`
	RTTMs             float64 `json:"rtt_ms"`
	Running           uint64  `json:"running"`
	MaxConcurrency    uint64  `json:"max_concurrency"`
	QueueSize         uint64  `json:"queue_size"`
	QueuedInputTokens uint64  `json:"queued_input_tokens"`
	Reserved          int     `json:"reserved"` // dispatches not yet in the backend's reports
	// TTFTEstimateMs is RTT + queue + prefill of a TTFTTokens request (null: cannot be
	// estimated, e.g. no valid throughput yet); the cluster's learned correction is
	// CorrectionFactor (1 without observations).
	TTFTEstimateMs   *float64            `json:"ttft_estimate_ms"`
	CorrectionFactor float64             `json:"ttft_correction_factor"`
	Health           fleet.EjectionState `json:"health"`
	EjectedOverCap   bool                `json:"ejected_over_cap"`
	// Served counts the target's upstream attempts this backend answered with 200 since
	// the gateway started: the page turns its growth into a recent share of traffic.
	Served uint64 `json:"served"`
}

func (g *Gateway) handleUIState(ctx *fasthttp.RequestCtx) {
	b, _ := json.Marshal(g.uiState())
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(b)
}

func (g *Gateway) uiState() *uiState {
	cfg := g.lbcfg.Load()
	st := &uiState{GatewayID: g.cfg.GatewayID, Draining: g.draining.Load(), LBConfig: summariseLBConfig(cfg, g.cfg.LBConfigPath), TTFTTokens: uiTTFTTokens}
	scheds := map[dispatch.Target]*dispatch.State{}
	for _, s := range g.dir.States() {
		scheds[s.Target] = s
	}
	targets := map[dispatch.Target]*uiTarget{}
	target := func(t dispatch.Target) *uiTarget {
		if u := targets[t]; u != nil {
			return u
		}
		entry := cfg.ModelEntry(t.Model)
		u := &uiTarget{RoutingKey: t.RoutingKey, Model: t.Model, Algorithm: entryName(&entry), Settings: uiSettings(&entry), Backends: []uiBackend{}}
		if s := scheds[t]; s != nil {
			u.Scheduler, u.Parked, u.Candidates = true, s.Parked, s.Candidates
		}
		targets[t] = u
		return u
	}
	for t := range scheds {
		target(t)
	}
	for _, b := range g.fleet.States() {
		for name, m := range b.Models {
			t := dispatch.Target{RoutingKey: b.RoutingKey, Model: name}
			u := target(t)
			u.Backends = append(u.Backends, g.uiBackend(t, b, m, scheds[t]))
		}
	}
	for _, u := range targets {
		slices.SortFunc(u.Backends, func(a, b uiBackend) int { return strings.Compare(a.ID, b.ID) })
		st.Targets = append(st.Targets, *u)
	}
	slices.SortFunc(st.Targets, func(a, b uiTarget) int {
		return strings.Compare(a.RoutingKey+"\x00"+a.Model, b.RoutingKey+"\x00"+b.Model)
	})
	if st.Targets == nil {
		st.Targets = []uiTarget{}
	}
	return st
}

func (g *Gateway) uiBackend(t dispatch.Target, b *fleet.State, m *fleet.ModelState, s *dispatch.State) uiBackend {
	s2 := &m.Stats
	u := uiBackend{
		ID: b.ID, Cluster: b.ClusterID, URL: b.URL, Status: m.Status, Routable: b.Routable, RTTMs: b.RTTMs,
		Running: s2.NumRunningQueries, MaxConcurrency: s2.MaxEngineConcurrency, QueueSize: s2.QueueSize,
		QueuedInputTokens: s2.QueuedInputSize, Health: b.Health, CorrectionFactor: 1,
	}
	if l, err := s2.Load(); err == nil {
		if est := l.Estimate(load.Millis(b.RTTMs), uiTTFTTokens, 0, 1, load.Ignore{}); est.TTFT.IsFinite() {
			v := math.Round(float64(est.TTFT)*10) / 10
			u.TTFTEstimateMs = &v
		}
	}
	if s != nil {
		u.Reserved = s.Reservations[b.ID]
		u.EjectedOverCap = slices.Contains(s.EjectedOverCap, b.ID)
		if c, ok := s.TTFTCorrections[b.ClusterID]; ok && c.Observations > 0 {
			u.CorrectionFactor = c.Factor
		}
	}
	if v, ok := g.metrics.targets.Load(t); ok {
		if bs, ok := v.(*targetSeries).backends.Load(b.ID); ok {
			u.Served = bs.(*backendSeries).attempts200.Get()
		}
	}
	return u
}

// entryName is an lb-config entry's algorithm as configured (its alias kept).
func entryName(e *lbconfig.Entry) string {
	if e.Name != "" && e.Name != e.Algorithm.String() {
		return e.Algorithm.String() + " (" + e.Name + ")"
	}
	return e.Algorithm.String()
}

func summariseLBConfig(c *lbconfig.Config, path string) uiLBConfig {
	u := uiLBConfig{Path: path, Default: entryName(&c.Default), Models: map[string]string{}, RequestAlgorithms: []string{}, Permissive: c.Permissive}
	for name := range c.Models {
		e := c.Models[name].Entry
		u.Models[name] = entryName(&e)
	}
	for a := range c.RequestAlgorithms {
		u.RequestAlgorithms = append(u.RequestAlgorithms, a.String())
	}
	slices.Sort(u.RequestAlgorithms)
	return u
}
