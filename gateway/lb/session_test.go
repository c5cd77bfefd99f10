package lb_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// A session sticks to the member of its affinity group that served it last: only that
// member, which holds the session's prefix, gets the prefill discount, so it wins while its
// other costs are lower than the prefill the other member would redo; the session moves
// when the member cannot take it (full), and without session memory (TTL 0) it follows
// the lower estimate as before.
func TestSessionSticksInsideTheGroup(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	entry := func(ttl time.Duration) lbconfig.Entry {
		return waw(func(e *lbconfig.Entry) {
			e.SelectionCount, e.AffinityWait, e.SessionTTL, e.SessionTableSize = 2, 200*time.Millisecond, ttl, 16
			e.AffinityInputScale = 0.1
		})
	}
	// a is faster first, then b becomes faster by 40 ms (two buckets), both with room.
	aFast := snap(idle("a", 1), idle("b", 41))
	bFast := snap(idle("a", 41), idle("b", 1))
	r := func(now time.Time) *lb.Request {
		return &lb.Request{AffinityKey: "session-1", InputTokens: 100_000, At: now} // 100 ms of prefill at 1M tps
	}
	cluster := func(s *lb.Snapshot, d lb.Decision) string {
		if d.Kind != lb.KindSelected {
			t.Fatalf("decision %v, want a selection", d)
		}
		return s.Candidates[d.Index].ClusterID
	}

	b := newBalancer(t, entry(time.Minute), seeded())
	if got := cluster(aFast, b.Decide(aFast, r(at), 0)); got != "a" {
		t.Fatalf("first turn went to %s, want the faster a", got)
	}
	for i := range 5 {
		if got := cluster(bFast, b.Decide(bFast, r(at.Add(time.Duration(i+1)*time.Second)), 0)); got != "a" {
			t.Errorf("turn %d went to %s, want a (it holds the session's prefix and can take it)", i+2, got)
		}
	}
	fullA := snap(full(idle("a", 41)), idle("b", 1))
	if got := cluster(fullA, b.Decide(fullA, r(at.Add(10*time.Second)), time.Second)); got != "b" {
		t.Errorf("with a full, the session went to %s, want b", got)
	}
	if got := cluster(bFast, b.Decide(bFast, r(at.Add(2*time.Minute)), 0)); got != "b" {
		t.Errorf("after the TTL the session went to %s, want the faster b", got)
	}

	off := newBalancer(t, entry(0), seeded())
	off.Decide(aFast, r(at), 0)
	if got := cluster(bFast, off.Decide(bFast, r(at.Add(time.Second)), 0)); got != "b" {
		t.Errorf("without session memory the second turn went to %s, want the faster b", got)
	}
}

// After the hold, a session whose cluster is full waits for it as long as moving would
// cost more: the cluster keeps its prefill discount in the global phase, and another
// cluster's bucket unlocks only when the time since X reaches the prefill it would redo
// (not next_bucket_unlock_factor × that, as for buckets of equivalent clusters); a session
// the memory does not know moves as soon as X is up, as in the reference.
func TestSessionWaitsForItsCacheAfterTheHold(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait, e.SessionTTL, e.SessionTableSize = 1, 200*time.Millisecond, time.Minute, 16
		e.AffinityInputScale = 0.1
	})
	free := snap(idle("a", 1), idle("b", 1))
	key := keyWithGroup(t, e, free, 0)
	// The second turn is 2M tokens: 2 s of prefill at 1M tokens/s; a holds the first
	// turn's 1.8M, so only the 200k-token suffix is new there (200 ms).
	req := func(now time.Time) *lb.Request {
		return &lb.Request{AffinityKey: key, InputTokens: 2_000_000, At: now}
	}
	b := newBalancer(t, e, seeded())
	first := req(at)
	first.InputTokens = 1_800_000
	expect(t, "first turn", b.Decide(free, first, 0), lb.Selected(0, 1))
	fullA := snap(full(idle("a", 1)), idle("b", 1))
	// b costs 1.8 s more than a: its bucket unlocks 1.8 s after X, at 2 s.
	d := b.Decide(fullA, req(at.Add(time.Second)), 300*time.Millisecond)
	if d.Kind != lb.KindWait || d.Wait < 1650*time.Millisecond || d.Wait > 1750*time.Millisecond {
		t.Errorf("100 ms after X: %v, want a wait of about 1.7 s for the session's cluster", d)
	}
	if d := b.Decide(fullA, req(at.Add(time.Second)), 1500*time.Millisecond); d.Kind != lb.KindWait {
		t.Errorf("1.3 s after X: %v, want still a wait", d)
	}
	if d := b.Decide(fullA, req(at.Add(time.Second)), 2100*time.Millisecond); d.Kind != lb.KindSelected || d.Index != 1 {
		t.Errorf("1.9 s after X: %v, want b", d)
	}
	unknown := newBalancer(t, e, seeded())
	if d := unknown.Decide(fullA, req(at), 300*time.Millisecond); d.Kind != lb.KindSelected || d.Index != 1 {
		t.Errorf("an unknown session 100 ms after X: %v, want b", d)
	}
}

// A new session goes to the member of its affinity group whose KV cache has room for it:
// once the faster member holds as many sessions as fit, new ones go to the other member
// even though it is slower; known sessions still return to where they are.
func TestNewSessionsFillTheGroupsKVCapacity(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.SessionTTL, e.SessionTableSize, e.AffinityInputScale = 2, time.Minute, 64, 0.1
	})
	fast, slow := idle("fast", 1), idle("slow", 30)
	fast.Load.KVCapacityTokens, slow.Load.KVCapacityTokens = 40_000, 1_000_000
	s := snap(fast, slow)
	b := newBalancer(t, e, seeded())
	where := map[string]int{}
	for i := range 6 {
		d := b.Decide(s, &lb.Request{AffinityKey: fmt.Sprintf("session-%d", i), InputTokens: 10_000, At: at}, 0)
		if d.Kind != lb.KindSelected {
			t.Fatalf("session %d: %v", i, d)
		}
		where[s.Candidates[d.Index].ClusterID]++
	}
	// 85 % of 40 000 tokens holds three sessions of 10 000.
	if where["fast"] != 3 || where["slow"] != 3 {
		t.Errorf("new sessions went %v, want 3 to fast (its KV room) and 3 to slow", where)
	}
	d := b.Decide(s, &lb.Request{AffinityKey: "session-0", InputTokens: 10_200, At: at.Add(time.Second)}, 0)
	if d.Kind != lb.KindSelected || s.Candidates[d.Index].ClusterID != "fast" {
		t.Errorf("a known session went to %v, want fast, where it is", d)
	}
}

// With session memory the affinity phase prices what each session really costs: a new
// session (the memory does not know it) its full prefill, since no cluster holds any of
// it; a returning one, on its last cluster, only the suffix beyond what its previous turn
// sent there; and the configured cache_affinity_input_tokens_scale only when the KV
// accounting no longer holds the session there.
func TestSessionPricesItsNewSuffix(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait, e.SessionTTL, e.SessionTableSize = 1, 200*time.Millisecond, time.Minute, 16
		e.AffinityInputScale = 0.5
	})
	free := snap(idle("a", 1), idle("b", 1))
	key := keyWithGroup(t, e, free, 0)
	b := newBalancer(t, e, seeded())
	// 1M tokens/s and 1 ms RTT: a full prefill of 100k tokens is 100 ms.
	d := b.Decide(free, &lb.Request{AffinityKey: key, InputTokens: 100_000, At: at}, 0)
	if d.Kind != lb.KindSelected || d.Index != 0 || d.TTFT.Duration() != 101*time.Millisecond {
		t.Errorf("new session: %v, want a at its full 101 ms", d)
	}
	d = b.Decide(free, &lb.Request{AffinityKey: key, InputTokens: 110_000, At: at.Add(time.Second)}, 0)
	if d.Kind != lb.KindSelected || d.Index != 0 || d.TTFT.Duration() != 11*time.Millisecond {
		t.Errorf("returning session: %v, want a at 11 ms (1 ms RTT and the 10k-token suffix)", d)
	}

	// a reports a KV cache of 150k tokens: a second session of 100k tokens sent there
	// pushes the first one out of the accounting, which then knows nothing better than
	// the configured scale.
	small := snap(idle("a", 1), idle("b", 1))
	small.Candidates[0].Load.KVCapacityTokens = 150_000
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("other-%d", i); fmt.Sprint(lb.AffinityGroup(b, free, &lb.Request{AffinityKey: k})) == "[0]" {
			other = k
		}
	}
	f := newBalancer(t, e, seeded())
	f.Decide(small, &lb.Request{AffinityKey: key, InputTokens: 100_000, At: at}, 0)
	f.Decide(small, &lb.Request{AffinityKey: other, InputTokens: 100_000, At: at.Add(time.Millisecond)}, 0)
	d = f.Decide(small, &lb.Request{AffinityKey: key, InputTokens: 110_000, At: at.Add(time.Second)}, 0)
	if d.Kind != lb.KindSelected || d.TTFT.Duration() != 56*time.Millisecond {
		t.Errorf("returning session the accounting forgot: %v, want 56 ms (1 ms RTT and half of 110k tokens)", d)
	}
}

// Inside its affinity group a returning session waits for the member that holds it as
// long as moving would add at least as much: the group's other member opens only when the
// time waited reaches the prefill it would redo (not next_bucket_unlock_factor × that, as
// for a new session), and a member that served an older turn is priced at what it lacks.
func TestSessionWaitsForItsCacheInsideTheGroup(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait, e.SessionTTL, e.SessionTableSize = 2, 10*time.Second, time.Minute, 16
		e.AffinityInputScale = 0.1
	})
	free := snap(idle("a", 1), idle("b", 1), idle("c", 1))
	key := keyWithGroup(t, e, free, 0, 1)
	req := func(now time.Time, tokens uint64) *lb.Request {
		return &lb.Request{AffinityKey: key, InputTokens: tokens, At: now}
	}
	b := newBalancer(t, e, seeded())
	expect(t, "first turn", b.Decide(free, req(at, 1_800_000), 0), lb.Selected(0, 1))
	fullA := snap(full(idle("a", 1)), idle("b", 1), idle("c", 1))
	// b would prefill all 2M tokens (2 s), a only the 200k new ones: b opens 1.8 s in.
	if d := b.Decide(fullA, req(at.Add(time.Second), 2_000_000), time.Second); d.Kind != lb.KindWait || d.Wait < 750*time.Millisecond || d.Wait > 850*time.Millisecond {
		t.Errorf("1 s in: %v, want a wait of about 0.8 s for the session's cluster", d)
	}
	d := b.Decide(fullA, req(at.Add(time.Second), 2_000_000), 1900*time.Millisecond)
	expect(t, "1.9 s in", d, lb.Selected(1, 1))
	// The session is on b now; a holds its first 1.8M tokens. With b full, a (lacking
	// 400k of 2.2M: 400 ms) opens once the wait reaches 400 − 200 ms, not 2.2 s.
	fullB := snap(idle("a", 1), full(idle("b", 1)), idle("c", 1))
	if d := b.Decide(fullB, req(at.Add(2*time.Second), 2_200_000), 100*time.Millisecond); d.Kind != lb.KindWait {
		t.Errorf("0.1 s in: %v, want a wait", d)
	}
	expect(t, "0.25 s in", b.Decide(fullB, req(at.Add(2*time.Second), 2_200_000), 250*time.Millisecond), lb.Selected(0, 1))
}

// A session back from an overflow outside its group returns to the group member that holds
// the most of it (priced at what it lacks there), not to whichever member looks fastest
// at the flat cache_affinity_input_tokens_scale.
func TestSessionBackFromOverflowReturnsToItsPrefix(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait, e.SessionTTL, e.SessionTableSize = 2, 0, time.Minute, 16
		e.AffinityInputScale = 0.1
	})
	free := snap(idle("a", 12), idle("b", 1), idle("c", 1))
	key := keyWithGroup(t, e, free, 1, 0)
	req := func(sec int, tokens uint64) *lb.Request {
		return &lb.Request{AffinityKey: key, InputTokens: tokens, At: at.Add(time.Duration(sec) * time.Second)}
	}
	b := newBalancer(t, e, seeded())
	first := b.Decide(snap(idle("a", 12), full(idle("b", 1)), idle("c", 1)), req(0, 1_800_000), 0)
	expect(t, "first turn, b full", first, lb.Selected(0, 1))
	overflow := b.Decide(snap(full(idle("a", 12)), full(idle("b", 1)), idle("c", 1)), req(1, 1_900_000), 5*time.Second)
	if overflow.Kind != lb.KindSelected || overflow.Index != 2 {
		t.Fatalf("second turn, group full: %v, want c", overflow)
	}
	// a holds the first 1.8M of 2M tokens (200 ms to prefill, plus its 12 ms RTT); b would
	// prefill all 2M (2 s) for its 1 ms RTT.
	back := b.Decide(free, req(2, 2_000_000), 0)
	if back.Kind != lb.KindSelected || back.Index != 0 || back.TTFT.Duration() != 212*time.Millisecond {
		t.Errorf("third turn, group free: %v, want a at 212 ms", back)
	}
}

// A session whose previous turn is still being prefilled on its cluster is priced there
// behind that turn: the queue the cluster reports, which holds the turn's whole prompt,
// less that prompt, or the turn's remaining prefill when that is longer. Its cluster then
// stays the cheapest, and the selected decision says how much of the prompt it expects
// cached (the gateway reserves and announces only the rest as prefill work).
func TestSessionBehindItsPromptInFlight(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait, e.SessionTTL, e.SessionTableSize = 2, 200*time.Millisecond, time.Minute, 16
		e.AffinityInputScale = 0.1
	})
	free := snap(idle("a", 1), idle("b", 1))
	key := keyWithGroup(t, e, free, 0, 1)
	b := newBalancer(t, e, seeded())
	// 1M tokens/s: the first turn's 1M tokens take 1 s to prefill on a.
	if d := b.Decide(free, &lb.Request{AffinityKey: key, InputTokens: 1_000_000, At: at}, 0); d.Kind != lb.KindSelected || d.Index != 0 || d.CachedShare != 0 {
		t.Fatalf("first turn: %+v, want a, nothing cached", d)
	}
	// 400 ms later a reports the turn in its queue (1 s of work) and both its slots taken;
	// b has a free slot and would prefill all 1.1M tokens (1.1 s).
	fullA := idle("a", 1)
	fullA.Load.MaxEngineConcurrency, fullA.Load.RunningRequests = 2, 2
	fullA.Load.QueueSize, fullA.Load.QueuedInputTokens = 1, 1_000_000
	next := func(prefilling string, left time.Duration) *lb.Request {
		return &lb.Request{AffinityKey: key, InputTokens: 1_100_000, At: at.Add(400 * time.Millisecond), Prefilling: prefilling, PrefillLeft: left}
	}
	for _, tc := range []struct {
		name      string
		req       *lb.Request
		wantQueue load.Millis
	}{
		{"prompt in flight, 600 ms left", next("a", 600*time.Millisecond), 600},
		{"prompt in flight, overrunning", next("a", 0), 0},
		{"in flight elsewhere", next("b", 600*time.Millisecond), 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			est := fullA.Estimate(tc.req, 100_000.0/1_100_000, load.Ignore{})
			if math.Abs(float64(est.Queue-tc.wantQueue)) > 1e-6 {
				t.Errorf("a's queue %v ms, want %v", est.Queue, tc.wantQueue)
			}
		})
	}
	// Without a known concurrency the queue a reports, less the turn's prompt, still
	// counts when longer than the turn's rest: 1.5 s of queue, 1 s of it the turn's.
	unbounded := fullA
	unbounded.Load.MaxEngineConcurrency, unbounded.Load.RunningRequests, unbounded.Load.QueuedInputTokens = 0, 3, 1_500_000
	for left, want := range map[time.Duration]load.Millis{300 * time.Millisecond: 500, 800 * time.Millisecond: 800} {
		if est := unbounded.Estimate(next("a", left), 100_000.0/1_100_000, load.Ignore{}); math.Abs(float64(est.Queue-want)) > 1e-6 {
			t.Errorf("unknown concurrency, %v left: queue %v ms, want %v", left, est.Queue, want)
		}
	}
	// a full (not selectable now), the turn 600 ms from cached: the session waits for a
	// rather than prefilling 1.1 s on b; with a slot free on a it goes there.
	if d := b.Decide(snap(fullA, idle("b", 1)), next("a", 600*time.Millisecond), 0); d.Kind != lb.KindWait {
		t.Errorf("a full, its prompt 600 ms from cached: %+v, want a wait", d)
	}
	busyA := fullA
	busyA.Load.RunningRequests = 1
	if est := busyA.Estimate(next("a", 600*time.Millisecond), 100_000.0/1_100_000, load.Ignore{}); est.Queue != 0 {
		t.Errorf("a with a free slot: queue %v ms, want 0 (the turn goes there and waits for its prompt)", est.Queue)
	}
	d := b.Decide(snap(busyA, idle("b", 1)), next("a", 600*time.Millisecond), 0)
	if d.Kind != lb.KindSelected || d.Index != 0 {
		t.Fatalf("a with a free slot: %+v, want a", d)
	}
	if math.Abs(d.CachedShare-1_000_000.0/1_100_000) > 1e-9 {
		t.Errorf("cached share %v, want the first turn's 1M of 1.1M tokens", d.CachedShare)
	}
}
