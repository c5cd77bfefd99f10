package lb_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// rendezvous_weight: by default a cluster weighs its peak input throughput, so rankings
// do not move when traffic moves the means; last-mean-input-tps follows the means. A
// cluster without a peak is weighed by its mean.
func TestPulsarRendezvousWeight(t *testing.T) {
	t.Parallel()
	cand := func(id string, mean, peak float64) lb.Candidate {
		return lb.Candidate{ClusterID: id, RTT: ms(1), Load: load.Load{InputTPS: mean, MaxInputTPS: peak}}
	}
	quiet := snap(cand("a", 1000, 1000), cand("b", 1000, 1000), cand("c", 1000, 1000))
	busy := snap(cand("a", 50, 1000), cand("b", 1000, 1000), cand("c", 400, 1000))
	moved := func(e lbconfig.Entry) int {
		n := 0
		for i := range 200 {
			key := fmt.Sprintf("k%d", i)
			if !slices.Equal(lb.PulsarRanking(newBalancer(t, e, firstRand{}), quiet, key), lb.PulsarRanking(newBalancer(t, e, firstRand{}), busy, key)) {
				n++
			}
		}
		return n
	}
	if n := moved(pulsarEntry(nil)); n != 0 {
		t.Errorf("max-input-tps (default): %d of 200 rankings moved with the means, want 0", n)
	}
	if n := moved(pulsarEntry(func(e *lbconfig.Entry) { e.RendezvousWeight = lbconfig.WeightLastMeanInputTPS })); n < 50 {
		t.Errorf("last-mean-input-tps: %d of 200 rankings moved with the means, want many", n)
	}
	// No peak: the mean; an invalid weight is not ranked.
	s := snap(cand("a", 1000, 0), cand("b", 0, 0))
	if r := lb.PulsarRanking(newBalancer(t, pulsarEntry(nil), firstRand{}), s, "k"); !slices.Equal(r, []int32{0}) {
		t.Errorf("ranking %v, want [0] (a by its mean, b unranked)", r)
	}
}

// A cluster's peak is the greatest active backend's, and none unless every active
// backend has one.
func TestAggregatePeakInputTPS(t *testing.T) {
	t.Parallel()
	b := func(id string, peak float64, active bool) lb.Backend {
		return lb.Backend{ID: id, Active: active, Load: load.Load{InputTPS: 100, MaxInputTPS: peak}}
	}
	for _, tt := range []struct {
		backends []lb.Backend
		want     float64
	}{
		{[]lb.Backend{b("1", 300, true), b("2", 500, true)}, 500},
		{[]lb.Backend{b("1", 300, true), b("2", 0, true)}, 0},
		{[]lb.Backend{b("1", 300, true), b("2", 0, false)}, 300},
	} {
		c, _ := lb.Aggregate("c", tt.backends, 0)
		if c.Load.MaxInputTPS != tt.want {
			t.Errorf("%+v: peak %v, want %v", tt.backends, c.Load.MaxInputTPS, tt.want)
		}
	}
}

// pulsar-wait-and-widen with an affinity hold X (100 ms) and a band interval S (50 ms):
// the group (rank 1) is waited for until X; then ranks 1..3 open, at X+S ranks 1..7, and
// the request waits for the next band rather than skipping ahead; S = 0 opens every
// ranked cluster at X; fallback_max_queued lets the open set take clusters over their
// engine concurrency.
func TestPulsarWaitAndWidenWidening(t *testing.T) {
	t.Parallel()
	cs := make([]lb.Candidate, 0, 8)
	for i := range 8 {
		c := lb.Candidate{ClusterID: fmt.Sprintf("c%d", i), RTT: ms(1), Load: load.Load{InputTPS: 1000, MaxEngineConcurrency: 4}, Backends: 1}
		cs = append(cs, c)
	}
	entry := func(mod func(*lbconfig.Entry)) lbconfig.Entry {
		e := lbconfig.DefaultEntry(lbconfig.PulsarWaitAndWiden)
		e.Seed, e.AffinityWait, e.HasBandWiden, e.BandWiden = "seed", 100*time.Millisecond, true, 50*time.Millisecond
		e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, time.Minute, time.Minute
		e.BucketSize = time.Hour // one bucket: the comparator decides among the open set
		if mod != nil {
			mod(&e)
		}
		return e
	}
	ranking := lb.PulsarRanking(newBalancer(t, entry(nil), firstRand{}), snap(cs...), "key")
	if len(ranking) != 8 {
		t.Fatalf("ranking %v", ranking)
	}
	// Ranks 1–3 full, rank 4 (and beyond) free.
	withFull := func(ranks ...int) *lb.Snapshot {
		c := slices.Clone(cs)
		for _, rank := range ranks {
			c[ranking[rank-1]] = full(c[ranking[rank-1]])
		}
		return snap(c...)
	}
	s := withFull(1, 2, 3)
	r := &lb.Request{AffinityKey: "key", InputTokens: 10}
	b := newBalancer(t, entry(nil), firstRand{})
	expect(t, "t=0", b.Decide(s, r, 0), lb.Wait(100*time.Millisecond))
	expect(t, "t=99ms", b.Decide(s, r, ms(99)), lb.Wait(time.Millisecond))
	expect(t, "t=100ms, ranks 1-3 open and full", b.Decide(s, r, ms(100)), lb.Wait(50*time.Millisecond))
	expect(t, "t=149ms", b.Decide(s, r, ms(149)), lb.Wait(time.Millisecond))
	expect(t, "t=150ms, ranks 1-7 open", b.Decide(s, r, ms(150)), lb.Selected(int(ranking[3]), 4))

	zero := newBalancer(t, entry(func(e *lbconfig.Entry) { e.BandWiden = 0 }), firstRand{})
	expect(t, "S=0 at X", zero.Decide(s, r, ms(100)), lb.Selected(int(ranking[3]), 4))

	s2 := withFull(1, 2)
	expect(t, "rank 3 free at X", b.Decide(s2, r, ms(100)), lb.Selected(int(ranking[2]), 3))
	over := newBalancer(t, entry(func(e *lbconfig.Entry) { e.FallbackMaxQueued = 1 }), firstRand{})
	if d := over.Decide(s, r, ms(100)); d.Kind != lb.KindSelected || d.RankDepth > 3 {
		t.Errorf("fallback_max_queued 1 at X: %v, want one of the full ranks 1-3", d)
	}

	// The group's own choice needs no wait; a free primary wins at once.
	expect(t, "free primary", b.Decide(withFull(2), r, 0), lb.Selected(int(ranking[0]), 1))
	// Everything full: the last band is reached and the request fails.
	all := withFull(1, 2, 3, 4, 5, 6, 7, 8)
	if d := b.Decide(all, r, ms(300)); d.Kind != lb.KindUnavailable {
		t.Errorf("all full after every band opened: %v, want unavailable", d)
	}
}
