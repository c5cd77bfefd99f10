package runner

import (
	"fmt"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/bench/scenario"
)

// A replica comparison runs every algorithm once per count, an algorithm's counts in a
// row, each on a scenario copy with its own stargates.count and labelled NAME@N; the
// scenario itself is left as it was. Without counts: one run per algorithm, as named.
func TestPlanReplicas(t *testing.T) {
	t.Parallel()
	three := 3
	s := &scenario.Scenario{Name: "s", Stargates: scenario.Stargates{Count: &three}}
	algs := []scenario.Algorithm{{Name: "a"}, {Name: "b"}}

	var got []string
	for _, p := range plan(s, algs, []int{1, 4}) {
		got = append(got, fmt.Sprintf("%s %s %d %d", p.a.Name, p.base, p.gateways, p.s.GatewayCount()))
	}
	want := []string{"a@1 a 1 1", "a@4 a 4 4", "b@1 b 1 1", "b@4 b 4 4"}
	if !slices.Equal(got, want) {
		t.Errorf("plan = %q, want %q", got, want)
	}
	if s.GatewayCount() != 3 || algs[0].Name != "a" {
		t.Errorf("the scenario changed: %d gateways, first algorithm %q", s.GatewayCount(), algs[0].Name)
	}

	got = got[:0]
	for _, p := range plan(s, algs, nil) {
		got = append(got, fmt.Sprintf("%s %s %d %d", p.a.Name, p.base, p.gateways, p.s.GatewayCount()))
	}
	if want := []string{"a  0 3", "b  0 3"}; !slices.Equal(got, want) {
		t.Errorf("plan without counts = %q, want %q", got, want)
	}
}
