package lb

import (
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// powerOfN samples sample_count distinct non-excluded candidates and takes the best by its
// comparator, ties broken uniformly at random (REFERENCE.md §1.3). It never waits.
type powerOfN struct {
	sample     int
	comparator load.Comparator
	rng        Rand
	eligible   []int32
}

func newPowerOfN(e lbconfig.Entry, rng Rand) Balancer {
	return &powerOfN{sample: e.SampleCount, comparator: e.Comparator, rng: rng}
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
	best, bestScore, ties := -1, 0.0, 0
	for _, idx := range el[:k] {
		c := &s.Candidates[idx]
		est := c.Load.Estimate(load.MillisOf(c.RTT), r.InputTokens, r.Priority, 1, load.Ignore{})
		score := b.comparator.Score(&c.Load, est, r.InputTokens)
		switch {
		case best < 0 || score < bestScore:
			best, bestScore, ties = int(idx), score, 1
		case score == bestScore:
			// Reservoir tie-break: the k-th equal candidate wins with probability 1/k.
			ties++
			if b.rng.IntN(ties) == 0 {
				best = int(idx)
			}
		}
	}
	return Selected(best, 1)
}
