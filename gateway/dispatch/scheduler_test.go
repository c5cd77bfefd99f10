package dispatch_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/actors"
	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type countingObserver struct {
	mu       sync.Mutex
	rejected []string
	parked   int
}

func (o *countingObserver) Rejected(_ dispatch.Target, r dispatch.Reason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rejected = append(o.rejected, r.String())
}

func (o *countingObserver) Parked(_ dispatch.Target, delta int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.parked += delta
}

type fixture struct {
	sys *actor.ActorSystem
	pid *actor.PID
	obs *countingObserver
	seq map[string]*atomic.Uint64
}

var target = dispatch.Target{Model: "m"}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{sys: actors.NewSystem(slog.New(slog.DiscardHandler)), obs: &countingObserver{}, seq: map[string]*atomic.Uint64{}}
	dir := dispatch.NewDirectory(f.sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: f.obs, Seed: 1})
	f.pid = dir.Ensure(target)
	t.Cleanup(func() {
		dir.Stop()
		time.Sleep(time.Minute) // let protoactor's throttle goroutines finish (virtual time)
	})
	return f
}

func (f *fixture) backend(id string, rtt time.Duration, l load.Load, seqEcho uint64) {
	if f.seq[id] == nil {
		f.seq[id] = &atomic.Uint64{}
	}
	f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
		ID: id, URL: "http://" + id, ClusterID: id, Active: true, RTT: rtt, HasRTT: true, Load: l,
		SeqEcho: seqEcho, Seq: f.seq[id], UpdatedAt: time.Now(),
	}})
}

func (f *fixture) route(e lbconfig.Entry, tokens uint64, mod func(*dispatch.Pending)) *dispatch.Pending {
	p := dispatch.NewPending(time.Now())
	p.Entry = &e
	p.Req.InputTokens = tokens
	if mod != nil {
		mod(p)
	}
	f.sys.Root.Send(f.pid, dispatch.Route{P: p})
	return p
}

func waw() lbconfig.Entry { return lbconfig.DefaultEntry(lbconfig.WaitAndWiden) }

// On virtual time: a full fast backend and an idle slow one, no wait headers → the slow one
// after exactly the 150 ms bucket unlock.
func TestWaitForSlowBackendWithoutHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("fast", 0, load.Load{InputTPS: 20_000, RunningRequests: 4, MaxEngineConcurrency: 4}, 0)
		f.backend("slow", 0, load.Load{InputTPS: 5000, MaxEngineConcurrency: 4}, 0)
		start := time.Now()
		p := f.route(waw(), 4000, nil)
		out := <-p.Mailbox
		if out.Kind != dispatch.OutcomeGranted || out.BackendID != "slow" {
			t.Fatalf("outcome %+v, want granted to slow", out)
		}
		if got := time.Since(start); got != 150*time.Millisecond {
			t.Errorf("granted after %v, want exactly 150ms", got)
		}
		if out.Seq != 1 || !out.HasExpected || out.ExpectedQueueMs != 0 {
			t.Errorf("dispatch seq %d, expected queue %d (%v); want seq 1 and queue 0 (free slot)", out.Seq, out.ExpectedQueueMs, out.HasExpected)
		}
	})
}

// A parked request is granted as soon as a stats update frees capacity: no 25 ms poll.
func TestEventDrivenWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		full := load.Load{InputTPS: 1000, RunningRequests: 1, MaxEngineConcurrency: 1}
		f.backend("only", time.Millisecond, full, 0)
		start := time.Now()
		p := f.route(waw(), 10, func(p *dispatch.Pending) { p.MaxWait, p.HasMaxWait = time.Second, true })
		time.Sleep(7 * time.Millisecond)
		synctest.Wait()
		select {
		case out := <-p.Mailbox:
			t.Fatalf("granted while full: %+v", out)
		default:
		}
		f.backend("only", time.Millisecond, load.Load{InputTPS: 1000, MaxEngineConcurrency: 1}, 0)
		out := <-p.Mailbox
		if out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("outcome %+v", out)
		}
		if got := time.Since(start); got != 7*time.Millisecond {
			t.Errorf("granted after %v, want 7ms (the moment capacity appeared)", got)
		}
	})
}

// Without x-max-wait-ms an Unavailable decision fails at once; with it the request waits
// until its deadline and then fails with 503.
func TestUnavailableAndMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("only", time.Millisecond, load.Load{InputTPS: 1000, RunningRequests: 1, MaxEngineConcurrency: 1}, 0)
		out := <-f.route(waw(), 10, nil).Mailbox
		if out.Kind != dispatch.OutcomeRejected || out.Reason != dispatch.ReasonCapacityUnavailable {
			t.Fatalf("no header: %+v, want routing_capacity_unavailable", out)
		}
		start := time.Now()
		out = <-f.route(waw(), 10, func(p *dispatch.Pending) { p.MaxWait, p.HasMaxWait = 100*time.Millisecond, true }).Mailbox
		if out.Kind != dispatch.OutcomeRejected || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("with x-max-wait-ms 100: %+v after %v", out, time.Since(start))
		}
	})
}

// Unknown targets answer 404 no_eligible_candidates; after a failure, 503.
func TestNoBackends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		out := <-f.route(waw(), 10, nil).Mailbox
		if out.Reason != dispatch.ReasonNoCandidates {
			t.Errorf("no backends: %+v", out)
		}
		out = <-f.route(waw(), 10, func(p *dispatch.Pending) { p.Failures = 1 }).Mailbox
		if out.Reason != dispatch.ReasonNoEligibleBackend {
			t.Errorf("no backends after a failure: %+v", out)
		}
	})
}

// A backend that never echoes dispatch sequences follows the reference rule: every update
// covers the reservations made before it.
func TestReservationsWithoutEcho(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		l := load.Load{InputTPS: 1000, MaxEngineConcurrency: 1}
		f.backend("a", time.Millisecond, l, 0)
		if out := <-f.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("first: %+v", out)
		}
		if out := <-f.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeRejected {
			t.Fatalf("second while reserved: %+v", out)
		}
		time.Sleep(time.Millisecond)
		f.backend("a", time.Millisecond, l, 0)
		if out := <-f.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("after an update: %+v", out)
		}
	})
}

// Reservations: a dispatch is counted until a report echoing its sequence arrives; a
// release drops it at once.
func TestReservations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		l := load.Load{InputTPS: 1000, MaxEngineConcurrency: 1}
		f.backend("a", time.Millisecond, l, 0)
		first := <-f.route(waw(), 10, nil).Mailbox
		if first.Kind != dispatch.OutcomeGranted || first.Seq != 1 {
			t.Fatalf("first: %+v", first)
		}
		// The reservation fills the only slot: the next request cannot be placed.
		second := <-f.route(waw(), 10, nil).Mailbox
		if second.Kind != dispatch.OutcomeRejected {
			t.Fatalf("second while the slot is reserved: %+v", second)
		}
		// A report covering seq 1 (and showing the slot free again) drops it.
		f.backend("a", time.Millisecond, l, 1)
		third := <-f.route(waw(), 10, nil).Mailbox
		if third.Kind != dispatch.OutcomeGranted || third.Seq != 2 {
			t.Fatalf("after the covering report: %+v", third)
		}
		// A report taken before dispatch 2 reached the pylon (echo 1) keeps it.
		f.backend("a", time.Millisecond, l, 1)
		if out := <-f.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeRejected {
			t.Fatalf("stale report dropped the reservation: %+v", out)
		}
		f.sys.Root.Send(f.pid, dispatch.Release{BackendID: "a", Seq: 2})
		if out := <-f.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("after release: %+v", out)
		}
	})
}

// A cancelled parked request is answered OutcomeCancelled and never granted.
func TestCancelParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("only", time.Millisecond, load.Load{InputTPS: 1000, RunningRequests: 1, MaxEngineConcurrency: 1}, 0)
		p := f.route(waw(), 10, func(p *dispatch.Pending) { p.MaxWait, p.HasMaxWait = time.Second, true })
		time.Sleep(10 * time.Millisecond)
		f.sys.Root.Send(f.pid, dispatch.Cancel{P: p})
		if out := <-p.Mailbox; out.Kind != dispatch.OutcomeCancelled {
			t.Fatalf("cancel: %+v", out)
		}
		f.backend("only", time.Millisecond, load.Load{InputTPS: 1000, MaxEngineConcurrency: 1}, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case out := <-p.Mailbox:
			t.Fatalf("cancelled request answered again: %+v", out)
		default:
		}
	})
}

// Sibling-first: PreferCluster picks another backend of the same cluster before the LB runs.
func TestPreferClusterSibling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		seq := &atomic.Uint64{}
		for _, id := range []string{"a1", "a2"} {
			f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
				ID: id, ClusterID: "a", Active: true, HasRTT: true, RTT: 100 * time.Millisecond, Seq: seq,
				Load: load.Load{InputTPS: 1000}, UpdatedAt: time.Now(),
			}})
		}
		f.backend("b", time.Millisecond, load.Load{InputTPS: 1000}, 0)
		out := <-f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 10, func(p *dispatch.Pending) {
			p.FailedBackends, p.PreferCluster = []string{"a1"}, "a"
		}).Mailbox
		if out.BackendID != "a2" || out.ClusterID != "a" {
			t.Errorf("sibling-first: %+v, want a2", out)
		}
		out = <-f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 10, func(p *dispatch.Pending) {
			p.FailedBackends, p.PreferCluster = []string{"a1", "a2"}, "a"
		}).Mailbox
		if out.BackendID != "b" {
			t.Errorf("no sibling left: %+v, want the LB to pick b", out)
		}
	})
}

// Sibling-first passes over a sibling that reports the cluster's engine full (pylons that
// share an engine each report its whole running count): the cluster is left out and the
// balancer picks among the others. A sibling with a free slot is still taken.
func TestPreferClusterSkipsFullSibling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			running uint64
			want    string
		}{{running: 2, want: "b"}, {running: 1, want: "a2"}} {
			f := newFixture(t)
			seq := &atomic.Uint64{}
			for _, id := range []string{"a1", "a2"} {
				f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
					ID: id, ClusterID: "a", Active: true, HasRTT: true, RTT: time.Millisecond, Seq: seq,
					Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 2, RunningRequests: tc.running}, UpdatedAt: time.Now(),
				}})
			}
			f.backend("b", 100*time.Millisecond, load.Load{InputTPS: 1000}, 0)
			out := <-f.route(waw(), 10, func(p *dispatch.Pending) {
				p.FailedBackends, p.PreferCluster = []string{"a1"}, "a"
			}).Mailbox
			if out.Kind != dispatch.OutcomeGranted || out.BackendID != tc.want {
				t.Errorf("sibling running %d of 2: %+v, want %s", tc.running, out, tc.want)
			}
		}

		// The refusing backend's report (the cluster's latest) shows the engine full while
		// the sibling's older one still shows a free slot: the cluster is left out too.
		f := newFixture(t)
		seq := &atomic.Uint64{}
		now := time.Now()
		for _, v := range []struct {
			id      string
			running uint64
			at      time.Time
		}{{"a2", 1, now.Add(-time.Second)}, {"a1", 2, now}} {
			f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
				ID: v.id, ClusterID: "a", Active: true, HasRTT: true, RTT: time.Millisecond, Seq: seq,
				Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 2, RunningRequests: v.running}, UpdatedAt: v.at,
			}})
		}
		f.backend("b", 100*time.Millisecond, load.Load{InputTPS: 1000}, 0)
		out := <-f.route(waw(), 10, func(p *dispatch.Pending) {
			p.FailedBackends, p.PreferCluster = []string{"a1"}, "a"
		}).Mailbox
		if out.Kind != dispatch.OutcomeGranted || out.BackendID != "b" {
			t.Errorf("cluster's latest report full: %+v, want b", out)
		}
	})
}

// A backend whose own requests fill its engine slot share is passed over within its
// cluster while a sibling has room in its own: by round-robin, by a keyed request's pick,
// and by a sibling-first retry. Without a share the engine's figures alone decide (the
// engine has free slots here), so the same requests go where they went before.
func TestSlotShareWithinCluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		setup := func(share uint64) *fixture {
			f := newFixture(t)
			seq := &atomic.Uint64{}
			for _, v := range []struct {
				id  string
				own uint64
			}{{"a1", 2}, {"a2", 0}} {
				f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
					ID: v.id, ClusterID: "a", Active: true, HasRTT: true, RTT: time.Millisecond, Seq: seq, SlotShare: share,
					Load: load.Load{
						InputTPS: 1000, MaxEngineConcurrency: 4, RunningRequests: 2,
						OutputGenerationRequests: v.own,
					}, UpdatedAt: time.Now(),
				}})
			}
			return f
		}
		pon := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		// The key whose ranking puts a1 first.
		key := ""
		for i := range 100 {
			k := "key-" + strconv.Itoa(i)
			if id, _ := lb.KeyedBackend([]string{"a1", "a2"}, k, func(string) bool { return false }, func(string) bool { return false }); id == "a1" {
				key = k
				break
			}
		}
		if key == "" {
			t.Fatal("no key ranks a1 first")
		}
		for _, tc := range []struct {
			share uint64
			want  []string
		}{{share: 2, want: []string{"a2", "a2", "a2"}}, {share: 0, want: []string{"a1", "a2", "a1"}}} {
			f := setup(tc.share)
			got := make([]string, 0, 3)
			for range 2 { // unkeyed: round-robin
				out := <-f.route(pon, 10, nil).Mailbox
				got = append(got, out.BackendID)
			}
			f = setup(tc.share)
			out := <-f.route(pon, 10, func(p *dispatch.Pending) { p.Req.AffinityKey = key }).Mailbox
			got = append(got, out.BackendID)
			if !slices.Equal(got, tc.want) {
				t.Errorf("share %d: unkeyed, unkeyed, keyed went to %v, want %v", tc.share, got, tc.want)
			}
		}

		// A sibling-first retry from a2 leaves the cluster when a1's share is full.
		f := setup(2)
		f.backend("b", 100*time.Millisecond, load.Load{InputTPS: 1000}, 0)
		out := <-f.route(waw(), 10, func(p *dispatch.Pending) {
			p.FailedBackends, p.PreferCluster = []string{"a2"}, "a"
		}).Mailbox
		if out.Kind != dispatch.OutcomeGranted || out.BackendID != "b" {
			t.Errorf("sibling's share full: %+v, want b", out)
		}
	})
}

// With ClusterBackendsLead every request of a cluster goes to the same backend, the one
// the cluster id ranks first, on every replica whatever order it learned the backends in,
// keyed or not and full or not; a backend that failed for the request is skipped.
func TestLeadBackendWithinCluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pick := func(order []string, key string, failed []string, running uint64) string {
			t.Helper()
			sys := actors.NewSystem(slog.New(slog.DiscardHandler))
			dir := dispatch.NewDirectory(sys, dispatch.Deps{
				Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: &countingObserver{}, Seed: 1,
				ClusterBackends: dispatch.ClusterBackendsLead,
			})
			defer func() {
				dir.Stop()
				time.Sleep(time.Minute)
			}()
			pid := dir.Ensure(target)
			seq := &atomic.Uint64{}
			for _, id := range order {
				sys.Root.Send(pid, &dispatch.BackendChanged{View: dispatch.BackendView{
					ID: id, ClusterID: "a", Active: true, HasRTT: true, RTT: time.Millisecond, Seq: seq,
					Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 2, RunningRequests: running}, UpdatedAt: time.Now(),
				}})
			}
			p := dispatch.NewPending(time.Now())
			e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
			p.Entry, p.Req.InputTokens, p.Req.AffinityKey, p.FailedBackends = &e, 10, key, failed
			sys.Root.Send(pid, dispatch.Route{P: p})
			out := <-p.Mailbox
			if out.Kind != dispatch.OutcomeGranted {
				t.Fatalf("key %q: %+v", key, out)
			}
			return out.BackendID
		}
		ids := []string{"a1", "a2", "a3"}
		lead := pick(ids, "", nil, 0)
		for i := range 12 {
			key := fmt.Sprintf("session-%d", i)
			if got := pick(ids, key, nil, 0); got != lead {
				t.Errorf("key %s: %s, want the lead %s", key, got, lead)
			}
			if got := pick([]string{"a3", "a1", "a2"}, key, nil, 2); got != lead {
				t.Errorf("key %s, engine full, backends learned in another order: %s, want the lead %s", key, got, lead)
			}
		}
		if other := pick(ids, "session-0", []string{lead}, 0); other == lead {
			t.Errorf("the lead %s again after it failed for the request", lead)
		}
	})
}

// Round-robin state is per routing target (model and routing key), and an override to the
// configured algorithm shares its instance.
func TestRoundRobinStatePerTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := actors.NewSystem(slog.New(slog.DiscardHandler))
		dir := dispatch.NewDirectory(sys, dispatch.Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: &countingObserver{}, Seed: 1})
		defer func() {
			dir.Stop()
			time.Sleep(time.Minute)
		}()
		targets := []dispatch.Target{{Model: "a"}, {Model: "b"}, {RoutingKey: "tenant", Model: "a"}}
		for _, tg := range targets {
			pid := dir.Ensure(tg)
			for _, id := range []string{"c0", "c1", "c2"} {
				sys.Root.Send(pid, &dispatch.BackendChanged{View: dispatch.BackendView{
					ID: id, ClusterID: id, Active: true, HasRTT: true, Seq: &atomic.Uint64{}, UpdatedAt: time.Now(),
					Load: load.Load{InputTPS: 1000}, SeqEcho: 1 << 40,
				}})
			}
		}
		rr := lbconfig.DefaultEntry(lbconfig.RoundRobin)
		next := func(tg dispatch.Target) string {
			p := dispatch.NewPending(time.Now())
			p.Entry = &rr
			sys.Root.Send(dir.Lookup(tg), dispatch.Route{P: p})
			return (<-p.Mailbox).BackendID
		}
		got := []string{next(targets[0]), next(targets[0]), next(targets[1]), next(targets[0]), next(targets[1]), next(targets[2])}
		want := []string{"c0", "c1", "c0", "c2", "c1", "c0"}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("sequence %v, want %v (independent per target)", got, want)
			}
		}
		// An entry equal to the configured one but reached through a header (another Name)
		// shares the instance: the sequence continues.
		alias := rr
		alias.Name = "round_robin"
		p := dispatch.NewPending(time.Now())
		p.Entry = &alias
		sys.Root.Send(dir.Lookup(targets[1]), dispatch.Route{P: p})
		if id := (<-p.Mailbox).BackendID; id != "c2" {
			t.Errorf("override of the configured algorithm restarted the sequence: %s, want c2", id)
		}
	})
}

// Load changes patch a multi-backend cluster's candidate in place: the aggregate follows
// every backend's latest load, and a reservation no report ever covers still expires
// after ReservationTTL (the periodic whole rebuild).
func TestSnapshotPatchedInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		pon := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		member := func(id, cluster string, queued uint64, echo uint64) {
			if f.seq[id] == nil {
				f.seq[id] = &atomic.Uint64{}
			}
			f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
				ID: id, URL: "http://" + id, ClusterID: cluster, Active: true, RTT: time.Millisecond, HasRTT: true,
				Load:    load.Load{InputTPS: 100, QueuedInputTokens: queued, QueueSize: min(queued, 1), MaxEngineConcurrency: 1, RunningRequests: 1},
				SeqEcho: echo, Seq: f.seq[id], UpdatedAt: time.Now(),
			}})
		}
		member("c1", "c", 0, 0)
		member("c2", "c", 0, 0)
		member("d1", "d", 100, 0)
		if out := <-f.route(pon, 1, nil).Mailbox; out.ClusterID != "c" {
			t.Fatalf("idle shared cluster not chosen: %+v", out)
		}
		time.Sleep(time.Millisecond)
		member("c1", "c", 300, 1) // c: 300 tokens at 200 tok/s = 1.5 s > d's 1 s
		if out := <-f.route(pon, 1, nil).Mailbox; out.ClusterID != "d" {
			t.Fatalf("after c1's report: %+v, want cluster d", out)
		}
		time.Sleep(time.Millisecond)
		member("c1", "c", 0, 1)
		member("d1", "d", 100, 1) // covers the dispatch to d
		if out := <-f.route(pon, 1, nil).Mailbox; out.ClusterID != "c" {
			t.Fatalf("after c drained: %+v, want cluster c", out)
		}

		// A reservation on a backend whose reports never cover it.
		f2 := newFixture(t)
		f2.backend("e", time.Millisecond, load.Load{InputTPS: 1000, MaxEngineConcurrency: 1}, 5)
		if out := <-f2.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("first: %+v", out)
		}
		if out := <-f2.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeRejected {
			t.Fatalf("while reserved: %+v", out)
		}
		time.Sleep(dispatch.ReservationTTL + time.Second)
		if out := <-f2.route(waw(), 10, nil).Mailbox; out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("after the reservation TTL: %+v", out)
		}
	})
}

// A session's next turn behind its prompt in flight waits for it (prefill_wait) and is then
// granted to the cluster that holds it, reserving and announcing only the suffix as prefill
// work: the queue a later request sees there is the first turn's 1000 tokens and the
// second's 100, not 1000 + 1100; and the turn after that is priced behind the second.
func TestNextTurnBehindItsPromptReservesTheSuffix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		e := waw()
		e.SelectionCount, e.MaxQueued = 1, 8
		f.backend("a", time.Millisecond, load.Load{InputTPS: 1000, MaxEngineConcurrency: 2}, 0)
		turn := func(tokens uint64) *dispatch.Pending {
			return f.route(e, tokens, func(p *dispatch.Pending) { p.Req.AffinityKey = "session" })
		}
		first, out := behindFirstTurn(t, f, turn, "session")
		if first.HasPrefill {
			t.Fatalf("first turn: %+v, want granted with its whole prompt to prefill, tracked", first)
		}
		if out.Kind != dispatch.OutcomeGranted || out.BackendID != "a" || !out.HasPrefill || out.PrefillTokens != 100 {
			t.Fatalf("second turn: %+v, want a with 100 tokens to prefill", out)
		}
		// Both turns hold a's two slots. Once the second's prompt is cached, the third
		// turn is priced behind its own session's turn, which frees a slot when it ends:
		// its 200 new tokens (200 ms) and the RTT, not the 1100 ms of queued work.
		f.sys.Root.Send(f.pid, dispatch.PrefillDone{Key: "session", Token: out.PrefillToken})
		third := <-turn(1300).Mailbox
		if third.Kind != dispatch.OutcomeGranted || !third.HasEstimate || third.Estimate != 201*time.Millisecond {
			t.Errorf("third turn: %+v, want an estimate of 201 ms", third)
		}
		if !third.HasExpected || third.ExpectedQueueMs != 1100 {
			t.Errorf("third turn: expected queue %d ms, want the 1100 ms of work the backend holds", third.ExpectedQueueMs)
		}
	})
}

// behindFirstTurn routes a session's first turn (1 000 tokens: granted and tracked), then
// its second (1 100 tokens), which must wait while the first's prompt is in flight; it
// reports the first's prompt cached under key and returns both outcomes.
func behindFirstTurn(t *testing.T, f *fixture, turn func(tokens uint64) *dispatch.Pending, key string) (first, second dispatch.Outcome) {
	t.Helper()
	first = <-turn(1000).Mailbox
	if first.Kind != dispatch.OutcomeGranted || first.PrefillToken == 0 {
		t.Fatalf("first turn: %+v, want granted and tracked", first)
	}
	p := turn(1100)
	time.Sleep(200 * time.Millisecond)
	select {
	case out := <-p.Mailbox:
		t.Fatalf("second turn answered while the first's prompt is in flight: %+v", out)
	default:
	}
	f.sys.Root.Send(f.pid, dispatch.PrefillDone{Key: key, Token: first.PrefillToken})
	return first, <-p.Mailbox
}

// prefillWork: the uncached rest of the input, rounded up, at least one token.
func TestPrefillWork(t *testing.T) {
	for _, tc := range []struct {
		input  uint64
		cached float64
		want   uint64
		ok     bool
	}{
		{1000, 0, 1000, false},
		{1000, 0.9, 100, true},
		{1000, 0.9999, 1, true},
		{1000, 1, 1, true},
		{1000, 1.5, 1, true},
		{3, 0.5, 2, true},
		{0, 0.5, 0, false},
	} {
		if got, ok := dispatch.PrefillWork(tc.input, tc.cached); got != tc.want || ok != tc.ok {
			t.Errorf("prefillWork(%d, %v) = %d, %v; want %d, %v", tc.input, tc.cached, got, ok, tc.want, tc.ok)
		}
	}
}

// A request with an affinity key goes to the backend of its cluster that the key ranks
// first by rendezvous hashing: every time, on a scheduler that learned the backends in
// another order (another gateway replica), and spread over the backends across keys.
// When that backend is full and a sibling has a free slot, the sibling takes it; a
// backend that failed for the request is skipped.
func TestKeyedBackendWithinCluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ids := []string{"a1", "a2", "a3"}
		pick := func(order []string, key string, failed []string) string {
			t.Helper()
			f := newFixture(t)
			seq := &atomic.Uint64{}
			for _, id := range order {
				f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
					ID: id, ClusterID: "a", Active: true, HasRTT: true, RTT: time.Millisecond, Seq: seq,
					Load: load.Load{InputTPS: 1000}, UpdatedAt: time.Now(),
				}})
			}
			out := <-f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 10, func(p *dispatch.Pending) {
				p.Req.AffinityKey, p.FailedBackends = key, failed
			}).Mailbox
			if out.Kind != dispatch.OutcomeGranted {
				t.Fatalf("key %s: %+v", key, out)
			}
			return out.BackendID
		}
		used := map[string]int{}
		for i := range 12 {
			key := fmt.Sprintf("session-%d", i)
			got := pick(ids, key, nil)
			if again := pick([]string{"a3", "a1", "a2"}, key, nil); again != got {
				t.Errorf("key %s: %s, then %s on a replica that learned the backends in another order", key, got, again)
			}
			if other := pick(ids, key, []string{got}); other == got {
				t.Errorf("key %s: %s again after it failed for the request", key, got)
			}
			used[got]++
		}
		if len(used) < 2 {
			t.Errorf("12 keys all went to %v, want them spread over the cluster", used)
		}

		// Full: the key's backend runs its limit, a sibling has a free slot.
		f := newFixture(t)
		seq := &atomic.Uint64{}
		key := "session-0"
		first := pick(ids, key, nil)
		for _, id := range ids {
			l := load.Load{InputTPS: 1000, MaxEngineConcurrency: 2}
			if id == first {
				l.RunningRequests = 2
			}
			f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
				ID: id, ClusterID: "a", Active: true, HasRTT: true, RTT: time.Millisecond, Seq: seq, Load: l, UpdatedAt: time.Now(),
			}})
		}
		out := <-f.route(lbconfig.DefaultEntry(lbconfig.PowerOfN), 10, func(p *dispatch.Pending) { p.Req.AffinityKey = key }).Mailbox
		if out.Kind != dispatch.OutcomeGranted || out.BackendID == first {
			t.Errorf("key's backend %s full: %+v, want a sibling with a free slot", first, out)
		}
	})
}

// A plain client's conversation (ConversationKey, no affinity key) is a session for
// prefill_wait: its next turn waits for the first turn's prompt in flight, until
// PrefillDone names the conversation. An affinity key wins over a conversation key.
func TestConversationWaitsForItsPromptInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		e := waw()
		f.backend("a", time.Millisecond, load.Load{InputTPS: 1000, MaxEngineConcurrency: 2}, 0)
		turn := func(tokens uint64) *dispatch.Pending {
			return f.route(e, tokens, func(p *dispatch.Pending) { p.ConversationKey = "conversation-1" })
		}
		if _, out := behindFirstTurn(t, f, turn, "conversation-1"); out.Kind != dispatch.OutcomeGranted || out.BackendID != "a" {
			t.Fatalf("second turn: %+v, want granted to a", out)
		}
	})
	p := dispatch.Pending{ConversationKey: "conversation-1"}
	p.Req.AffinityKey = "key"
	if p.SessionKey() != "key" {
		t.Errorf("session key %q, want the affinity key", p.SessionKey())
	}
}

// newSessionFixture is two idle single-backend clusters, a and b (1 000 tokens/s, two
// slots each), and turn, which routes a turn of one session (wait-and-widen, an affinity
// group of one) with the given input tokens.
func newSessionFixture(t *testing.T) (*fixture, load.Load, func(tokens uint64) *dispatch.Pending) {
	t.Helper()
	f := newFixture(t)
	e := waw()
	e.SelectionCount = 1
	idle := load.Load{InputTPS: 1000, MaxEngineConcurrency: 2}
	f.backend("a", time.Millisecond, idle, 0)
	f.backend("b", time.Millisecond, idle, 0)
	return f, idle, func(tokens uint64) *dispatch.Pending {
		return f.route(e, tokens, func(p *dispatch.Pending) { p.Req.AffinityKey = "session" })
	}
}

// firstTurn routes the session's first turn and checks that it was granted and tracked as
// a prompt in flight; home is its cluster, other the other one.
func firstTurn(t *testing.T, turn func(uint64) *dispatch.Pending, tokens uint64) (first dispatch.Outcome, home, other string) {
	t.Helper()
	first = <-turn(tokens).Mailbox
	if first.Kind != dispatch.OutcomeGranted || first.PrefillToken == 0 {
		t.Fatalf("first turn: %+v, want granted and tracked", first)
	}
	home, other = first.BackendID, "b"
	if home == "b" {
		other = "a"
	}
	return first, home, other
}

// A session's turn that finds the cluster prefilling its prompt full does not go to a
// cluster that would prefill the whole prompt again beside it, even one that would be
// done sooner: it waits for the prompt and takes the session's cluster once a slot there
// frees up.
func TestTurnDoesNotDuplicateItsPromptInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, idle, turn := newSessionFixture(t)
		first, home, other := firstTurn(t, turn, 4000) // 4 s of prefill on its cluster
		// Home fills up; the other cluster is ten times faster: a full prefill there
		// (0.4 s) beats the 4 s left of the prompt in flight.
		full := idle
		full.RunningRequests = 2
		f.backend(home, time.Millisecond, full, 1)
		fast := idle
		fast.InputTPS = 10_000
		f.backend(other, time.Millisecond, fast, 0)
		second := turn(4100)
		time.Sleep(3 * time.Second)
		select {
		case out := <-second.Mailbox:
			t.Fatalf("second turn answered while its prompt is in flight on the full %s: %+v", home, out)
		default:
		}
		f.sys.Root.Send(f.pid, dispatch.PrefillDone{Key: "session", Token: first.PrefillToken})
		f.backend(home, time.Millisecond, idle, 1) // a slot frees up
		if out := <-second.Mailbox; out.Kind != dispatch.OutcomeGranted || out.BackendID != home {
			t.Errorf("second turn: %+v, want granted on %s, which caches its prompt", out, home)
		}
	})
}

// A turn that waited for its session's prompt in flight and finds the cluster that now
// caches it full waits there for a slot rather than moving at once: the time it spent
// waiting for the prompt does not count toward unlocking the clusters that lack it.
func TestCachedPromptOnAFullClusterIsWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, idle, turn := newSessionFixture(t)
		first, home, other := firstTurn(t, turn, 1000)
		second := turn(1100)
		// The prompt is in flight for 2 s, longer than prefilling all of it on the other
		// cluster (1.1 s); meanwhile home fills up.
		time.Sleep(2 * time.Second)
		full := idle
		full.RunningRequests = 2
		f.backend(home, time.Millisecond, full, 1)
		f.sys.Root.Send(f.pid, dispatch.PrefillDone{Key: "session", Token: first.PrefillToken})
		time.Sleep(500 * time.Millisecond)
		select {
		case out := <-second.Mailbox:
			t.Fatalf("second turn answered while its cached prompt's cluster is full: %+v (the other cluster is %s)", out, other)
		default:
		}
		f.backend(home, time.Millisecond, idle, 1) // a slot frees up
		if out := <-second.Mailbox; out.Kind != dispatch.OutcomeGranted || out.BackendID != home {
			t.Errorf("second turn: %+v, want granted on %s, which caches its prompt", out, home)
		}
	})
}

// On a fleet large enough for wait-and-widen's TTFT index, a decision follows the reports
// patched into the snapshot since the last: the one cluster a report made fast is chosen,
// and once another report moves the speed to another cluster, that one.
func TestLargeFleetDecisionFollowsReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		slow := load.Load{InputTPS: 1000, MaxEngineConcurrency: 8}
		fast := load.Load{InputTPS: 100_000, MaxEngineConcurrency: 8}
		const clusters = 300
		for i := range clusters {
			f.backend(fmt.Sprintf("b%03d", i), time.Millisecond, slow, 0)
		}
		if out := <-f.route(waw(), 1000, nil).Mailbox; out.Kind != dispatch.OutcomeGranted {
			t.Fatalf("first: %+v", out)
		}
		for _, id := range []string{"b123", "b007", "b299"} {
			f.backend(id, time.Millisecond, fast, 0)
			out := <-f.route(waw(), 1000, nil).Mailbox
			if out.BackendID != id {
				t.Fatalf("after %s became fast: granted %+v, want %s", id, out, id)
			}
			f.backend(id, time.Millisecond, slow, 0)
		}
	})
}
