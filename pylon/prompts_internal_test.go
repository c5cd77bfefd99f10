package pylon

import (
	"testing"
	"testing/synctest"
	"time"
)

// The table records the first request of a key, hands later ones its done channel, and
// forgets the key on release; release is idempotent, a full table records nothing, and a
// nil table (prompt wait off) never makes anyone wait.
func TestPromptTable(t *testing.T) {
	t.Parallel()
	var off *promptTable
	if turn, done, _ := off.enter([]byte("k"), 10, true); turn != nil || done != nil {
		t.Fatal("a nil table recorded or waited")
	}
	tab := newPromptTable(time.Second)
	if newPromptTable(0) != nil {
		t.Error("wait 0 made a table")
	}
	first, done, _ := tab.enter([]byte("k"), 1000, true)
	if first == nil || done != nil {
		t.Fatalf("first enter: turn %v, done %v; want a turn and no wait", first, done)
	}
	second, wait, ahead := tab.enter([]byte("k"), 1200, true)
	if second != nil || wait == nil || ahead != 1000 {
		t.Fatalf("second enter: turn %v, done %v, ahead %d; want a wait behind 1000 tokens and no turn", second, wait, ahead)
	}
	if b, bw, _ := tab.enter([]byte("buffered"), 10, false); b != nil || bw != nil || tab.size() != 1 {
		t.Fatal("a request that is not recorded was recorded")
	}
	other, _, _ := tab.enter([]byte("other"), 5, true)
	if other == nil || tab.size() != 2 {
		t.Fatalf("another key: turn %v, size %d", other, tab.size())
	}
	select {
	case <-wait:
		t.Fatal("done before release")
	default:
	}
	first.release()
	first.release() // idempotent: no double close
	select {
	case <-wait:
	default:
		t.Fatal("release did not close done")
	}
	if tab.size() != 1 {
		t.Errorf("size %d after release, want 1", tab.size())
	}
	third, wait3, _ := tab.enter([]byte("k"), 1300, true)
	if third == nil || wait3 != nil {
		t.Fatal("the key was not forgotten on release")
	}
	third.release()
	other.release()
	var none *promptTurn
	none.release() // nil-safe

	tab.max = 1
	a, _, _ := tab.enter([]byte("a"), 1, true)
	if b, bw, _ := tab.enter([]byte("b"), 1, true); b != nil || bw != nil {
		t.Error("a full table recorded a new key or made it wait")
	}
	a.release()
}

// await returns true when the prompt is released in time and false once the wait bound
// passes.
func TestPromptTableAwait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tab := newPromptTable(time.Second)
		turn, _, _ := tab.enter([]byte("k"), 1, true)
		_, done, _ := tab.enter([]byte("k"), 2, true)
		go func() {
			time.Sleep(300 * time.Millisecond)
			turn.release()
		}()
		start := time.Now()
		if !tab.await(done) || time.Since(start) != 300*time.Millisecond {
			t.Errorf("await: released after %v, want true at 300ms", time.Since(start))
		}
		stuck, _, _ := tab.enter([]byte("s"), 1, true)
		_, sdone, _ := tab.enter([]byte("s"), 2, true)
		start = time.Now()
		if tab.await(sdone) || time.Since(start) != time.Second {
			t.Errorf("await of a stuck prompt returned after %v, want false at the 1s bound", time.Since(start))
		}
		stuck.release()
	})
}
