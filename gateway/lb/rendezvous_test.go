package lb_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/gateway/lb"
)

// LeadOrder holds every backend once, in the same order whatever order it is given them
// in, and ranks first the backend KeyedBackend picks for the cluster id as key; clusters
// get different leads.
func TestLeadOrder(t *testing.T) {
	t.Parallel()
	none := func(string) bool { return false }
	leads := map[string]bool{}
	for c := range 16 {
		cluster := fmt.Sprintf("cluster-%d", c)
		ids := []string{"b1", "b2", "b3", "b4"}
		order := lb.LeadOrder(nil, ids, cluster)
		if got := lb.LeadOrder(nil, []string{"b4", "b2", "b1", "b3"}, cluster); !slices.Equal(got, order) {
			t.Errorf("%s: %v, then %v from another order", cluster, order, got)
		}
		if sorted := slices.Sorted(slices.Values(order)); !slices.Equal(sorted, ids) {
			t.Errorf("%s: %v is not the backends once each", cluster, order)
		}
		if first, _ := lb.KeyedBackend(ids, cluster, none, none); order[0] != first {
			t.Errorf("%s: lead %s, KeyedBackend ranks %s first", cluster, order[0], first)
		}
		leads[order[0]] = true
	}
	if len(leads) < 2 {
		t.Errorf("16 clusters all led by %v", leads)
	}
}
