package dispatch

import (
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/load"
)

// Within a cluster, the backend chosen for a request (round-robin or by its key) is one
// that has not failed for it, and one whose slot share is full only when every such
// backend's is; none is chosen only when every backend failed. Round-robin over backends
// with room visits each of them before any twice.
func TestPickBackendSkipsFullShares(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "backends")
		s := &Scheduler{backends: map[string]*backendState{}, clusters: map[string]*clusterInfo{}}
		info := &clusterInfo{next: rapid.Uint64Range(0, 20).Draw(t, "next")}
		full := map[string]bool{}
		var failed []string
		for i := range n {
			id := "b" + strconv.Itoa(i)
			share := rapid.Uint64Range(0, 3).Draw(t, "share"+id)
			own := rapid.Uint64Range(0, 3).Draw(t, "own"+id)
			s.backends[id] = &backendState{view: BackendView{
				ID: id, SlotShare: share,
				Load: load.Load{OutputGenerationRequests: own, RunningRequests: own, MaxEngineConcurrency: 64},
			}}
			full[id] = share > 0 && own >= share
			info.backends = append(info.backends, id)
			if rapid.Bool().Draw(t, "failed"+id) {
				failed = append(failed, id)
			}
		}
		s.clusters["c"] = info
		var key string
		if rapid.Bool().Draw(t, "keyed") {
			key = "k" + strconv.Itoa(rapid.IntRange(0, 50).Draw(t, "key"))
		}
		roomLeft := slices.ContainsFunc(info.backends, func(id string) bool { return !slices.Contains(failed, id) && !full[id] })
		rounds := 1
		if key == "" {
			rounds = 2 * n
		}
		var picked []string
		for range rounds {
			p := &Pending{FailedBackends: failed}
			p.Req.AffinityKey = key
			id, ok := s.pickBackend("c", p)
			if ok != (len(failed) < n) {
				t.Fatalf("picked %q, %v with %d of %d failed", id, ok, len(failed), n)
			}
			if !ok {
				return
			}
			if slices.Contains(failed, id) {
				t.Fatalf("picked %q, which failed for the request", id)
			}
			if full[id] && roomLeft {
				t.Fatalf("picked %q, whose share is full, while another backend has room", id)
			}
			picked = append(picked, id)
		}
		if key == "" && roomLeft {
			var room []string
			for _, id := range info.backends {
				if !slices.Contains(failed, id) && !full[id] {
					room = append(room, id)
				}
			}
			first := picked[:len(room)]
			slices.Sort(first)
			if !slices.Equal(first, room) {
				t.Fatalf("round-robin's first %d picks %v, want each of %v once", len(room), picked[:len(room)], room)
			}
		}
	})
}
