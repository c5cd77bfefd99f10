package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/internal/echo"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/fleet"
	"github.com/switchyard/switchyard/internal/promtext"
	"github.com/switchyard/switchyard/internal/wire"
)

// handle is the public listener's handler: the OpenAI API, /v1/models, /healthz and
// /readyz (and /metrics with PublicMetrics). Nothing reachable here changes routing: the
// control endpoint, debug state and profiles live on the admin listener (handleAdmin).
func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	defer g.recoverPanic(ctx)
	p := ctx.Path()
	if inferencePath(p) {
		if !ctx.IsPost() {
			g.reject(ctx, g.access.pick(), g.deps.Now(), nil, fmt.Errorf("%w: %s needs POST", ErrMethod, p))
			return
		}
		g.handleInference(ctx)
		return
	}
	switch path := string(p); {
	case path == "/v1/models":
		g.handleModels(ctx)
	case path == "/healthz", path == "/readyz":
		g.handleHealth(ctx, path)
	case path == "/metrics" && g.cfg.PublicMetrics:
		g.handleMetrics(ctx)
	default:
		writeError(ctx, fmt.Errorf("%w: no route for %s", ErrNotFound, echo.Quote(path)))
	}
}

// handleAdmin is the admin listener's handler: the control endpoint pylons register on,
// /metrics, /debug/state, the status page (/ui) and the profiles. With a control token
// configured every path but /healthz, /readyz and /ui needs it (/metrics not with
// MetricsNoAuth).
func (g *Gateway) handleAdmin(ctx *fasthttp.RequestCtx) {
	defer g.recoverPanic(ctx)
	path := string(ctx.Path())
	if path == "/healthz" || path == "/readyz" {
		g.handleHealth(ctx, path)
		return
	}
	// The status page holds no data (its state, /ui/state, needs the token): see ui.go.
	exempt := (path == "/metrics" && g.cfg.MetricsNoAuth) || path == uiPath
	if !exempt && !g.adminAuthorized(path, ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)) {
		g.metrics.inc(mAdminUnauthorized)
		if strings.HasPrefix(path, wire.RegistrationPath) {
			if ctx.IsPatch() {
				g.metrics.inc(mLoadUpdates, "result", "unauthorized")
			} else {
				g.metrics.inc(mRegistrations, "result", "unauthorized")
			}
		}
		writeError(ctx, fmt.Errorf("%w: a valid bearer token is required (Authorization: Bearer <control token>)", ErrUnauthorized))
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="switchyard-admin"`)
		return
	}
	switch {
	case strings.HasPrefix(path, wire.RegistrationPath):
		g.handleControl(ctx, strings.TrimPrefix(path, wire.RegistrationPath))
	case path == "/metrics":
		g.handleMetrics(ctx)
	case path == "/debug/state":
		g.handleDebugState(ctx)
	case path == uiPath:
		g.handleUI(ctx)
	case path == uiStatePath:
		g.handleUIState(ctx)
	case g.cfg.EnablePprof && strings.HasPrefix(path, "/debug/pprof/"):
		pprofhandler.PprofHandler(ctx)
	default:
		writeError(ctx, fmt.Errorf("%w: no route for %s", ErrNotFound, echo.Quote(path)))
	}
}

func (g *Gateway) recoverPanic(ctx *fasthttp.RequestCtx) {
	if r := recover(); r != nil {
		g.log.Error("handler_panic", "panic", fmt.Sprint(r), "path", echo.Quote(string(ctx.Path())))
		writeError(ctx, fmt.Errorf("panic: %v", r))
	}
}

// handleHealth answers /healthz (the process serves) and /readyz: ready once some model
// has a routable backend, and not while draining. A gateway with no backend answers every
// request 404, so a load balancer should not send it traffic; pylons find gateways through
// a Service that publishes not-ready addresses too, so they still register with it.
func (g *Gateway) handleHealth(ctx *fasthttp.RequestCtx, path string) {
	ctx.SetContentType("application/json")
	switch {
	case path == "/healthz":
		ctx.SetBodyString(`{"status":"ok"}`)
	case g.draining.Load():
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"status":"draining"}`)
	case !g.anyRoutable():
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"status":"no_routable_backend"}`)
	default:
		ctx.SetBodyString(`{"status":"ready"}`)
	}
}

// anyRoutable reports whether some backend is routable for some model.
func (g *Gateway) anyRoutable() bool {
	for _, b := range g.fleet.States() {
		if !b.HasRTT {
			continue
		}
		for name := range b.Models {
			if b.Models[name].Status == wire.StatusActive {
				return true
			}
		}
	}
	return false
}

func (g *Gateway) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType(promtext.ContentType)
	g.metrics.write(ctx, g.fleetGauges().write)
}

// handleControl serves PUT/PATCH/DELETE /control/v1/backends/{id}.
func (g *Gateway) handleControl(ctx *fasthttp.RequestCtx, id string) {
	if id == "" || strings.Contains(id, "/") {
		writeError(ctx, fmt.Errorf("%w: backend id missing in the path", ErrNotFound))
		return
	}
	switch {
	case ctx.IsPut():
		reg, err := g.limits.ParseRegistration(id, ctx.PostBody())
		if err != nil {
			g.metrics.inc(mRegistrations, "result", "invalid")
			writeError(ctx, fmt.Errorf("%w: %w", ErrBadRequest, err))
			return
		}
		if err := g.fleet.Register(reg); err != nil {
			g.metrics.inc(mRegistrations, "result", "conflict")
			writeError(ctx, fmt.Errorf("%w: %w", ErrConflict, err))
			return
		}
		g.metrics.inc(mRegistrations, "result", "accepted")
		ctx.SetContentType("application/json")
		ctx.SetBody(g.ack)
	case ctx.IsPatch():
		g.handleLoadUpdate(ctx, id)
	case ctx.IsDelete():
		if !g.fleet.Deregister(id) {
			writeError(ctx, fmt.Errorf("%w: backend %s is not registered", ErrNotFound, echo.Quote(id)))
			return
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	default:
		writeError(ctx, fmt.Errorf("%w: use PUT, PATCH or DELETE", ErrMethod))
	}
}

// handleLoadUpdate serves PATCH /control/v1/backends/{id}: a load update (wire.LoadUpdate)
// between full registrations, answered 204 without a body. A backend the gateway does
// not know (404 unknown_backend) or whose registration does not list a model or generation
// of the update (409 registration_required) gets the update refused, and its pylon sends
// a full registration next.
func (g *Gateway) handleLoadUpdate(ctx *fasthttp.RequestCtx, id string) {
	u, err := g.limits.ParseLoadUpdate(ctx.PostBody())
	if err != nil {
		g.metrics.inc(mLoadUpdates, "result", "invalid")
		writeError(ctx, fmt.Errorf("%w: %w", ErrBadRequest, err))
		return
	}
	switch err := g.fleet.UpdateLoad(id, &u); {
	case err == nil:
		g.metrics.inc(mLoadUpdates, "result", "accepted")
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	case errors.Is(err, ErrUnknownBackend):
		g.metrics.inc(mLoadUpdates, "result", "unknown_backend")
		writeError(ctx, err)
	default:
		g.metrics.inc(mLoadUpdates, "result", "registration_required")
		writeError(ctx, err)
	}
}

type modelList struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	OwnedBy string `json:"owned_by"`
}

// activeModels lists the models with at least one routable backend, sorted.
func (g *Gateway) activeModels() []string {
	seen := map[string]bool{}
	for _, b := range g.fleet.States() {
		if !b.HasRTT {
			continue
		}
		for name := range b.Models {
			m := b.Models[name]
			if m.Status == wire.StatusActive {
				seen[name] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// handleModels serves GET /v1/models[?model_ids=a&model_ids=b].
func (g *Gateway) handleModels(ctx *fasthttp.RequestCtx) {
	ids := ctx.QueryArgs().PeekMulti("model_ids")
	filter := make([]string, 0, len(ids))
	for _, v := range ids {
		filter = append(filter, string(v))
	}
	list := modelList{Object: "list", Data: []modelEntry{}}
	for _, m := range g.activeModels() {
		if len(filter) == 0 || slices.Contains(filter, m) {
			list.Data = append(list.Data, modelEntry{ID: m, Object: "model", OwnedBy: "switchyard"})
		}
	}
	b, _ := json.Marshal(list)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

type debugState struct {
	GatewayID    string         `json:"gateway_id"`
	Draining     bool           `json:"draining"`
	LBConfigPath string         `json:"lb_config_path"`
	Backends     []*fleet.State `json:"backends"`
	Targets      []debugTarget  `json:"targets"`
}

type debugTarget struct {
	RoutingKey string `json:"routing_key"`
	Model      string `json:"model"`
	*dispatch.State
}

func (g *Gateway) handleDebugState(ctx *fasthttp.RequestCtx) {
	st := debugState{GatewayID: g.cfg.GatewayID, Draining: g.draining.Load(), LBConfigPath: g.cfg.LBConfigPath, Backends: g.fleet.States()}
	for _, s := range g.dir.States() {
		st.Targets = append(st.Targets, debugTarget{RoutingKey: s.Target.RoutingKey, Model: s.Target.Model, State: s})
	}
	slices.SortFunc(st.Targets, func(a, b debugTarget) int {
		return strings.Compare(a.RoutingKey+"\x00"+a.Model, b.RoutingKey+"\x00"+b.Model)
	})
	b, _ := json.MarshalIndent(st, "", "  ")
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// fleetGauges computes the gauges read from the fleet at scrape time: routable backends
// per target and in all, and the routing targets (schedulers) alive.
func (g *Gateway) fleetGauges() fleetGauges {
	f := fleetGauges{m: g.metrics, perTarget: map[dispatch.Target]int{}, targets: g.dir.Len()}
	for _, b := range g.fleet.States() {
		routable := false
		for name := range b.Models {
			m := b.Models[name]
			t := dispatch.Target{RoutingKey: b.RoutingKey, Model: name}
			if m.Status == wire.StatusActive && b.HasRTT {
				f.perTarget[t]++
				routable = true
			} else if _, ok := f.perTarget[t]; !ok {
				f.perTarget[t] = 0
			}
		}
		if routable {
			f.routable++
		}
	}
	return f
}
