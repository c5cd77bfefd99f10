// Package register is the pylon's registrar: one protoactor actor per gateway that sends
// the registration snapshot (wire.Registration) every heartbeat and, coalesced, on every
// change, backs off exponentially with jitter while the gateway is unreachable or refuses,
// and learns the gateway's id from its ack. A gateway whose ack offers load updates gets,
// between full registrations (PUT), only the snapshot's load (wire.LoadUpdate, PATCH) as
// long as nothing else changed, with a full registration at least every
// Config.FullInterval and at once after it refuses an update. The HTTP exchange runs in a
// goroutine the actor starts; its result comes back as a message, so Receive never blocks.
package register

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/internal/wire"
)

// Defaults of the registration cadence.
const (
	DefaultHeartbeat   = time.Second
	DefaultCoalesce    = 10 * time.Millisecond
	BackoffMin         = time.Second
	BackoffMax         = 30 * time.Second
	BackoffJitter      = 0.2
	DefaultSendTimeout = 5 * time.Second
)

// Publish tells a registrar that the snapshot changed; it sends within one coalesce interval.
type Publish struct{}

// Notifier wakes one registrar on change without flooding its mailbox: only the first
// change after each send posts a Publish; later changes ride along with the pending send
// (the registrar reads the snapshot when it sends, not when it is told). Safe for
// concurrent use. The zero value is ready; pass it in Deps.Notifier.
type Notifier struct{ pending atomic.Bool }

// Notify posts Publish to pid unless one is already pending.
func (n *Notifier) Notify(sender actor.SenderContext, pid *actor.PID) {
	if n.pending.CompareAndSwap(false, true) {
		sender.Send(pid, Publish{})
	}
}

// sent is the result of one send.
type sent struct {
	status int
	ack    wire.RegistrationAck
	err    error
	// load marks a load update (else a full registration, whose structure key and send
	// time are key and at).
	load bool
	key  string
	at   time.Time
}

// Transport performs one control request and returns the status and body. A PATCH body is
// a load update (Content-Type wire.LoadUpdateContentType), a PUT body JSON.
type Transport func(ctx context.Context, method, url, token string, body []byte) (status int, respBody []byte, err error)

// Config configures one registrar.
type Config struct {
	// GatewayURL is the gateway base URL, e.g. http://127.0.0.1:8000.
	GatewayURL string
	// ID is the inference server id (the path element).
	ID string
	// Token is the bearer token ("" = none).
	Token string
	// Heartbeat is the full-snapshot period (default 1 s).
	Heartbeat time.Duration
	// Coalesce is the minimum spacing of change-driven sends (default 10 ms).
	Coalesce time.Duration
	// FullInterval is the longest time between two full registrations to a gateway that
	// takes load updates: the sends in between are load updates while only the load
	// changed. 0: every send is a full registration.
	FullInterval time.Duration
}

// Deps are the registrar's collaborators.
type Deps struct {
	// Snapshot builds the registration for the gateway with the given id ("" until the
	// first ack).
	Snapshot  func(gatewayID string) wire.Registration
	Transport Transport
	Now       func() time.Time
	Logger    *slog.Logger
	// Jitter scales a backoff by a random factor in [1−0.2, 1+0.2] (default math/rand).
	Jitter func(time.Duration) time.Duration
	// OnConnected reports whether the last exchange succeeded (metrics).
	OnConnected func(bool)
	// OnAck reports the gateway id learned from an ack.
	OnAck func(gatewayID string)
	// Notifier, when set, is the one producers call; the registrar re-opens it each time
	// it takes a snapshot.
	Notifier *Notifier
	// Delivered, when set, tells what the gateway with the given id already holds through
	// the x-pylon-load headers of its own responses: Held, the current state (a change-driven
	// send is skipped); Fresh, a state no older than one coalesce interval (the send is
	// skipped and the question asked again one interval later, so the state is sent once
	// those responses stop); NotHeld otherwise (sent). Heartbeats always go out. Under
	// request load this spares most change-driven sends to the gateway routing the traffic.
	Delivered func(gatewayID string) Delivery
}

// Delivery is what a gateway holds of the current state (Deps.Delivered).
type Delivery uint8

// Deliveries.
const (
	NotHeld Delivery = iota
	Held
	Fresh
)

// Registrar is the actor. Create it with New and spawn it with Props.
type Registrar struct {
	cfg  Config
	deps Deps

	alarm     *actors.Alarm
	gatewayID string
	inFlight  bool
	dirty     bool
	lastSent  time.Time
	failing   bool
	nextAt    time.Time
	backoff   time.Duration

	// Load updates: loadOK says the gateway's last ack offered them, fullKey and lastFull
	// are the structure and send time of the last full registration it accepted; needFull
	// makes the next send a full registration (after a failure or a refused update) and
	// resend makes it go at once.
	loadOK   bool
	fullKey  string
	lastFull time.Time
	needFull bool
	resend   bool
}

// Props returns the props of a registrar for cfg. It stays on protoactor's default
// dispatcher (its own goroutine per burst of messages), deliberately: Deps.Snapshot may wait
// for other actors (the pylon's generation actors rebuild their snapshots on demand), and
// on an inline mailbox (or the synchronized dispatcher) the registrar could run nested
// inside such an actor's processing on the same goroutine (a Tick queued behind a Publish
// sent from it) and wait for itself. Publishes are rare anyway: a Notifier posts at most one per send.
func Props(cfg Config, deps Deps) *actor.Props {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = DefaultCoalesce
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Jitter == nil {
		deps.Jitter = func(d time.Duration) time.Duration {
			return time.Duration(float64(d) * (1 - BackoffJitter + 2*BackoffJitter*rand.Float64()))
		}
	}
	deps.Logger = deps.Logger.With("component", "registrar", "gateway", cfg.GatewayURL)
	return actor.PropsFromProducer(func() actor.Actor { return &Registrar{cfg: cfg, deps: deps, backoff: BackoffMin} })
}

// Receive implements actor.Actor.
func (r *Registrar) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		r.alarm = actors.NewAlarm(c.ActorSystem().Root, c.Self())
		r.dirty = true
		r.step(c)
	case *actor.Stopping:
		r.alarm.Stop()
	case Publish, *Publish:
		r.dirty = true
		r.step(c)
	case actors.Tick:
		r.alarm.Fired()
		r.step(c)
	case *sent:
		r.inFlight = false
		r.done(m)
		r.step(c)
	default:
	}
}

func (r *Registrar) done(m *sent) {
	ok := m.err == nil && (m.status == 200 || (m.load && m.status == 204))
	if m.load && m.err == nil && !ok {
		// The gateway refused the load update (it does not know the backend, or it
		// holds another registration): a full registration goes out at once.
		r.deps.Logger.Info("load_update_refused", "status", m.status, "detail", "sending a full registration")
		r.needFull, r.resend = true, true
		return
	}
	if r.deps.OnConnected != nil {
		r.deps.OnConnected(ok)
	}
	if ok {
		if r.failing {
			r.deps.Logger.Info("registration_recovered")
		}
		r.failing, r.backoff = false, BackoffMin
		if !m.load {
			r.loadOK, r.fullKey, r.lastFull, r.needFull = m.ack.LoadUpdates, m.key, m.at, false
		}
		if m.ack.GatewayID != "" && m.ack.GatewayID != r.gatewayID {
			r.gatewayID = m.ack.GatewayID
			if r.deps.OnAck != nil {
				r.deps.OnAck(r.gatewayID)
			}
			r.dirty = true // resend with this gateway's dispatch sequence
		}
		return
	}
	now := r.deps.Now()
	wait := r.deps.Jitter(r.backoff)
	r.deps.Logger.Warn("registration_failed", "status", m.status, "err", m.err, "retry_in", wait)
	r.failing, r.nextAt = true, now.Add(wait)
	r.backoff = min(2*r.backoff, BackoffMax)
	r.needFull = true // the gateway may have restarted meanwhile
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// due is when the next send is due.
func (r *Registrar) due() time.Time {
	switch {
	case r.failing:
		return r.nextAt
	case r.resend:
		return time.Time{}
	case r.dirty:
		return r.lastSent.Add(r.cfg.Coalesce)
	default:
		return r.lastSent.Add(r.cfg.Heartbeat)
	}
}

// step sends when due, else arms the alarm for the next due time.
func (r *Registrar) step(c actor.Context) {
	if r.inFlight {
		return
	}
	now := r.deps.Now()
	if due := r.due(); now.Before(due) {
		r.alarm.Arm(now, due)
		return
	}
	r.send(c, now)
}

func (r *Registrar) send(c actor.Context, now time.Time) {
	reopen := func() {
		if r.deps.Notifier != nil {
			r.deps.Notifier.pending.Store(false) // a change from now on notifies again
		}
	}
	if heartbeat := !now.Before(r.lastSent.Add(r.cfg.Heartbeat)); !heartbeat && !r.failing && !r.resend && r.gatewayID != "" && r.deps.Delivered != nil {
		switch r.deps.Delivered(r.gatewayID) {
		case Held:
			reopen()
			r.dirty = false
			r.alarm.Arm(now, r.lastSent.Add(r.cfg.Heartbeat))
			return
		case Fresh: // still dirty, the Notifier stays closed: look again one interval later
			r.alarm.Arm(now, minTime(now.Add(r.cfg.Coalesce), r.lastSent.Add(r.cfg.Heartbeat)))
			return
		case NotHeld:
		}
	}
	reopen()
	reg := r.deps.Snapshot(r.gatewayID)
	reg.HeartbeatMs = uint64(max(r.cfg.Heartbeat.Milliseconds(), 0))
	res := &sent{key: structureKey(&reg), at: now}
	method, body := "PUT", []byte(nil)
	if r.loadOK && !r.needFull && r.cfg.FullInterval > 0 && now.Before(r.lastFull.Add(r.cfg.FullInterval)) && res.key == r.fullKey {
		if u, ok := wire.LoadUpdateOf(&reg); ok {
			method, body, res.load = "PATCH", wire.AppendLoadUpdate(nil, &u), true
		}
	}
	if !res.load {
		var err error
		if body, err = json.Marshal(&reg); err != nil {
			r.deps.Logger.Error("registration_encode_failed", "err", err)
			r.dirty, r.resend, r.lastSent = false, false, now // retry with the next heartbeat
			r.alarm.Arm(now, now.Add(r.cfg.Heartbeat))
			return
		}
	}
	r.inFlight, r.dirty, r.resend, r.lastSent = true, false, false, now
	root, self := c.ActorSystem().Root, c.Self()
	url := r.cfg.GatewayURL + wire.RegistrationPath + r.cfg.ID
	transport, token := r.deps.Transport, r.cfg.Token
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultSendTimeout)
		defer cancel()
		status, respBody, err := transport(ctx, method, url, token, body)
		res.status, res.err = status, err
		if err == nil && status == 200 && !res.load {
			if jerr := json.Unmarshal(respBody, &res.ack); jerr != nil {
				res.err = fmt.Errorf("decode ack: %w", jerr)
			}
		}
		root.Send(self, res)
	}()
}

// structureKey is what a load update cannot carry of reg: identity, URL, cluster, routing
// key, heartbeat, and each model's name, status, generation, capabilities and sources. A
// change to any of them needs a full registration.
func structureKey(reg *wire.Registration) string {
	var b strings.Builder
	for _, s := range []string{reg.ID, reg.URL, reg.ClusterID, reg.RoutingKey, strconv.FormatUint(reg.HeartbeatMs, 10)} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	names := make([]string, 0, len(reg.Models))
	for name := range reg.Models {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m := reg.Models[name]
		b.WriteString(name)
		b.WriteByte(0)
		b.WriteString(m.Status)
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(m.Generation, 10))
		for _, list := range [][]string{m.Stats.StatsCapabilities, m.Stats.StatsSources} {
			b.WriteByte(0)
			b.WriteString(strconv.Itoa(len(list)))
			for _, s := range list {
				b.WriteByte(1)
				b.WriteString(s)
			}
		}
		b.WriteByte(0)
	}
	return b.String()
}
