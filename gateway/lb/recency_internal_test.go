package lb

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The recency list keeps the same order as a plain slice model under any mix of growing,
// touching, unlinking and pushing back, walked from the front and from the back.
func TestRecencyMatchesSliceModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		r := newRecency()
		var model []int32 // most recently used first
		out := map[int32]bool{}
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
			case op == 0 || len(r.links) == 0:
				i := r.grow()
				r.pushFront(i)
				model = append([]int32{i}, model...)
			case op == 1 && len(model) > 0:
				i := model[rapid.IntRange(0, len(model)-1).Draw(t, "touch")]
				r.touch(i)
				model = append([]int32{i}, slices.DeleteFunc(model, func(v int32) bool { return v == i })...)
			case op == 2 && len(model) > 0:
				i := model[rapid.IntRange(0, len(model)-1).Draw(t, "unlink")]
				r.unlink(i)
				model = slices.DeleteFunc(model, func(v int32) bool { return v == i })
				out[i] = true
			case op == 3 && len(out) > 0:
				for i := range out { // any slot taken out goes back in front
					r.pushFront(i)
					model = append([]int32{i}, model...)
					delete(out, i)
					break
				}
			}
			var fwd, back []int32
			for i := r.head; i >= 0; i = r.links[i].next {
				fwd = append(fwd, i)
			}
			for i := r.tail; i >= 0; i = r.links[i].prev {
				back = append(back, i)
			}
			slices.Reverse(back)
			if !slices.Equal(fwd, model) || !slices.Equal(back, model) {
				t.Fatalf("front to back %v, back to front %v, want %v", fwd, back, model)
			}
		}
	})
}
