package register_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/register"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// call is one request the registrar made.
type call struct {
	at     time.Duration // since the test started (virtual time)
	method string
	url    string
	token  string
	reg    wire.Registration // a PUT's
	upd    wire.LoadUpdate   // a PATCH's
}

// rig is one registrar in its own actor system with a scripted transport.
type rig struct {
	t      *testing.T
	start  time.Time
	sys    *actor.ActorSystem
	pid    *actor.PID
	notify *register.Notifier

	mu        sync.Mutex
	calls     []call
	snapshots []string // gateway ids passed to Snapshot
	answer    func(n int) (int, []byte, error)
	delivered atomic.Uint32 // what Deps.Delivered answers (a register.Delivery)
	status    string        // the model's status in the snapshots (default ACTIVE)
	queue     uint64        // the model's queue size in the snapshots
}

func ack(gatewayID string) []byte {
	b, _ := json.Marshal(wire.RegistrationAck{GatewayID: gatewayID, HeartbeatMs: 1000})
	return b
}

// loadAck is the ack of a gateway that takes load updates.
func loadAck(gatewayID string) []byte {
	b, _ := json.Marshal(wire.RegistrationAck{GatewayID: gatewayID, HeartbeatMs: 1000, LoadUpdates: true})
	return b
}

// newRig spawns a registrar; answer scripts the transport's reply to the n-th call (from 0).
func newRig(t *testing.T, cfg register.Config, jitter func(time.Duration) time.Duration, answer func(n int) (int, []byte, error)) *rig {
	t.Helper()
	r := &rig{t: t, start: time.Now(), sys: actors.NewSystem(slog.New(slog.DiscardHandler)), notify: &register.Notifier{}, answer: answer}
	deps := register.Deps{
		Snapshot: func(gatewayID string) wire.Registration {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.snapshots = append(r.snapshots, gatewayID)
			seq := uint64(0)
			if gatewayID == "gw-1" {
				seq = 42 // this gateway's dispatch sequence
			}
			status := r.status
			if status == "" {
				status = wire.StatusActive
			}
			return wire.Registration{ID: "p1", URL: "http://p1:8100", DispatchSeq: seq, Models: map[string]wire.Model{
				"m": {Status: status, Generation: 1, Stats: wire.Stats{QueueSize: r.queue}},
			}}
		},
		Transport: func(_ context.Context, method, url, token string, body []byte) (int, []byte, error) {
			c := call{at: time.Since(r.start), method: method, url: url, token: token}
			var err error
			if method == "PATCH" {
				c.upd, err = wire.DefaultLimits().ParseLoadUpdate(body)
			} else {
				err = json.Unmarshal(body, &c.reg)
			}
			if err != nil {
				t.Errorf("%s body %s: %v", method, body, err)
			}
			r.mu.Lock()
			n := len(r.calls)
			r.calls = append(r.calls, c)
			r.mu.Unlock()
			return r.answer(n)
		},
		Jitter:    jitter,
		Notifier:  r.notify,
		Delivered: func(string) register.Delivery { return register.Delivery(r.delivered.Load()) },
	}
	r.pid = r.sys.Root.Spawn(register.Props(cfg, deps))
	return r
}

func (r *rig) stop() {
	_ = r.sys.Root.PoisonFuture(r.pid).Wait()
	r.sys.Shutdown()
	time.Sleep(time.Minute) // protoactor's throttles exit (virtual time)
}

func (r *rig) times() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, len(r.calls))
	for i := range r.calls {
		out[i] = r.calls[i].at
	}
	return out
}

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func noJitter(d time.Duration) time.Duration { return d }

func TestRegistrarHeartbeatCadenceAndGatewayID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw:8000", ID: "p1", Token: "s3cret", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond}
		r := newRig(t, cfg, noJitter, func(int) (int, []byte, error) { return 200, ack("gw-1"), nil })
		time.Sleep(3500 * time.Millisecond)
		r.stop()
		// At start; once more one coalesce interval after learning the gateway id from the
		// ack (to send that gateway's dispatch sequence); then every heartbeat.
		if diff := cmp.Diff(ms(0, 10, 1010, 2010, 3010), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"", "gw-1", "gw-1", "gw-1", "gw-1"}, r.snapshots); diff != "" {
			t.Errorf("Snapshot gateway ids (-want +got):\n%s", diff)
		}
		for i, c := range r.calls {
			wantSeq := uint64(42)
			if i == 0 {
				wantSeq = 0
			}
			if c.method != "PUT" || c.url != "http://gw:8000"+wire.RegistrationPath+"p1" || c.token != "s3cret" ||
				c.reg.HeartbeatMs != 1000 || c.reg.DispatchSeq != wantSeq {
				t.Errorf("call %d: %+v", i, c)
			}
		}
		time.Sleep(5 * time.Second)
		if n := len(r.times()); n != 5 {
			t.Errorf("%d calls after stop, want none", n-5)
		}
	})
}

func TestRegistrarCoalescesABurstIntoOnePut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 25 * time.Millisecond}
		r := newRig(t, cfg, noJitter, func(int) (int, []byte, error) { return 200, ack(""), nil })
		time.Sleep(100 * time.Millisecond) // the start-up PUT at 0 is well in the past
		// A burst of changes over 40 ms: the first goes out at once (the last send is older
		// than one interval), the rest coalesce into one PUT per interval.
		for range 40 {
			r.notify.Notify(r.sys.Root, r.pid)
			time.Sleep(time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		r.stop()
		if diff := cmp.Diff(ms(0, 100, 125, 150), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
	})
}

func TestRegistrarNotifiesWhileIdleAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: 10 * time.Second, Coalesce: 10 * time.Millisecond}
		r := newRig(t, cfg, noJitter, func(int) (int, []byte, error) { return 200, ack(""), nil })
		time.Sleep(3 * time.Second)
		r.notify.Notify(r.sys.Root, r.pid)
		r.notify.Notify(r.sys.Root, r.pid) // already pending: rides along
		time.Sleep(5 * time.Millisecond)
		r.notify.Notify(r.sys.Root, r.pid) // after the send: the next one, one interval later
		time.Sleep(time.Second)
		r.stop()
		if diff := cmp.Diff(ms(0, 3000, 3010), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
	})
}

func TestRegistrarBacksOffExponentially(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond}
		r := newRig(t, cfg, noJitter, func(n int) (int, []byte, error) {
			switch {
			case n < 4:
				return 0, nil, errors.New("connection refused")
			case n < 7:
				return 503, nil, nil // refused: also backs off
			default:
				return 200, ack(""), nil
			}
		})
		time.Sleep(3 * time.Minute)
		r.stop()
		// Gaps 1, 2, 4, 8, 16, 30 (capped), 30 s; then healthy heartbeats every second.
		want := []int{0, 1, 3, 7, 15, 31, 61, 91, 92, 93} // seconds
		got := r.times()
		if len(got) < len(want) {
			t.Fatalf("only %d calls: %v", len(got), got)
		}
		for i, w := range want {
			if w := time.Duration(w) * time.Second; got[i] != w {
				t.Errorf("call %d at %v, want %v (all: %v)", i, got[i], w, got[:len(want)])
			}
		}
	})
}

func TestRegistrarBackoffJitterBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond}
		r := newRig(t, cfg, nil, func(int) (int, []byte, error) { return 0, nil, errors.New("down") }) // default jitter
		time.Sleep(10 * time.Minute)
		r.stop()
		got := r.times()
		if len(got) < 12 {
			t.Fatalf("only %d calls", len(got))
		}
		backoff := register.BackoffMin
		for i := 1; i < len(got); i++ {
			gap := got[i] - got[i-1]
			lo := time.Duration(float64(backoff) * (1 - register.BackoffJitter))
			hi := time.Duration(float64(backoff) * (1 + register.BackoffJitter))
			if gap < lo || gap > hi {
				t.Errorf("gap %d = %v, want within [%v, %v]", i, gap, lo, hi)
			}
			backoff = min(2*backoff, register.BackoffMax)
		}
	})
}

func TestRegistrarRecoversAndResetsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond}
		down := true
		var mu sync.Mutex
		r := newRig(t, cfg, noJitter, func(int) (int, []byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return 0, nil, errors.New("down")
			}
			return 200, ack(""), nil
		})
		time.Sleep(10 * time.Second) // calls at 0, 1, 3, 7; next due at 15
		mu.Lock()
		down = false
		mu.Unlock()
		time.Sleep(7500 * time.Millisecond) // recovers at 15, heartbeat at 16, 17
		mu.Lock()
		down = true
		mu.Unlock()
		time.Sleep(2500 * time.Millisecond) // fails at 18; the backoff starts again at 1 s: 19
		r.stop()
		if diff := cmp.Diff(ms(0, 1000, 3000, 7000, 15000, 16000, 17000, 18000, 19000), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
	})
}

// A change the gateway already holds (delivered in x-pylon-load headers) is not sent; the
// heartbeat still goes out on time, and an undelivered change is sent as usual. While the
// gateway's copy is only fresh (changes since, but a response reached it within the
// interval) the send waits, looking again every interval, and goes out once it is not.
func TestRegistrarSkipsChangesTheGatewayHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond}
		r := newRig(t, cfg, noJitter, func(int) (int, []byte, error) { return 200, ack("gw-1"), nil })
		time.Sleep(500 * time.Millisecond) // start-up PUT at 0, then 10 with the learnt id
		r.delivered.Store(uint32(register.Held))
		r.notify.Notify(r.sys.Root, r.pid) // skipped
		time.Sleep(200 * time.Millisecond)
		r.notify.Notify(r.sys.Root, r.pid) // skipped: the Notifier re-opened
		time.Sleep(1000 * time.Millisecond)
		r.delivered.Store(uint32(register.NotHeld))
		r.notify.Notify(r.sys.Root, r.pid) // at 1700: sent
		time.Sleep(100 * time.Millisecond)
		r.delivered.Store(uint32(register.Fresh))
		r.notify.Notify(r.sys.Root, r.pid) // at 1800: held back while fresh
		time.Sleep(55 * time.Millisecond)
		r.delivered.Store(uint32(register.NotHeld)) // the responses stop at 1855
		time.Sleep(100 * time.Millisecond)
		r.stop()
		if diff := cmp.Diff(ms(0, 10, 1010, 1700, 1860), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
	})
}

// methods lists the calls' methods.
func (r *rig) methods() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.calls))
	for i := range r.calls {
		out[i] = r.calls[i].method
	}
	return out
}

// A gateway that takes load updates gets, between full registrations (PUT, at least every
// FullInterval), load updates (PATCH) carrying the snapshot's load and its dispatch seq.
func TestRegistrarSendsLoadUpdatesBetweenFullRegistrations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Token: "s3cret", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond, FullInterval: 5 * time.Second}
		r := newRig(t, cfg, noJitter, func(n int) (int, []byte, error) {
			if n == 0 || n == 6 || n == 11 {
				return 200, loadAck("gw-1"), nil
			}
			return 204, nil, nil
		})
		r.mu.Lock()
		r.queue = 7
		r.mu.Unlock()
		time.Sleep(10500 * time.Millisecond)
		r.stop()
		// The start-up PUT; at 10 ms the first load update with the learnt gateway's seq;
		// every heartbeat a load update, and a full registration once the last accepted one
		// is FullInterval old (at 5010 and 10010).
		if diff := cmp.Diff(ms(0, 10, 1010, 2010, 3010, 4010, 5010, 6010, 7010, 8010, 9010, 10010), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
		want := []string{"PUT", "PATCH", "PATCH", "PATCH", "PATCH", "PATCH", "PUT", "PATCH", "PATCH", "PATCH", "PATCH", "PUT"}
		if diff := cmp.Diff(want, r.methods()); diff != "" {
			t.Errorf("methods (-want +got):\n%s", diff)
		}
		c := r.calls[1]
		if c.url != "http://gw"+wire.RegistrationPath+"p1" || c.token != "s3cret" || c.upd.DispatchSeq != 42 || len(c.upd.Models) != 1 ||
			c.upd.Models[0].Model != "m" || c.upd.Models[0].Generation != 1 || c.upd.Models[0].Load.QueueSize != 7 {
			t.Errorf("load update %+v", c)
		}
	})
}

// A load update the gateway refuses (it restarted and does not know the backend) is
// followed at once by a full registration; the load updates resume after it. A failed
// send also makes the next one a full registration.
func TestRegistrarFallsBackToAFullRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond, FullInterval: time.Minute}
		r := newRig(t, cfg, noJitter, func(n int) (int, []byte, error) {
			switch n {
			case 2:
				return 404, []byte(`{"error":{"code":"unknown_backend"}}`), nil
			case 5:
				return 0, nil, errors.New("connection refused")
			case 0, 3, 6:
				return 200, loadAck("gw-1"), nil
			}
			return 204, nil, nil
		})
		time.Sleep(4500 * time.Millisecond)
		r.stop()
		// 0 PUT, 10 PATCH (seq), 1010 PATCH refused → PUT at once, 2010 PATCH, 3010
		// PATCH fails → backoff 1 s → 4010 PUT.
		if diff := cmp.Diff(ms(0, 10, 1010, 1010, 2010, 3010, 4010), r.times()); diff != "" {
			t.Errorf("send times (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"PUT", "PATCH", "PATCH", "PUT", "PATCH", "PATCH", "PUT"}, r.methods()); diff != "" {
			t.Errorf("methods (-want +got):\n%s", diff)
		}
	})
}

// Anything but the load changed (here a model's status) goes in a full registration; a
// gateway that does not offer load updates (an older one) gets full registrations only.
func TestRegistrarSendsAFullRegistrationWhenMoreThanTheLoadChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := register.Config{GatewayURL: "http://gw", ID: "p1", Heartbeat: time.Second, Coalesce: 10 * time.Millisecond, FullInterval: time.Minute}
		r := newRig(t, cfg, noJitter, func(n int) (int, []byte, error) {
			if n == 0 || n == 3 {
				return 200, loadAck("gw-1"), nil
			}
			return 204, nil, nil
		})
		time.Sleep(1500 * time.Millisecond) // PUT 0, PATCH 10, PATCH 1010
		r.mu.Lock()
		r.status = wire.StatusInactive
		r.mu.Unlock()
		r.notify.Notify(r.sys.Root, r.pid)  // PUT at 1500
		time.Sleep(1100 * time.Millisecond) // PATCH at 2500
		r.stop()
		if diff := cmp.Diff([]string{"PUT", "PATCH", "PATCH", "PUT", "PATCH"}, r.methods()); diff != "" {
			t.Errorf("methods (-want +got):\n%s", diff)
		}
		if r.calls[3].reg.Models["m"].Status != wire.StatusInactive {
			t.Errorf("the full registration: %+v", r.calls[3].reg)
		}

		old := newRig(t, cfg, noJitter, func(int) (int, []byte, error) { return 200, ack("gw-1"), nil })
		time.Sleep(3500 * time.Millisecond)
		old.stop()
		if diff := cmp.Diff([]string{"PUT", "PUT", "PUT", "PUT", "PUT"}, old.methods()); diff != "" {
			t.Errorf("methods to an older gateway (-want +got):\n%s", diff)
		}
	})
}
