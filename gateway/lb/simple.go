package lb

import "time"

// roundRobin cycles over the non-excluded candidates in snapshot order with a per-instance
// counter.
type roundRobin struct{ next uint64 }

func (b *roundRobin) Decide(s *Snapshot, r *Request, _ time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	eligible := len(s.Candidates)
	if len(r.Excluded) > 0 {
		eligible = 0
		for i := range s.Candidates {
			if !r.IsExcluded(s.Candidates[i].ClusterID) {
				eligible++
			}
		}
	}
	k := int(b.next % uint64(eligible)) //nolint:gosec // the remainder is below eligible, an int
	b.next++
	return Selected(nthEligible(s, r, k), 1)
}

// random picks uniformly among the non-excluded candidates.
type random struct{ rng Rand }

func (b *random) Decide(s *Snapshot, r *Request, _ time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	if len(r.Excluded) == 0 {
		return Selected(b.rng.IntN(len(s.Candidates)), 1)
	}
	eligible := 0
	for i := range s.Candidates {
		if !r.IsExcluded(s.Candidates[i].ClusterID) {
			eligible++
		}
	}
	return Selected(nthEligible(s, r, b.rng.IntN(eligible)), 1)
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
