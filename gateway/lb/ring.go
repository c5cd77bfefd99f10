package lb

import (
	"cmp"
	"slices"

	"github.com/zeebo/xxh3"
)

// ring is the consistent-hash ring of a wait-and-widen instance: virtualNodes points per
// candidate cluster at xxh3(prefix ‖ tagged cluster_id ‖ tagged virtual_node), sorted. It
// is rebuilt when the ordered candidate list (or the routing target) changes.
type ring struct {
	points     []ringPoint
	prefix     []byte
	members    uint64
	routingKey string
	model      string
	built      bool
}

type ringPoint struct {
	hash uint64
	idx  int32
}

// current reports whether the ring was built for s.
func (r *ring) current(s *Snapshot) bool {
	return r.built && s.sameMembership(r.members, r.routingKey, r.model)
}

// build (re)computes the ring for s.
func (r *ring) build(s *Snapshot, seed string, virtualNodes int) {
	r.prefix = appendPrefix(r.prefix[:0], seed, s.RoutingKey, s.Model)
	r.points = r.points[:0]
	buf := make([]byte, 0, len(r.prefix)+128)
	for i := range s.Candidates {
		base := appendTagged(append(buf[:0], r.prefix...), "cluster_id", s.Candidates[i].ClusterID)
		for v := range virtualNodes {
			b := appendTaggedUint64(base, "virtual_node", uint64(v))
			r.points = append(r.points, ringPoint{hash: xxh3.Hash(b), idx: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})
	r.members, r.routingKey, r.model, r.built = s.membership, s.RoutingKey, s.Model, true
}

// walk appends to out the first count distinct candidates clockwise from the first point at
// or after h (wrapping around): the affinity group in ring order.
func (r *ring) walk(h uint64, count int, out []int32) []int32 {
	n := len(r.points)
	if n == 0 || count <= 0 {
		return out
	}
	start, _ := slices.BinarySearchFunc(r.points, h, func(p ringPoint, h uint64) int { return cmp.Compare(p.hash, h) })
	base := len(out)
	for k := 0; k < n && len(out)-base < count; k++ {
		idx := r.points[(start+k)%n].idx
		if !slices.Contains(out[base:], idx) {
			out = append(out, idx)
		}
	}
	return out
}
