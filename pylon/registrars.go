package pylon

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/register"
)

// registrarRef is a running registrar and the notifier that wakes it on change.
type registrarRef struct {
	pid       *actor.PID
	notify    *register.Notifier
	gateway   string
	connected *metrics.Gauge
	series    string // connected's name
}

// startRegistrars starts one registrar per gateway (each sends the full snapshot at once):
// the --gateway URLs and, with --gateway-dns, every address the name resolves to, followed
// by a loop (until ctx ends) that re-resolves it and adds and removes registrars.
func (p *Pylon) startRegistrars(ctx context.Context, wg *sync.WaitGroup) {
	p.regMu.Lock()
	p.regs = map[string]registrarRef{}
	for _, gw := range p.cfg.Gateways {
		p.regs[gw] = p.spawnRegistrar(gw)
	}
	p.storeRegistrars()
	p.regMu.Unlock()
	if p.cfg.GatewayDNS == "" {
		return
	}
	p.resolveGateways(ctx)
	wg.Go(func() { actors.Every(ctx, p.cfg.GatewayDNSInterval, func() { p.resolveGateways(ctx) }) })
}

// resolveGateways makes the registrars of --gateway-dns match its current addresses. A
// failed lookup keeps the current set.
func (p *Pylon) resolveGateways(ctx context.Context) {
	scheme, host, port, _ := splitGatewayDNS(p.cfg.GatewayDNS)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	addrs, err := p.lookupHost(lctx, host)
	cancel()
	if err != nil {
		p.log.Warn("gateway_dns_lookup_failed", "name", p.cfg.GatewayDNS, "err", err)
		return
	}
	want := map[string]bool{}
	for _, gw := range p.cfg.Gateways {
		want[gw] = true
	}
	for _, a := range addrs {
		want[scheme+"://"+net.JoinHostPort(a, port)] = true
	}
	p.regMu.Lock()
	var gone []string
	for gw := range p.regs {
		if !want[gw] {
			gone = append(gone, gw)
		}
	}
	for gw := range want {
		if _, ok := p.regs[gw]; !ok {
			p.regs[gw] = p.spawnRegistrar(gw)
			p.log.Info("gateway_discovered", "gateway", gw)
		}
	}
	for _, gw := range gone {
		r := p.regs[gw]
		delete(p.regs, gw)
		_ = p.sys.Root.PoisonFuture(r.pid).Wait()
		// Its series goes too: gateway addresses change with every rollout, and a 0 left
		// behind would read as a registration failing for good.
		p.metrics.set.UnregisterMetric(r.series)
		p.log.Info("gateway_vanished", "gateway", gw)
	}
	p.storeRegistrars()
	p.regMu.Unlock()
	for _, gw := range gone { // best effort: a vanished replica is usually gone for good
		status, _, err := p.transport(ctx, "DELETE", gw+wire.RegistrationPath+p.cfg.ID, p.cfg.ControlToken, nil)
		p.log.Debug("deregistered", "gateway", gw, "status", status, "err", err)
	}
}

// storeRegistrars publishes regs for publish (under regMu).
func (p *Pylon) storeRegistrars() {
	rs := make([]registrarRef, 0, len(p.regs))
	for _, r := range p.regs {
		rs = append(rs, r)
	}
	p.registrars.Store(&rs)
}

// spawnRegistrar starts the registrar of gateway URL gw.
func (p *Pylon) spawnRegistrar(gw string) registrarRef {
	router := escape(gw)
	series := p.metrics.prefix + mRegistrationConn + `{router="` + router + `"}`
	connected := p.metrics.set.GetOrCreateGauge(series, nil)
	notify := &register.Notifier{}
	pid := p.sys.Root.Spawn(register.Props(
		register.Config{
			GatewayURL: gw, ID: p.cfg.ID, Token: p.cfg.ControlToken, Heartbeat: p.cfg.MinUpdateInterval, Coalesce: p.cfg.StatsUpdateCoalesce,
			FullInterval: p.cfg.FullRegistrationInterval,
		},
		register.Deps{
			Snapshot: p.snapshot, Transport: p.transport, Now: p.now, Logger: p.baseLog, Notifier: notify, Delivered: p.delivered,
			OnConnected: func(ok bool) {
				if ok {
					connected.Set(1)
				} else {
					connected.Set(0)
				}
			},
		}))
	return registrarRef{pid: pid, notify: notify, gateway: gw, connected: connected, series: series}
}

// deregister stops the registrars and sends DELETE to every gateway (the DNS loop has
// stopped: no registrar starts any more).
func (p *Pylon) deregister() {
	p.regMu.Lock()
	regs := p.regs
	p.regs = nil
	p.regMu.Unlock()
	for _, r := range regs {
		_ = p.sys.Root.PoisonFuture(r.pid).Wait()
	}
	for gw := range regs {
		status, _, err := p.transport(context.Background(), "DELETE", gw+wire.RegistrationPath+p.cfg.ID, p.cfg.ControlToken, nil)
		p.log.Info("deregistered", "gateway", gw, "status", status, "err", err)
	}
}
