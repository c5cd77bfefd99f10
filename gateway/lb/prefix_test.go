package lb_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// prompt is a session's prompt of n bytes: the session's own text, so two sessions share
// nothing and one session's later turns extend its earlier ones.
func prompt(session string, n int) []byte {
	return []byte(strings.Repeat(session+" says hello; ", n/len(session)+1)[:n])
}

// prefixReq is a request for the first n bytes of session's prompt, one token per byte.
func prefixReq(session string, n int, at time.Time) *lb.Request {
	return &lb.Request{InputTokens: uint64(n), Prefix: lb.AppendPrefixHashes(nil, "m", prompt(session, n)), At: at}
}

func prefixEntry(mod func(*lbconfig.Entry)) lbconfig.Entry {
	return waw(func(e *lbconfig.Entry) {
		e.PrefixAffinity = true
		if mod != nil {
			mod(e)
		}
	})
}

// at1k is a candidate with RTT rtt that prefills 1 000 tokens a second: a 10 000-token
// prompt costs it 10 s uncached.
func at1k(id string, rtt float64) lb.Candidate {
	c := idle(id, rtt)
	c.Load.InputTPS = 1000
	return c
}

func chosen(t *testing.T, s *lb.Snapshot, d lb.Decision) string {
	t.Helper()
	if d.Kind != lb.KindSelected {
		t.Fatalf("decision %v, want a selection", d)
	}
	return s.Candidates[d.Index].ClusterID
}

func TestAppendPrefixHashesChains(t *testing.T) {
	t.Parallel()
	short := lb.AppendPrefixHashes(nil, "m", prompt("s", 600))
	long := lb.AppendPrefixHashes(nil, "m", prompt("s", 1000))
	if len(short) != 3 || len(long) != 4 {
		t.Fatalf("blocks: %d and %d, want 3 and 4 (256-byte blocks, a partial last one)", len(short), len(long))
	}
	if short[0] != long[0] || short[1] != long[1] {
		t.Error("a longer prompt does not share its leading blocks' hashes")
	}
	if short[2] == long[2] {
		t.Error("a partial block hashes like the full block that extends it")
	}
	if other := lb.AppendPrefixHashes(nil, "other-model", prompt("s", 600)); other[0] == short[0] {
		t.Error("the model does not seed the chain")
	}
	if n := len(lb.AppendPrefixHashes(nil, "m", make([]byte, 3*lb.MaxPrefixBytes))); n != lb.MaxPrefixBytes/lb.PrefixBlockBytes {
		t.Errorf("a huge prompt hashed %d blocks, want the cap %d", n, lb.MaxPrefixBytes/lb.PrefixBlockBytes)
	}
}

// A session's later turns go where its prompt was sent, although another cluster has a
// lower RTT: the expected cached tokens discount that cluster's prefill. New sessions
// still go to the faster cluster, and without prefix_affinity the cache is not seen.
func TestPrefixAffinityFollowsThePrompt(t *testing.T) {
	t.Parallel()
	slowFirst := snap(at1k("a", 50), at1k("b", 10))
	b := newBalancer(t, prefixEntry(nil), seeded())
	if got := chosen(t, slowFirst, b.Decide(slowFirst, prefixReq("one", 10_000, t0), 0)); got != "b" {
		t.Fatalf("first turn went to %s, want b (lower RTT, nothing cached anywhere)", got)
	}
	aFaster := snap(at1k("a", 10), at1k("b", 50))
	for i := range 5 {
		r := prefixReq("one", 10_000+100*(i+1), t0.Add(time.Duration(i+1)*time.Second))
		d := b.Decide(aFaster, r, 0)
		if got := chosen(t, aFaster, d); got != "b" {
			t.Errorf("turn %d went to %s, want b, which holds the first 10 000 tokens", i+2, got)
		}
		// Blocks up to the previous turn's last full block are cached: what is left is
		// at most two blocks and the new text, far below the 10 s of a full prefill.
		if limit := load.Millis(50 + 2*256 + 100); d.TTFT <= 50 || d.TTFT > limit {
			t.Errorf("turn %d estimate %v, want RTT + the uncached tail, at most %v", i+2, d.TTFT, limit)
		}
	}
	if got := chosen(t, aFaster, b.Decide(aFaster, prefixReq("two", 10_000, t0.Add(time.Minute)), 0)); got != "a" {
		t.Errorf("a new session went to %s, want the faster a", got)
	}

	off := newBalancer(t, waw(nil), seeded())
	off.Decide(slowFirst, prefixReq("one", 10_000, t0), 0)
	if got := chosen(t, aFaster, off.Decide(aFaster, prefixReq("one", 10_100, t0.Add(time.Second)), 0)); got != "a" {
		t.Errorf("without prefix_affinity the second turn went to %s, want the faster a", got)
	}
}

// The cluster holding the prompt is held for up to cache_affinity_wait_ms when it is full;
// after the hold the request goes elsewhere, and that cluster then holds the prompt too.
func TestPrefixAffinityHoldsForTheCachedCluster(t *testing.T) {
	t.Parallel()
	b := newBalancer(t, prefixEntry(func(e *lbconfig.Entry) { e.AffinityWait = 200 * time.Millisecond }), seeded())
	both := snap(at1k("a", 50), at1k("b", 10))
	b.Decide(both, prefixReq("one", 1000, t0), 0) // to b
	bFull := snap(at1k("a", 10), full(at1k("b", 10)))
	r := prefixReq("one", 1200, t0.Add(time.Second))
	if d := b.Decide(bFull, r, 50*time.Millisecond); d.Kind != lb.KindWait || d.Wait > 150*time.Millisecond {
		t.Fatalf("inside the hold: %v, want a wait of at most 150 ms for b", d)
	}
	// After the hold the global phase still prices b's cache: a (≈ 1.2 s of prefill, most
	// of a second more than b) unlocks when the time since the hold reaches that gap, not a
	// quarter of it: waiting for b until then is never slower than prefilling on a.
	if d := b.Decide(bFull, r, 300*time.Millisecond); d.Kind != lb.KindWait {
		t.Fatalf("just after the hold: %v, want a wait for a's bucket", d)
	}
	if d := b.Decide(bFull, r, 700*time.Millisecond); d.Kind != lb.KindWait {
		t.Fatalf("500 ms after the hold: %v, want still a wait for a's bucket", d)
	}
	if got := chosen(t, bFull, b.Decide(bFull, r, 1300*time.Millisecond)); got != "a" {
		t.Fatalf("once a's bucket unlocked the request went to %s, want a", got)
	}
	// Both now hold the first blocks; a holds one block more, worth more than its 20 ms
	// of extra RTT.
	aSlower := snap(at1k("a", 30), at1k("b", 10))
	if got := chosen(t, aSlower, b.Decide(aSlower, prefixReq("one", 1400, t0.Add(2*time.Second)), 0)); got != "a" {
		t.Errorf("third turn went to %s, want a", got)
	}
}

// Remembered blocks age out after prefix_index_ttl_ms and are bounded per cluster by
// prefix_index_blocks and by the cluster's reported KV capacity (least recently sent out
// first); clusters that leave are forgotten.
func TestPrefixIndexBounds(t *testing.T) {
	t.Parallel()
	aFaster := snap(at1k("a", 10), at1k("b", 50))
	toB := snap(at1k("a", 50), at1k("b", 10))
	secondTurn := func(b lb.Balancer, session string, at time.Time) string {
		return chosen(t, aFaster, b.Decide(aFaster, prefixReq(session, 10_100, at), 0))
	}

	ttl := newBalancer(t, prefixEntry(func(e *lbconfig.Entry) { e.PrefixIndexTTL = time.Minute }), seeded())
	ttl.Decide(toB, prefixReq("one", 10_000, t0), 0)
	if got := secondTurn(ttl, "one", t0.Add(2*time.Minute)); got != "a" {
		t.Errorf("after the TTL the session went to %s, want the faster a", got)
	}

	// 40 blocks per 10 000-byte prompt; room for 40 keeps one session, not two.
	small := newBalancer(t, prefixEntry(func(e *lbconfig.Entry) { e.PrefixIndexBlocks = 40 }), seeded())
	small.Decide(toB, prefixReq("one", 10_000, t0), 0)
	small.Decide(toB, prefixReq("two", 10_000, t0.Add(time.Second)), 0)
	if got := secondTurn(small, "one", t0.Add(2*time.Second)); got != "a" {
		t.Errorf("session one, evicted, went to %s, want a", got)
	}
	if got := secondTurn(small, "two", t0.Add(3*time.Second)); got != "b" {
		t.Errorf("session two, the most recent, went to %s, want b", got)
	}

	// b's KV cache holds one session. A new session goes where there is room, even to a
	// slower cluster; forced onto b, it evicts the older session.
	kv := newBalancer(t, prefixEntry(nil), seeded())
	tinyB := at1k("b", 10)
	tinyB.Load.KVCapacityTokens = 12_000 // new sessions may fill 85 %: room for one of 10 000 tokens
	bigA := at1k("a", 50)
	bigA.Load.KVCapacityTokens = 1_000_000
	kvSnap := snap(bigA, tinyB)
	kv.Decide(kvSnap, prefixReq("one", 10_000, t0), 0)
	if got := chosen(t, kvSnap, kv.Decide(kvSnap, prefixReq("two", 10_000, t0.Add(time.Second)), 0)); got != "a" {
		t.Errorf("a new session went to %s, want a: b's KV cache is full", got)
	}
	if got := secondTurn(kv, "one", t0.Add(2*time.Second)); got != "b" {
		t.Errorf("session one went to %s, want b, which still holds it", got)
	}
	bigB := tinyB
	bigB.Load.KVCapacityTokens = 1_000_000
	if got := chosen(t, snap(at1k("a", 50), bigB), kv.Decide(snap(at1k("a", 50), bigB), prefixReq("three", 10_000, t0.Add(3*time.Second)), 0)); got != "b" {
		t.Errorf("a new session went to %s, want b, whose KV cache now has room", got)
	}
	onlyB := snap(tinyB)
	kv.Decide(onlyB, prefixReq("four", 10_000, t0.Add(4*time.Second)), 0)
	if got := secondTurn(kv, "one", t0.Add(5*time.Second)); got != "a" {
		t.Errorf("session one, evicted from b by session four, went to %s, want a", got)
	}

	gone := newBalancer(t, prefixEntry(nil), seeded())
	gone.Decide(toB, prefixReq("one", 10_000, t0), 0)
	onlyA := snap(at1k("a", 10))
	gone.Decide(onlyA, prefixReq("x", 1000, t0.Add(time.Second)), 0)
	if got := secondTurn(gone, "one", t0.Add(2*time.Second)); got != "a" {
		t.Errorf("after b left and came back, session one went to %s, want a (b's cache is gone)", got)
	}
}

// last_cluster_affinity: a returning session goes back to the cluster it names although
// its ring primary is free again; new and stale sessions neither wait nor get a discount;
// a retry-excluded last cluster still holds the request for X.
func TestLastClusterAffinity(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 5), idle("b", 5), idle("c", 5))
	e := waw(func(e *lbconfig.Entry) {
		e.SelectionCount, e.AffinityWait, e.LastClusterAffinity = 1, 100*time.Millisecond, true
	})
	key := keyWithGroup(t, e, s, 0)
	b := newBalancer(t, e, seeded())

	d := b.Decide(s, &lb.Request{AffinityKey: key, LastCluster: "c", At: t0}, 0)
	if chosen(t, s, d) != "c" || d.Session != lb.SessionReturning || d.RankDepth != 1 {
		t.Errorf("returning to c: %v (session %v), want c at rank 1, returning", d, d.Session)
	}
	d = b.Decide(s, &lb.Request{AffinityKey: key, At: t0}, 0)
	if chosen(t, s, d) != "a" || d.Session != lb.SessionNew {
		t.Errorf("new session: %v (session %v), want the primary a, new", d, d.Session)
	}
	fullA := snap(full(idle("a", 5)), idle("b", 5), idle("c", 5))
	d = b.Decide(fullA, &lb.Request{AffinityKey: key, At: t0}, 0)
	if d.Kind != lb.KindSelected || d.RankDepth == 1 || d.Session != lb.SessionNew {
		t.Errorf("new session, full primary: %v, want an immediate fallback (no hold)", d)
	}
	d = b.Decide(fullA, &lb.Request{AffinityKey: key, LastCluster: "gone", At: t0}, 0)
	if d.Kind != lb.KindSelected || d.RankDepth == 1 || d.Session != lb.SessionStale {
		t.Errorf("stale session, full primary: %v (session %v), want an immediate fallback, stale", d, d.Session)
	}
	d = b.Decide(s, &lb.Request{AffinityKey: key, LastCluster: "c", Excluded: []string{"c"}, At: t0}, 0)
	if d.Kind != lb.KindWait {
		t.Errorf("excluded last cluster: %v, want a wait for the hold", d)
	}

	off := newBalancer(t, waw(func(e *lbconfig.Entry) { e.SelectionCount, e.AffinityWait = 1, 100*time.Millisecond }), seeded())
	d = off.Decide(s, &lb.Request{AffinityKey: key, LastCluster: "c", At: t0}, 0)
	if chosen(t, s, d) != "a" || d.Session != lb.SessionNone {
		t.Errorf("without the option: %v (session %v), want the primary a and no session state", d, d.Session)
	}
}

// pulsar-wait-and-widen promotes a returning session's cluster to rank 1.
func TestLastClusterAffinityPulsar(t *testing.T) {
	t.Parallel()
	s := snap(idle("a", 5), idle("b", 5), idle("c", 5))
	e := lbconfig.DefaultEntry(lbconfig.PulsarWaitAndWiden)
	e.LastClusterAffinity = true
	b := newBalancer(t, e, seeded())
	primary := chosen(t, s, b.Decide(s, &lb.Request{AffinityKey: "k", At: t0}, 0))
	other := "a"
	if primary == "a" {
		other = "b"
	}
	d := b.Decide(s, &lb.Request{AffinityKey: "k", LastCluster: other, At: t0}, 0)
	if chosen(t, s, d) != other || d.RankDepth != 1 || d.Session != lb.SessionReturning {
		t.Errorf("returning to %s: %v (session %v), want it at rank 1", other, d, d.Session)
	}
	if d := b.Decide(s, &lb.Request{AffinityKey: "k", At: t0}, 0); chosen(t, s, d) != primary {
		t.Errorf("the promotion was cached: a new session went to %s, want %s", chosen(t, s, d), primary)
	}
}

// A new session — a plain client's prompt no cluster is known to hold, or a key the
// session memory does not know — is placed by its session hash (or key) among the tied
// candidates with a free slot, so two replicas with different random streams and no
// shared memory place it alike; different sessions still spread over the clusters, and a
// full cluster is skipped. Without a session hash the replicas' random tie-breaks differ.
func TestNewSessionsPlacedAlikeOnEveryReplica(t *testing.T) {
	t.Parallel()
	fleet := func(fullID string) *lb.Snapshot {
		cs := []lb.Candidate{at1k("a", 10), at1k("b", 10), at1k("c", 10), at1k("d", 10)}
		for i := range cs {
			cs[i].Load.MaxEngineConcurrency = 4
			if cs[i].ClusterID == fullID {
				cs[i] = full(cs[i])
			}
		}
		return snap(cs...)
	}
	keyed := waw(func(e *lbconfig.Entry) { e.SelectionCount = 4 })
	for _, tc := range []struct {
		name  string
		entry lbconfig.Entry
		req   func(i int) *lb.Request
	}{
		{"plain client", prefixEntry(nil), func(i int) *lb.Request {
			r := prefixReq(fmt.Sprint("session-", i), 2000, t0)
			r.Session = xxh3.HashString(fmt.Sprint("conversation-", i))
			return r
		}},
		{"affinity key", keyed, func(i int) *lb.Request {
			return &lb.Request{AffinityKey: fmt.Sprint("key-", i), InputTokens: 2000, At: t0}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			used := map[string]bool{}
			for i := range 16 {
				s := fleet("")
				one := newBalancer(t, tc.entry, rand.New(rand.NewPCG(1, 2)))
				other := newBalancer(t, tc.entry, rand.New(rand.NewPCG(7, 9)))
				got := chosen(t, s, one.Decide(s, tc.req(i), 0))
				if again := chosen(t, s, other.Decide(s, tc.req(i), 0)); again != got {
					t.Errorf("session %d: %s on one replica, %s on the other", i, got, again)
				}
				used[got] = true
				// Its cluster full: both replicas place it on the same other one.
				sf := fleet(got)
				a := chosen(t, sf, newBalancer(t, tc.entry, rand.New(rand.NewPCG(1, 2))).Decide(sf, tc.req(i), 0))
				b := chosen(t, sf, newBalancer(t, tc.entry, rand.New(rand.NewPCG(7, 9))).Decide(sf, tc.req(i), 0))
				if a == got || a != b {
					t.Errorf("session %d with %s full: %s and %s", i, got, a, b)
				}
			}
			if len(used) < 3 {
				t.Errorf("16 new sessions went to %v, want them spread over the 4 clusters", used)
			}
		})
	}
	// Without a session hash the replicas break the ties their own ways.
	differ := 0
	for i := range 16 {
		s := fleet("")
		r := prefixReq(fmt.Sprint("session-", i), 2000, t0)
		one := chosen(t, s, newBalancer(t, prefixEntry(nil), rand.New(rand.NewPCG(1, 2))).Decide(s, r, 0))
		if other := chosen(t, s, newBalancer(t, prefixEntry(nil), rand.New(rand.NewPCG(7, 9))).Decide(s, r, 0)); other != one {
			differ++
		}
	}
	if differ == 0 {
		t.Error("without a session hash two replicas still placed all 16 sessions alike: the test shows nothing")
	}
}
