package lb_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

func drawCandidates(t *rapid.T) []lb.Candidate {
	n := rapid.IntRange(1, 12).Draw(t, "n")
	cs := make([]lb.Candidate, n)
	for i := range cs {
		maxConc := rapid.Uint64Range(0, 8).Draw(t, "max")
		cs[i] = lb.Candidate{
			ClusterID: fmt.Sprintf("c%02d", i),
			RTT:       time.Duration(rapid.Int64Range(0, int64(200*time.Millisecond)).Draw(t, "rtt")),
			Load: load.Load{
				InputTPS:             rapid.SampledFrom([]float64{0, 100, 1000, 20_000}).Draw(t, "tps"),
				QueuedInputTokens:    rapid.Uint64Range(0, 100_000).Draw(t, "queued"),
				QueueSize:            rapid.Uint64Range(0, 20).Draw(t, "qsize"),
				RunningRequests:      rapid.Uint64Range(0, 10).Draw(t, "running"),
				MaxEngineConcurrency: maxConc,
				KVCapacityTokens:     rapid.Uint64Range(0, 10_000).Draw(t, "kvcap"),
				KVFreeTokens:         rapid.Uint64Range(0, 10_000).Draw(t, "kvfree"),
			},
		}
	}
	return cs
}

func drawEntry(t *rapid.T) lbconfig.Entry {
	e := lbconfig.DefaultEntry(rapid.SampledFrom(lbconfig.Algorithms()).Draw(t, "algorithm"))
	switch e.Algorithm {
	case lbconfig.WaitAndWiden, lbconfig.PulsarWaitAndWiden:
		if e.Algorithm == lbconfig.WaitAndWiden {
			e.SelectionCount = rapid.IntRange(0, 3).Draw(t, "selection")
			e.AffinityWait = time.Duration(rapid.Int64Range(0, 300).Draw(t, "hold")) * time.Millisecond
			e.AffinityInputScale = rapid.Float64Range(0, 1).Draw(t, "scale")
		}
		if rapid.Bool().Draw(t, "slo") {
			e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, 100*time.Millisecond, 2*time.Second
		}
		e.MaxQueued = rapid.Uint64Range(0, 2).Draw(t, "max_queued")
		e.N = rapid.IntRange(1, 4).Draw(t, "n")
	case lbconfig.Pulsar:
		e.ConsiderKVFreeTokens = rapid.Bool().Draw(t, "kv")
	case lbconfig.PowerOfN:
		e.SampleCount = rapid.IntRange(1, 64).Draw(t, "sample")
	default:
	}
	return e
}

// Property: a Selected decision is a non-excluded candidate; wait-and-widen (and
// pulsar-wait-and-widen outside its no-SLO primary fast path) only selects candidates with
// capacity; a Wait is positive; a fully excluded request is Unavailable at once.
func TestDecisionProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cs := drawCandidates(t)
		e := drawEntry(t)
		s := lb.NewSnapshot("", "m", cs)
		r := &lb.Request{
			AffinityKey: rapid.SampledFrom([]string{"", "a", "b", "session-42"}).Draw(t, "key"),
			InputTokens: rapid.Uint64Range(0, 10_000).Draw(t, "input"),
			Priority:    rapid.Uint32Range(0, 4).Draw(t, "priority"),
			SLO:         time.Duration(rapid.Int64Range(0, 2000).Draw(t, "slo_ms")) * time.Millisecond,
		}
		for i := range cs {
			if rapid.IntRange(0, 3).Draw(t, "exclude") == 0 {
				r.Excluded = append(r.Excluded, cs[i].ClusterID)
			}
		}
		elapsed := time.Duration(rapid.Int64Range(0, 2000).Draw(t, "elapsed_ms")) * time.Millisecond
		b, err := lb.New(e, rapid.SampledFrom([]lb.Rand{seeded(), firstRand{}}).Draw(t, "rng"))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		d := b.Decide(s, r, elapsed)
		switch d.Kind {
		case lb.KindSelected:
			if d.Index < 0 || d.Index >= len(cs) {
				t.Fatalf("index %d out of range", d.Index)
			}
			c := cs[d.Index]
			if r.IsExcluded(c.ClusterID) {
				t.Fatalf("%v selected excluded %s", e.Algorithm, c.ClusterID)
			}
			capacityAware := e.Algorithm == lbconfig.WaitAndWiden || (e.Algorithm == lbconfig.PulsarWaitAndWiden && e.HasQueueSLO)
			if capacityAware && !c.Load.HasCapacity(e.MaxQueued) {
				t.Fatalf("%v selected full %s", e.Algorithm, c.ClusterID)
			}
			if d.RankDepth < 1 {
				t.Fatalf("rank depth %d", d.RankDepth)
			}
		case lb.KindWait:
			if d.Wait <= 0 {
				t.Fatalf("non-positive wait %v", d.Wait)
			}
		default:
		}
		if len(r.Excluded) == len(cs) && d != lb.Unavailable(lb.ReasonAllExcluded) {
			t.Fatalf("every candidate excluded: %v", d)
		}
	})
}

// Property: removing one of n clusters moves only the keys whose primary it was, about
// 1/n of all keys.
func TestRingRemovalMovesAboutOneNth(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(3, 12).Draw(t, "n")
		removed := rapid.IntRange(0, n-1).Draw(t, "removed")
		all, rest := make([]lb.Candidate, 0, n), make([]lb.Candidate, 0, n)
		for i := range n {
			c := idle(fmt.Sprintf("cluster-%d", i), 1)
			all = append(all, c)
			if i != removed {
				rest = append(rest, c)
			}
		}
		e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
		e.SelectionCount = 1
		b, err := lb.New(e, firstRand{})
		if err != nil {
			t.Fatal(err)
		}
		before, after := lb.NewSnapshot("", "m", all), lb.NewSnapshot("", "m", rest)
		const keys = 2000
		primaries := make([]string, keys)
		for k := range keys {
			primaries[k] = all[lb.AffinityGroup(b, before, &lb.Request{AffinityKey: fmt.Sprint("key-", k)})[0]].ClusterID
		}
		moved := 0
		for k := range keys {
			now := rest[lb.AffinityGroup(b, after, &lb.Request{AffinityKey: fmt.Sprint("key-", k)})[0]].ClusterID
			if now == primaries[k] {
				continue
			}
			if primaries[k] != all[removed].ClusterID {
				t.Fatalf("key %d moved from surviving %s to %s", k, primaries[k], now)
			}
			moved++
		}
		frac, want := float64(moved)/keys, 1/float64(n)
		if frac < 0.5*want || frac > 1.7*want {
			t.Fatalf("removing 1 of %d clusters moved %.3f of keys, want about %.3f", n, frac, want)
		}
	})
}
