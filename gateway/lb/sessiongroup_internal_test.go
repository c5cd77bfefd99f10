package lb

import (
	"fmt"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// sessionGroup returns the k clusters ranked first for the session, best first, skipping
// excluded ones; it does not depend on the candidates' order, and adding a cluster changes
// only the groups of sessions that rank it among their first k.
func TestSessionGroup(t *testing.T) {
	t.Parallel()
	ids := func(s *Snapshot, g []int32) []string {
		out := make([]string, 0, len(g))
		for _, i := range g {
			out = append(out, s.Candidates[i].ClusterID)
		}
		return out
	}
	fleet := func(names ...string) *Snapshot {
		cs := make([]Candidate, len(names))
		for i, n := range names {
			cs[i] = Candidate{ClusterID: n}
		}
		return NewSnapshot("", "m", cs)
	}
	abcd, dcba := fleet("a", "b", "c", "d"), fleet("d", "c", "b", "a")
	five := fleet("a", "b", "c", "d", "e")
	moved := 0
	for i := range 64 {
		r := &Request{Session: xxh3.HashString(fmt.Sprint("conversation-", i))}
		g := ids(abcd, sessionGroup(nil, abcd, r, 2))
		if len(g) != 2 || g[0] == g[1] {
			t.Fatalf("group %v, want 2 distinct clusters", g)
		}
		want := slices.Clone([]string{"a", "b", "c", "d"})
		slices.SortFunc(want, func(x, y string) int {
			hx, hy := xxh3.HashStringSeed(x, r.Session), xxh3.HashStringSeed(y, r.Session)
			if hx > hy {
				return -1
			}
			return 1
		})
		if !slices.Equal(g, want[:2]) {
			t.Errorf("session %d: group %v, want the two ranked first %v", i, g, want[:2])
		}
		if other := ids(dcba, sessionGroup(nil, dcba, r, 2)); !slices.Equal(other, g) {
			t.Errorf("session %d: %v in one candidate order, %v in another", i, g, other)
		}
		r.Excluded = []string{g[0]}
		if ex := ids(abcd, sessionGroup(nil, abcd, r, 2)); slices.Contains(ex, g[0]) || ex[0] != g[1] {
			t.Errorf("session %d: %v with %s excluded", i, ex, g[0])
		}
		r.Excluded = nil
		if g5 := ids(five, sessionGroup(nil, five, r, 2)); !slices.Equal(g5, g) {
			if !slices.Contains(g5, "e") {
				t.Errorf("session %d: group %v → %v without the new cluster in it", i, g, g5)
			}
			moved++
		}
	}
	if moved == 0 || moved == 64 {
		t.Errorf("a fifth cluster changed %d of 64 groups, want some (about 40 %%)", moved)
	}
}
