package pylon

import (
	"context"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/register"
)

// publish tells every registrar that the snapshot changed (a no-op for a registrar that
// already has a send pending).
func (p *Pylon) publish() {
	rs := p.registrars.Load()
	if rs == nil {
		return
	}
	for _, r := range *rs {
		r.notify.Notify(p.sys.Root, r.pid)
	}
}

// delivered tells what the gateway with id gatewayID holds of the current state through
// the x-pylon-load headers of its own responses (register.Deps.Delivered): Held when no
// model was added, retired or drained since its last registration and every model's
// current snapshot reached it; Fresh when every model's snapshot reached it within the last
// coalesce interval (its view is as fresh as a change-driven update would make it).
func (p *Pylon) delivered(gatewayID string) register.Delivery {
	p.sentMu.Lock()
	sent, ok := p.sentStructure[gatewayID]
	p.sentMu.Unlock()
	if !ok || sent != p.structure.Load() {
		return register.NotHeld
	}
	result := register.Held
	gw := p.gateways.get(gatewayID)
	recent := p.now().Add(-p.cfg.StatsUpdateCoalesce).UnixNano()
	for _, e := range *p.models.Load() {
		g := e.cur.Load()
		if g == nil {
			continue
		}
		held, at := g.deliveredTo(gw)
		switch {
		case held:
		case at >= recent:
			result = register.Fresh
		default:
			return register.NotHeld
		}
	}
	return result
}

// snapshot is the registration for the gateway with id gatewayID.
func (p *Pylon) snapshot(gatewayID string) wire.Registration {
	if gatewayID != "" {
		p.sentMu.Lock()
		p.sentStructure[gatewayID] = p.structure.Load()
		p.sentMu.Unlock()
	}
	status := wire.StatusActive
	if p.draining.Load() || p.canaryFailing.Load() {
		status = wire.StatusInactive
	}
	reg := wire.Registration{
		ID: p.cfg.ID, URL: p.advertiseURL(), ClusterID: p.cfg.ClusterID, DispatchSeq: p.seqOf(gatewayID),
		EngineSlotShare: p.cfg.Admission.SlotShare, Models: map[string]wire.Model{},
	}
	for name, e := range *p.models.Load() {
		g := e.cur.Load()
		if g == nil {
			continue
		}
		s := g.snapshot(p.sys.Root)
		reg.Models[name] = wire.Model{Status: status, Generation: g.gen, Build: s.build, Stats: wire.StatsFromLoad(&s.load)}
	}
	return reg
}

// seqOf is the highest dispatch seq admitted from the gateway with id gatewayID (0: none).
func (p *Pylon) seqOf(gatewayID string) uint64 {
	if s := p.gateways.get(gatewayID); s != nil {
		return s.seq.Load()
	}
	return 0
}

// advertiseURL is the URL gateways are told to send requests to: --advertise-url, else
// the data listener's address.
func (p *Pylon) advertiseURL() string {
	if p.cfg.AdvertiseURL != "" {
		return p.cfg.AdvertiseURL
	}
	if p.ln != nil {
		return p.scheme() + p.ln.Addr().String()
	}
	return p.scheme() + p.cfg.ListenAddr
}

// scheme is the data listener's URL scheme and separator.
func (p *Pylon) scheme() string {
	if p.serverTLS != nil {
		return "https://"
	}
	return "http://"
}

// transport performs one control-plane request (register.HTTPTransport on the control
// client, with the token from --control-token-file when one is configured).
func (p *Pylon) transport(ctx context.Context, method, uri, token string, body []byte) (int, []byte, error) {
	return p.controlTransport(ctx, method, uri, token, body)
}

// fileToken is the control token read from --control-token-file ("" without one).
func (p *Pylon) fileToken() string {
	if p.token.Configured() {
		return p.token.Value()
	}
	return ""
}
