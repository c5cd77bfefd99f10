// Package microbench is the reference bench's load-balancer microbenchmark: synthetic
// candidates, a request mix, the 23 scenarios, and a choose-only measurement loop shared by
// `go test -bench` in gateway/lb and `bench lb-microbench`.
package microbench

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// Methodology names the measurement, as in the reference CSV.
const Methodology = "choose-only-v3"

// Seed is the wait-and-widen and pulsar seed of every scenario.
const Seed = "lb-microbench-seed"

// Candidates builds n synthetic candidates (cluster-%04d) with the reference's load mix.
func Candidates(n int) []lb.Candidate {
	cs := make([]lb.Candidate, n)
	for i := range cs {
		u := uint64(i)
		cs[i] = lb.Candidate{
			ClusterID: fmt.Sprintf("cluster-%04d", i),
			RTT:       500*time.Microsecond + time.Duration(i%19)*75*time.Microsecond,
			Backends:  1,
			Load: load.Load{
				OutputTPS:            120 + float64(i%11),
				InputTPS:             1200 + 31*float64(i%13),
				MaxOutputTPS:         500,
				QueueSize:            u % 7,
				QueuedInputTokens:    256 * (u % 5),
				KVCapacityTokens:     131072,
				KVUsedTokens:         8192 + 64*(u%23),
				KVFreeTokens:         131072 - (8192 + 64*(u%23)),
				RunningRequests:      u % 9,
				MaxEngineConcurrency: 16,
				TotalInputTokens:     384 * (u % 6),
				QueueEstimates: []load.PriorityEstimate{
					{Priority: 0, QueueMs: u % 5},
					{Priority: 2, QueueMs: 2 + u%11},
					{Priority: 4, QueueMs: 4 + u%17},
				},
			},
		}
	}
	return cs
}

// Requests builds the request of iteration k for k in [0, keys×8): affinity key
// cache-prefix-%06d (k mod keys), input 512 + 64 × (k mod 8), priority k mod 4, SLO 250 ms.
// excluded is shared by every request.
func Requests(keys int, excluded []string) []lb.Request {
	n := keys * 8
	rs := make([]lb.Request, n)
	for k := range rs {
		rs[k] = lb.Request{
			AffinityKey: fmt.Sprintf("cache-prefix-%06d", k%keys),
			InputTokens: 512 + 64*uint64(k%8),
			Priority:    uint32(k % 4),
			SLO:         250 * time.Millisecond,
			Excluded:    excluded,
		}
	}
	return rs
}

// Scenario is one microbenchmark case: an algorithm definition and the excluded clusters.
type Scenario struct {
	Name     string
	Entry    lbconfig.Entry
	Excluded []string
}

var (
	oneExcluded   = []string{"cluster-0000"}
	multiExcluded = []string{"cluster-0000", "cluster-0001"}
)

func powerOfN(sample int) lbconfig.Entry {
	e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
	e.SampleCount = sample
	return e
}

func waw(mod func(*lbconfig.Entry)) lbconfig.Entry {
	e := lbconfig.DefaultEntry(lbconfig.WaitAndWiden)
	e.BucketSize, e.N, e.MaxQueued, e.Seed = 1_000_000*time.Millisecond, 2, 64, Seed
	if mod != nil {
		mod(&e)
	}
	return e
}

// Scenarios returns the reference's 23 scenarios for the given candidate count.
func Scenarios(candidates int) []Scenario {
	ignoreQueue := func(e *lbconfig.Entry) { e.IgnoreQueueTime = true }
	rttOnly := func(e *lbconfig.Entry) { e.IgnoreQueueTime, e.IgnoreInputProcessingTime = true, true }
	aff := func(e *lbconfig.Entry) { e.VirtualNodes, e.SelectionCount = 150, 2 }
	pul := lbconfig.DefaultEntry(lbconfig.Pulsar)
	pul.Seed = Seed
	pwaw := lbconfig.DefaultEntry(lbconfig.PulsarWaitAndWiden)
	pwaw.Seed, pwaw.BucketSize, pwaw.MaxQueued = Seed, 1_000_000*time.Millisecond, 64
	return []Scenario{
		{"lb-bench-power-of-n", powerOfN(2), nil},
		{"lb-bench-power-of-n-sample-1", powerOfN(1), nil},
		{"lb-bench-power-of-n-sample-4", powerOfN(4), nil},
		{"lb-bench-power-of-n-sample-8", powerOfN(8), nil},
		{"lb-bench-power-of-n-full-pool", powerOfN(min(max(candidates, 1), 64)), nil},
		{"lb-bench-power-of-n-one-excluded", powerOfN(2), oneExcluded},
		{"lb-bench-wait-and-widen", waw(nil), nil},
		{"lb-bench-wait-and-widen-one-excluded", waw(nil), oneExcluded},
		{"lb-bench-wait-and-widen-ignore-queue", waw(ignoreQueue), nil},
		{"lb-bench-wait-and-widen-ignore-queue-one-excluded", waw(ignoreQueue), oneExcluded},
		{"lb-bench-wait-and-widen-ignore-queue-multi-excluded", waw(ignoreQueue), multiExcluded},
		{"lb-bench-wait-and-widen-rtt-only", waw(rttOnly), nil},
		{"lb-bench-wait-and-widen-rtt-only-one-excluded", waw(rttOnly), oneExcluded},
		{"lb-bench-wait-and-widen-rtt-only-multi-excluded", waw(rttOnly), multiExcluded},
		{"lb-bench-wait-and-widen-affinity", waw(aff), nil},
		{"lb-bench-wait-and-widen-affinity-one-excluded", waw(aff), oneExcluded},
		{"lb-bench-wait-and-widen-affinity-multi-excluded", waw(aff), multiExcluded},
		{"lb-bench-pulsar", pul, nil},
		{"lb-bench-pulsar-one-excluded", pul, oneExcluded},
		{"lb-bench-pulsar-wait-and-widen", pwaw, nil},
		{"lb-bench-random", lbconfig.DefaultEntry(lbconfig.Random), nil},
		{"lb-bench-random-one-excluded", lbconfig.DefaultEntry(lbconfig.Random), oneExcluded},
		{"lb-bench-round-robin-one-excluded", lbconfig.DefaultEntry(lbconfig.RoundRobin), oneExcluded},
		{"lb-bench-round-robin-multi-excluded", lbconfig.DefaultEntry(lbconfig.RoundRobin), multiExcluded},
	}
}

// Result is one scenario's measurement.
type Result struct {
	Scenario      string
	Candidates    int
	Iterations    int
	Warmup        int
	Total         time.Duration
	AllocsPerOp   float64
	Choices       int
	AvgRankDepth  float64
	Backends      int // distinct backends chosen
	TopBackend    string
	TopBackendHit int
}

// NsPerChoose is the mean decision time in nanoseconds.
func (r Result) NsPerChoose() float64 {
	if r.Iterations == 0 {
		return 0
	}
	return float64(r.Total.Nanoseconds()) / float64(r.Iterations)
}

// Clock reads the current time (time.Now in the CLI).
type Clock func() time.Time

// Allocs reports the cumulative number of heap allocations (runtime.MemStats.Mallocs).
type Allocs func() uint64

// Run measures one scenario: warmup decisions, then iterations timed decisions over the
// synthetic candidates and the request mix with keys affinity keys.
func Run(sc Scenario, candidates, keys, iterations, warmup int, rng lb.Rand, now Clock, allocs Allocs) (Result, error) {
	b, err := lb.New(sc.Entry, rng)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", sc.Name, err)
	}
	snap := lb.NewSnapshot("", "dummy-model", Candidates(candidates))
	reqs := Requests(max(keys, 1), sc.Excluded)
	for k := range warmup {
		b.Decide(snap, &reqs[k%len(reqs)], 0)
	}
	counts := make([]int, candidates)
	rankSum, choices := 0, 0
	a0 := allocs()
	start := now()
	for k := range iterations {
		d := b.Decide(snap, &reqs[k%len(reqs)], 0)
		if d.Kind == lb.KindSelected {
			counts[d.Index]++
			rankSum += d.RankDepth
			choices++
		}
	}
	res := Result{Scenario: sc.Name, Candidates: candidates, Iterations: iterations, Warmup: warmup, Total: now().Sub(start), Choices: choices}
	res.AllocsPerOp = float64(allocs()-a0) / float64(max(iterations, 1))
	if choices > 0 {
		res.AvgRankDepth = float64(rankSum) / float64(choices)
	}
	for i, c := range counts {
		if c > 0 {
			res.Backends++
		}
		if c > res.TopBackendHit {
			res.TopBackendHit, res.TopBackend = c, snap.Candidates[i].ClusterID
		}
	}
	return res, nil
}

// WriteCSV writes results with the reference microbenchmark's CSV columns, plus
// allocs_per_choose.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"methodology", "scenario", "candidates", "iterations", "warmup_iterations", "concurrency", "total_ns", "ns_per_choose", "allocs_per_choose", "choices", "avg_rank_depth", "selected_backend_count", "top_backend", "top_backend_choices"})
	for i := range results {
		r := &results[i]
		_ = cw.Write([]string{
			Methodology, r.Scenario, strconv.Itoa(r.Candidates), strconv.Itoa(r.Iterations), strconv.Itoa(r.Warmup), "1",
			strconv.FormatInt(r.Total.Nanoseconds(), 10), strconv.FormatFloat(r.NsPerChoose(), 'f', 1, 64),
			strconv.FormatFloat(r.AllocsPerOp, 'f', 2, 64), strconv.Itoa(r.Choices), strconv.FormatFloat(r.AvgRankDepth, 'f', 3, 64),
			strconv.Itoa(r.Backends), r.TopBackend, strconv.Itoa(r.TopBackendHit),
		})
	}
	cw.Flush()
	return cw.Error()
}
