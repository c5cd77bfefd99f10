package lb_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// The tagged hash encoding is byte-compatible with the reference router's: a pinned input
// gives the reference's pinned hash.
func TestRendezvousHashPinned(t *testing.T) {
	t.Parallel()
	if got := lb.RendezvousHash("seed-1", "rk-1", "model-a", "prefix-123", "inst-a"); got != 0x1944_3c44_ec9f_8abf {
		t.Errorf("hash = %#x, want 0x19443c44ec9f8abf", got)
	}
}

func tpsCandidate(id string, tps float64) lb.Candidate {
	return lb.Candidate{ClusterID: id, RTT: ms(1), Load: load.Load{InputTPS: tps}}
}

func pulsarEntry(mod func(*lbconfig.Entry)) lbconfig.Entry {
	e := lbconfig.DefaultEntry(lbconfig.Pulsar)
	e.Seed = "seed"
	if mod != nil {
		mod(&e)
	}
	return e
}

// primaryOf is the rank-1 cluster of key.
func primaryOf(t *testing.T, e lbconfig.Entry, s *lb.Snapshot, key string) int {
	t.Helper()
	d := newBalancer(t, e, firstRand{}).Decide(s, &lb.Request{AffinityKey: key}, 0)
	if d.Kind != lb.KindSelected || d.RankDepth != 1 {
		t.Fatalf("no primary for %q: %v", key, d)
	}
	return d.Index
}

// Different keys reach several clusters, a key's ranking is stable, clusters without a
// valid weight (mean input TPS) are never ranked, a retry skips the excluded primary (rank
// 2), and all excluded or all invalid gives no choice.
func TestPulsarRanking(t *testing.T) {
	t.Parallel()
	s := snap(tpsCandidate("a", 100), tpsCandidate("b", 100), tpsCandidate("c", 100), tpsCandidate("bad", math.NaN()))
	b := newBalancer(t, pulsarEntry(nil), firstRand{})
	seen := map[int]int{}
	for i := range 64 {
		d := b.Decide(s, &lb.Request{AffinityKey: fmt.Sprint("k", i)}, 0)
		seen[d.Index]++
		if d.Index == 3 {
			t.Fatalf("invalid-weight cluster ranked: %v", d)
		}
	}
	if len(seen) < 2 {
		t.Errorf("different keys reached %v", seen)
	}
	for range 20 {
		expect(t, "stable", b.Decide(s, &lb.Request{AffinityKey: "k7"}, 0), b.Decide(s, &lb.Request{AffinityKey: "k7"}, 0))
	}
	p := primaryOf(t, pulsarEntry(nil), s, "k7")
	d := b.Decide(s, &lb.Request{AffinityKey: "k7", Excluded: []string{s.Candidates[p].ClusterID}}, 0)
	if d.Kind != lb.KindSelected || d.RankDepth != 2 || d.Index == p {
		t.Errorf("excluded primary: %v", d)
	}
	expect(t, "all excluded", b.Decide(s, &lb.Request{AffinityKey: "k7", Excluded: []string{"a", "b", "c"}}, 0), lb.Unavailable(lb.ReasonNotRanked))
	expect(t, "all invalid", b.Decide(snap(tpsCandidate("x", 0), tpsCandidate("y", -1)), &lb.Request{}, 0), lb.Unavailable(lb.ReasonNotRanked))
}

// Weights matter: a cluster with a far larger weight owns most keys.
func TestPulsarWeights(t *testing.T) {
	t.Parallel()
	s := snap(tpsCandidate("heavy", 9000), tpsCandidate("light", 1000))
	b := newBalancer(t, pulsarEntry(nil), firstRand{})
	heavy := 0
	for i := range 1000 {
		if b.Decide(s, &lb.Request{AffinityKey: fmt.Sprint("k", i)}, 0).Index == 0 {
			heavy++
		}
	}
	if heavy < 850 || heavy > 950 {
		t.Errorf("weight 9:1 gave the heavy cluster %d of 1000 keys, want about 900", heavy)
	}
}

// Without KV consideration a primary low on free KV is still chosen; with it, a primary
// with low or missing KV figures is skipped (rank 2, KVSkipped), and a cached ranking still
// checks the live KV values.
func TestPulsarKVFreeTokens(t *testing.T) {
	t.Parallel()
	kv := func(id string, free uint64) lb.Candidate {
		c := tpsCandidate(id, 100)
		c.Load.KVCapacityTokens, c.Load.KVFreeTokens = 100_000, free
		return c
	}
	s := snap(kv("a", 100_000), kv("b", 100_000))
	p := primaryOf(t, pulsarEntry(nil), s, "key")
	low := []lb.Candidate{kv("a", 100_000), kv("b", 100_000)}
	low[p].Load.KVFreeTokens = 10
	lowSnap := snap(low...)
	r := &lb.Request{AffinityKey: "key", InputTokens: 500}
	expect(t, "without KV consideration", newBalancer(t, pulsarEntry(nil), firstRand{}).Decide(lowSnap, r, 0), lb.Selected(p, 1))
	withKV := newBalancer(t, pulsarEntry(func(e *lbconfig.Entry) { e.ConsiderKVFreeTokens = true }), firstRand{})
	want := lb.Selected(1-p, 2)
	want.KVSkipped = true
	expect(t, "low free KV", withKV.Decide(lowSnap, r, 0), want)
	missing := []lb.Candidate{kv("a", 100_000), kv("b", 100_000)}
	missing[p].Load.KVCapacityTokens, missing[p].Load.KVFreeTokens = 0, 0
	expect(t, "missing KV metrics", withKV.Decide(snap(missing...), r, 0), want)
	// The ranking is cached (weights unchanged) but the KV check uses live values.
	expect(t, "cached ranking, KV recovered", withKV.Decide(s, r, 0), lb.Selected(p, 1))
	expect(t, "cached ranking, KV low again", withKV.Decide(lowSnap, r, 0), want)
}

// The ranking cache is invalidated when the weights change, and keys over 256 bytes are
// not cached.
func TestPulsarCache(t *testing.T) {
	t.Parallel()
	b := newBalancer(t, pulsarEntry(nil), firstRand{})
	s := snap(tpsCandidate("a", 100), tpsCandidate("b", 100))
	p := b.Decide(s, &lb.Request{AffinityKey: "key"}, 0).Index
	b.Decide(s, &lb.Request{AffinityKey: "key"}, 0)
	if got := lb.CachedKeyBytes(b); got != 3 {
		t.Errorf("cached key bytes %d, want 3", got)
	}
	// Make the primary's weight negligible: a cached ranking would keep it first.
	cs := []lb.Candidate{tpsCandidate("a", 100), tpsCandidate("b", 100)}
	cs[p].Load.InputTPS = 1e-9
	if d := b.Decide(snap(cs...), &lb.Request{AffinityKey: "key"}, 0); d.Index == p {
		t.Errorf("ranking not recomputed after a weight change: %v", d)
	}
	long := strings.Repeat("k", 300)
	b.Decide(s, &lb.Request{AffinityKey: long}, 0)
	if got := lb.CachedKeyBytes(b); got > 256 {
		t.Errorf("oversized key cached: %d bytes", got)
	}
}

// pulsar-wait-and-widen: without a queue SLO a feasible primary wins at once; with one,
// bands of the ranking are tried in order.
func TestPulsarWaitAndWiden(t *testing.T) {
	t.Parallel()
	cs := []lb.Candidate{tpsCandidate("a", 100), tpsCandidate("b", 100), tpsCandidate("c", 100), tpsCandidate("d", 100)}
	e := lbconfig.DefaultEntry(lbconfig.PulsarWaitAndWiden)
	e.Seed = "seed"
	p := primaryOf(t, pulsarEntry(nil), snap(cs...), "key")
	busy := append([]lb.Candidate(nil), cs...)
	busy[p].Load.QueueEstimates = []load.PriorityEstimate{prio(0, 5000)}
	b := newBalancer(t, e, firstRand{})
	expect(t, "no SLO: primary at once", b.Decide(snap(busy...), &lb.Request{AffinityKey: "key"}, 0), lb.Selected(p, 1))

	e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, ms(4000), ms(4000)
	slo := newBalancer(t, e, firstRand{})
	expect(t, "SLO: idle primary", slo.Decide(snap(cs...), &lb.Request{AffinityKey: "key"}, 0), lb.Selected(p, 1))
	d := slo.Decide(snap(busy...), &lb.Request{AffinityKey: "key"}, 0)
	if d.Kind != lb.KindSelected || d.Index == p || d.RankDepth < 2 || d.RankDepth > 3 {
		t.Errorf("primary over the queue SLO: %v, want a rank 2–3 fallback", d)
	}
	over := append([]lb.Candidate(nil), busy...)
	for i := range over {
		over[i].Load.QueueEstimates = []load.PriorityEstimate{prio(0, 5000)}
	}
	if d := slo.Decide(snap(over...), &lb.Request{AffinityKey: "key"}, 0); d.Kind != lb.KindUnavailable {
		t.Errorf("every cluster over the SLO: %v", d)
	}
	fullAll := append([]lb.Candidate(nil), cs...)
	for i := range fullAll {
		fullAll[i] = full(fullAll[i])
	}
	kvE := e
	kvE.HasQueueSLO = false
	if d := newBalancer(t, kvE, firstRand{}).Decide(snap(fullAll...), &lb.Request{AffinityKey: "key"}, 0); d.Kind != lb.KindSelected || d.Index != p {
		t.Errorf("no SLO picks the primary regardless of load: %v", d)
	}
}
