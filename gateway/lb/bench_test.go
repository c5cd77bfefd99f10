package lb_test

import (
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/bench/microbench"
	"github.com/switchyard/switchyard/gateway/lb"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// BenchmarkDecide runs every scenario of the reference router's routing microbenchmark
// (package microbench) on 8 and 64 synthetic candidates. Budgets (docs/bench.md):
// power-of-n ≤ 1 µs and 0 allocs, wait-and-widen with the affinity ring ≤ 3 µs and 0 allocs
// on a cached key.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{8, 64} {
		scenarios := microbench.Scenarios(n)
		for i := range scenarios {
			sc := &scenarios[i]
			b.Run(fmt.Sprintf("policy=%s/candidates=%d", sc.Name, n), func(b *testing.B) {
				bal := newBalancer(b, sc.Entry, seeded())
				snap := lb.NewSnapshot("", "dummy-model", microbench.Candidates(n))
				reqs := microbench.Requests(1024, sc.Excluded)
				for k := range reqs { // warm the key caches
					bal.Decide(snap, &reqs[k], 0)
					bal.Decide(snap, &reqs[k], 0)
				}
				b.ReportAllocs()
				k := 0
				for b.Loop() {
					bal.Decide(snap, &reqs[k], 0)
					k++
					if k == len(reqs) {
						k = 0
					}
				}
			})
		}
	}
}

// Decisions on a cached key allocate nothing, for every algorithm.
func TestDecideAllocatesNothing(t *testing.T) {
	for _, sc := range microbench.Scenarios(64) {
		bal := newBalancer(t, sc.Entry, seeded())
		snap := lb.NewSnapshot("", "dummy-model", microbench.Candidates(64))
		reqs := microbench.Requests(16, sc.Excluded)
		for k := range reqs {
			bal.Decide(snap, &reqs[k], 0)
			bal.Decide(snap, &reqs[k], 0)
		}
		k := 0
		if got := testing.AllocsPerRun(200, func() {
			bal.Decide(snap, &reqs[k%len(reqs)], 0)
			k++
		}); got != 0 {
			t.Errorf("%s: %v allocs per decision, want 0", sc.Name, got)
		}
	}
}

// BenchmarkWaitAndWidenBuckets is wait-and-widen on large fleets with the default 20 ms
// bucket, where the synthetic candidates' estimates span many buckets (the microbenchmark's
// scenarios use one bucket wider than every spread): the cost of the bucket walk.
func BenchmarkWaitAndWidenBuckets(b *testing.B) {
	for _, n := range []int{64, 512, 4096} {
		sc := microbench.Scenarios(n)[6] // lb-bench-wait-and-widen
		sc.Entry.BucketSize = lbconfig.DefaultBucketSize
		b.Run(fmt.Sprintf("candidates=%d", n), func(b *testing.B) {
			bal := newBalancer(b, sc.Entry, seeded())
			snap := lb.NewSnapshot("", "dummy-model", microbench.Candidates(n))
			reqs := microbench.Requests(1024, sc.Excluded)
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				bal.Decide(snap, &reqs[k], 0)
				k++
				if k == len(reqs) {
					k = 0
				}
			}
		})
	}
}
