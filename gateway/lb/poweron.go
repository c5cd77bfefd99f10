package lb

import (
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// powerOfN samples sample_count distinct non-excluded candidates and takes the best by its
// comparator, ties broken uniformly at random. With the ttft comparator, estimates within
// the tie tolerance of the best count as ties. It never waits.
type powerOfN struct {
	sample     int
	comparator load.Comparator
	tie        float64 // tie tolerance in the comparator's unit (ms; 0 = exact ties only)
	rng        Rand
	eligible   []int32
	scores     []float64
	ttfts      []load.Millis
}

func newPowerOfN(e lbconfig.Entry, rng Rand) Balancer {
	b := &powerOfN{sample: e.SampleCount, comparator: e.Comparator, rng: rng}
	if e.Comparator == load.ComparatorTTFT {
		b.tie = float64(load.MillisOf(e.TieTolerance))
	}
	return b
}

func (b *powerOfN) Decide(s *Snapshot, r *Request, _ time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	el := b.eligible[:0]
	for i := range s.Candidates {
		if !r.IsExcluded(s.Candidates[i].ClusterID) {
			el = append(el, int32(i))
		}
	}
	b.eligible = el
	k := len(el)
	if k > b.sample {
		// Partial Fisher–Yates: the first sample entries become a uniform distinct sample.
		for i := range b.sample {
			j := i + b.rng.IntN(len(el)-i)
			el[i], el[j] = el[j], el[i]
		}
		k = b.sample
	}
	scores, ttfts := b.scores[:0], b.ttfts[:0]
	bestScore := 0.0
	for i, idx := range el[:k] {
		c := &s.Candidates[idx]
		est := c.Estimate(r, 1, load.Ignore{})
		score := b.comparator.Score(&c.Load, est, r.InputTokens)
		scores = append(scores, score)
		ttfts = append(ttfts, est.TTFT)
		if i == 0 || score < bestScore {
			bestScore = score
		}
	}
	b.scores, b.ttfts = scores, ttfts
	// Reservoir tie-break over the candidates within the tolerance of the best: the k-th
	// tied candidate wins with probability 1/k.
	best, bestAt, ties := -1, 0, 0
	for i, idx := range el[:k] {
		if scores[i] > bestScore+b.tie || (b.tie == 0 && scores[i] != bestScore) {
			continue
		}
		ties++
		if ties == 1 || b.rng.IntN(ties) == 0 {
			best, bestAt = int(idx), i
		}
	}
	d := Selected(best, 1)
	d.TTFT = ttfts[bestAt]
	return d
}
