package gateway

import (
	"math/rand/v2"
	"testing"
)

// Replicas started with the same --seed draw different random sequences (their gateway
// ids differ), so that power-of-n on each samples other candidates than its peers at the
// same moment; a replica with a fixed id and seed draws the same sequence on every start.
func TestReplicaSeedDiffersByReplica(t *testing.T) {
	draws := func(seed uint64) []int {
		r := rand.New(rand.NewPCG(seed, 1))
		out := make([]int, 32)
		for i := range out {
			out[i] = r.IntN(64)
		}
		return out
	}
	same := func(a, b []int) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	a, b := replicaSeed(0, "gw-a"), replicaSeed(0, "gw-b")
	if a == b || same(draws(a), draws(b)) {
		t.Errorf("replicas gw-a and gw-b with seed 0 draw the same sequence (seeds %d, %d)", a, b)
	}
	first, again := replicaSeed(7, "gw-a"), replicaSeed(7, "gw-a")
	if first != again || first == a {
		t.Error("the seed is not a function of --seed and the gateway id")
	}
}
