package lb

import (
	"slices"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// powerOfN samples sample_count distinct non-excluded candidates and takes the best by its
// comparator, ties broken uniformly at random. With the ttft comparator, estimates within
// the tie tolerance of the best count as ties, and go to the least busy of them first. It never waits.
//
// The sample is drawn without scanning the snapshot (draw): uniform indices, rejecting
// excluded and already drawn ones, so a decision costs O(sample_count × (sample_count +
// len(r.Excluded))) whatever the fleet size. Only when the snapshot has hardly more
// eligible candidates than sample_count does it list them (scan).
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
	el, k := b.draw(s, r)
	if el == nil {
		el, k = b.scan(s, r)
		if k == 0 {
			return Unavailable(ReasonAllExcluded)
		}
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
	// tied candidate wins with probability 1/k. With a tolerance, the near-ties go to the
	// least busy of them first (as wait-and-widen's), the reservoir breaking equal load.
	best, bestAt, ties := -1, 0, 0
	for i, idx := range el[:k] {
		if scores[i] > bestScore+b.tie || (b.tie == 0 && scores[i] != bestScore) {
			continue
		}
		if best >= 0 && b.tie > 0 {
			cur, cand := &s.Candidates[best].Load, &s.Candidates[idx].Load
			if busier(cand, cur) {
				continue
			}
			if busier(cur, cand) {
				best, bestAt, ties = int(idx), i, 1
				continue
			}
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

// draw samples b.sample distinct non-excluded candidate indices by rejection: each accepted
// index is uniform over the candidates not yet drawn and not excluded, so the sample has
// the distribution of a partial Fisher–Yates shuffle of the eligible candidates. It returns
// nil when the snapshot may have no more eligible candidates than the sample (every one is
// then compared, see scan) or when maxDraws draws did not complete the sample (then mostly
// excluded: scan decides, with fresh draws, so the sample stays uniform).
func (b *powerOfN) draw(s *Snapshot, r *Request) ([]int32, int) {
	n := len(s.Candidates)
	if n-len(r.Excluded) <= b.sample {
		return nil, 0
	}
	el := b.eligible[:0]
	for range maxDraws(b.sample) {
		i := int32(b.rng.IntN(n)) //nolint:gosec // below n, a snapshot index
		if slices.Contains(el, i) || r.IsExcluded(s.Candidates[i].ClusterID) {
			continue
		}
		if el = append(el, i); len(el) == b.sample {
			b.eligible = el
			return el, len(el)
		}
	}
	b.eligible = el
	return nil, 0
}

// scan lists the non-excluded candidates and, when there are more than b.sample, shuffles
// a uniform sample of b.sample of them to the front (partial Fisher–Yates). It returns the
// list and how many of its leading entries to compare (0: every candidate is excluded).
func (b *powerOfN) scan(s *Snapshot, r *Request) ([]int32, int) {
	el := b.eligible[:0]
	for i := range s.Candidates {
		if !r.IsExcluded(s.Candidates[i].ClusterID) {
			el = append(el, int32(i))
		}
	}
	b.eligible = el
	k := len(el)
	if k > b.sample {
		for i := range b.sample {
			j := i + b.rng.IntN(len(el)-i)
			el[i], el[j] = el[j], el[i]
		}
		k = b.sample
	}
	return el, k
}
