package pylon

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/pylon/stats"
)

// A panic in a generation answers the caller of the failing message at once (unavailable,
// failed); the admission queued behind it is decided by the restarted instance without
// waiting; that instance is a new value whose aggregate starts from the current sources
// (the engine's last concurrency report, the input throughput last published) and tracks
// none of the failed instance's requests.
func TestGenerationPanicAnswersAtOnceAndRestartsFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, stop := newGenRig(t)
		defer stop()
		root := r.root
		admit := func(id string, tokens uint64) (reply, bool) {
			ch := make(chan reply, 1)
			return r.g.call(root, &requestAdmitted{id: id, inputTokens: tokens, reply: ch}, ch)
		}
		u := stats.Update{Generation: 1, Concurrency: &stats.ConcurrencyReport{MaxEngineConcurrency: 7}}
		r.g.remember(&u, time.Now)
		root.Send(r.g.pid, &updated{update: u})
		if got, ok := admit("in-flight", 100); !ok || !got.decision.Admit() {
			t.Fatalf("admission before the failure: %+v ok %v", got, ok)
		}
		before := r.g.snapshot(root)
		if before.load.RunningRequests != 1 || before.load.MaxEngineConcurrency != 7 {
			t.Fatalf("before the failure: %+v", before.load)
		}
		failed := r.g.life.current

		var queued reply
		var queuedOK bool
		var queuedAt time.Time
		queuedDone := make(chan struct{})
		hook := faultHook(func(_ string, msg any) {
			if m, ok := msg.(*requestAdmitted); ok && m.id == "boom" {
				go func() { // an admission arriving while the failing message runs: queued
					defer close(queuedDone)
					queued, queuedOK = admit("queued", 10)
					queuedAt = time.Now()
				}()
				synctest.Wait()
				panic("injected fault")
			}
		})
		r.faults.Store(&hook)
		start := time.Now()
		got, ok := admit("boom", 5)
		answered := time.Since(start)
		r.faults.Store(nil)
		if !ok || !got.unavailable || !got.failed {
			t.Errorf("the failing admission: %+v ok %v, want unavailable and failed", got, ok)
		}
		<-queuedDone
		if !queuedOK || !queued.decision.Admit() {
			t.Errorf("the admission queued behind the failure: %+v ok %v, want admitted by the new instance", queued, queuedOK)
		}
		next, ok := admit("next", 20)
		recovered := time.Since(start)
		if !ok || !next.decision.Admit() {
			t.Errorf("the next admission: %+v ok %v, want admitted", next, ok)
		}
		if answered != 0 || queuedAt.Sub(start) != 0 || recovered != 0 {
			t.Errorf("failure answered after %v, queued admission after %v, next admitted after %v: want all at once",
				answered, queuedAt.Sub(start), recovered)
		}
		t.Logf("virtual time: 503 after %v, queued admission decided after %v, next admitted after %v", answered, queuedAt.Sub(start), recovered)

		l := r.g.life
		if l.current == failed || l.incarnations != 2 || l.failures != 1 {
			t.Errorf("after the failure: same instance %v, incarnations %d, failures %d; want a new instance, 2, 1",
				l.current == failed, l.incarnations, l.failures)
		}
		after := r.g.snapshot(root)
		if after.load.RunningRequests != 2 || after.load.QueuedInputTokens != 30 {
			t.Errorf("after the restart: running %d, queued tokens %d; want only the new instance's 2 requests (30 tokens)",
				after.load.RunningRequests, after.load.QueuedInputTokens)
		}
		if after.load.MaxEngineConcurrency != 7 || after.load.InputTPS != before.load.InputTPS || after.build <= before.build {
			t.Errorf("after the restart: concurrency %d, input TPS %v, build %d; want 7, %v, above %d",
				after.load.MaxEngineConcurrency, after.load.InputTPS, after.build, before.load.InputTPS, before.build)
		}
		// The failed instance's request runs on; its milestones change nothing now.
		ch := make(chan reply, 1)
		if _, ok := r.g.call(root, &responseStarted{id: "in-flight", reply: ch}, ch); !ok {
			t.Fatal("the restarted generation did not answer")
		}
		if s := r.g.snapshot(root); s.phases[stats.InputProcessing].requests != 0 {
			t.Errorf("a request of the failed instance counted by the new one: %+v", s.phases)
		}
		if r.changes.Load() == 0 {
			t.Error("the registrars were not told of the restart")
		}
	})
}

// A retired generation stays retired across a restart: it keeps answering unavailable
// (not failed) and stops at the end of its grace, and is not replaced.
func TestRetiredGenerationStaysRetiredAcrossARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, stop := newGenRig(t)
		defer stop()
		replaced := 0
		r.g.life.replace = func(*generation) { replaced++ }
		root := r.root
		root.Send(r.g.pid, &retire{})
		hook := faultHook(func(_ string, msg any) {
			if _, ok := msg.(*flush); ok {
				panic("injected fault")
			}
		})
		r.faults.Store(&hook)
		ch := make(chan reply, 1)
		if got, _ := r.g.call(root, &flush{reply: ch}, ch); !got.failed {
			t.Fatalf("the failing flush: %+v, want failed", got)
		}
		r.faults.Store(nil)
		if got, ok := r.g.call(root, &requestAdmitted{id: "late", reply: ch}, ch); !ok || !got.unavailable || got.failed {
			t.Errorf("admission to the restarted retired generation: %+v ok %v, want unavailable", got, ok)
		}
		select {
		case <-r.g.done:
			t.Fatal("stopped before the grace")
		default:
		}
		time.Sleep(RetireGrace + sweepInterval)
		select {
		case <-r.g.done:
		default:
			t.Fatal("the restarted retired generation did not stop after its grace")
		}
		if replaced != 0 {
			t.Error("a retired generation was replaced")
		}
	})
}
