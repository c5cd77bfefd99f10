package lb

import "time"

// roundRobin cycles over the candidates in snapshot order with a per-instance cursor: a
// decision takes the first non-excluded candidate at or after the cursor (wrapping) and
// moves the cursor just past it. Excluded candidates are skipped in place, so a decision
// looks at most len(r.Excluded)+1 candidates (cluster ids are distinct) and copies
// nothing; with a fixed exclusion list every other candidate is taken in turn.
type roundRobin struct{ next uint64 }

func (b *roundRobin) Decide(s *Snapshot, r *Request, _ time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	n := len(s.Candidates)
	i := int(b.next % uint64(n)) //nolint:gosec // the remainder is below n, an int
	for range n {
		if !r.IsExcluded(s.Candidates[i].ClusterID) {
			b.next = uint64(i) + 1
			return Selected(i, 1)
		}
		i++
		if i == n {
			i = 0
		}
	}
	return Unavailable(ReasonAllExcluded)
}

// random picks uniformly among the non-excluded candidates: uniform draws over the whole
// snapshot, rejecting excluded ones (a short list), at most maxDraws(1) of them, then one
// uniform pick among the counted eligible candidates. Either way the pick is uniform over
// the eligible candidates; the scan happens only when nearly all of them are excluded.
type random struct{ rng Rand }

func (b *random) Decide(s *Snapshot, r *Request, _ time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	n := len(s.Candidates)
	if len(r.Excluded) == 0 {
		return Selected(b.rng.IntN(n), 1)
	}
	for range maxDraws(1) {
		if i := b.rng.IntN(n); !r.IsExcluded(s.Candidates[i].ClusterID) {
			return Selected(i, 1)
		}
	}
	eligible := countEligible(s, r)
	if eligible == 0 {
		return Unavailable(ReasonAllExcluded)
	}
	return Selected(nthEligible(s, r, b.rng.IntN(eligible)), 1)
}

// maxDraws bounds the rejection-sampling draws of a sample of k distinct candidates before
// a decision falls back to scanning the snapshot. Each draw is rejected only when it hits
// an excluded or an already drawn candidate, so the bound is reached only when those are a
// large share of a small snapshot, where the scan is cheap.
func maxDraws(k int) int { return 4*k + 16 }

// countEligible is the number of non-excluded candidates of s.
func countEligible(s *Snapshot, r *Request) int {
	if len(r.Excluded) == 0 {
		return len(s.Candidates)
	}
	eligible := 0
	for i := range s.Candidates {
		if !r.IsExcluded(s.Candidates[i].ClusterID) {
			eligible++
		}
	}
	return eligible
}

// nthEligible is the index of the k-th (0-based) non-excluded candidate; it must exist.
func nthEligible(s *Snapshot, r *Request, k int) int {
	if len(r.Excluded) == 0 {
		return k
	}
	for i := range s.Candidates {
		if r.IsExcluded(s.Candidates[i].ClusterID) {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	return -1
}
