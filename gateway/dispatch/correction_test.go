package dispatch_test

import (
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// observe feeds c n observations of the ratios in pattern, in turn, on a 100 ms estimate.
func observe(c *dispatch.TTFTCorrection, n int, pattern ...float64) {
	const est = 100 * time.Millisecond
	for i := range n {
		c.Observe(est, time.Duration(float64(est)*pattern[i%len(pattern)]))
	}
}

func TestTTFTCorrectionLearnsTheTypicalRatio(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		n       int
		pattern []float64
		want    float64 // the factor, within 3 %
	}{
		{"no observation corrects nothing", 0, []float64{2}, 1},
		{"before the warm-up nothing is corrected", dispatch.TTFTCorrectionWarmup - 1, []float64{2}, 1},
		{"a constant ratio is learned once warm", dispatch.TTFTCorrectionWarmup, []float64{2}, 2},
		{"accurate estimates stay uncorrected", 50, []float64{1.00, 1.01, 0.99}, 1},
		{"a cluster 3× slower than estimated", 50, []float64{3}, 3},
		{"noise around a ratio gives its centre", 60, []float64{1.45, 1.5, 1.55}, 1.5},
		{"above the bound the factor is MaxTTFTCorrection", 50, []float64{10}, dispatch.MaxTTFTCorrection},
		{"below the bound the factor is MinTTFTCorrection", 50, []float64{0.3}, dispatch.MinTTFTCorrection},
		{"far faster than estimated is taken for cached answers", 50, []float64{0.1}, 1},
		// A prefix-reusing workload: 40 % of the answers come from the engine's cache in
		// 2–8 % of the estimated time, the rest as estimated. A mean or a median would pull
		// the factor between the two populations; the typical ratio stays 1.
		{"cached answers do not drag accurate estimates", 100, []float64{1, 0.03, 1, 0.05, 1.01, 0.99, 0.08, 1, 0.02, 1}, 1},
		// Cached answers in under 1/64 of the estimate all fall into the lowest bin, and
		// here they are the majority: still no correction's ratio.
		{"a majority of cached answers is no correction", 100, []float64{0.01, 0.012, 0.01, 1, 1.01, 0.011, 1}, 1},
		// Two even populations far apart and no typical ratio among them either: the
		// densest holds the larger share.
		{"the larger of two populations wins", 100, []float64{2, 2, 2, 0.05, 0.2}, 2},
		{"without a typical ratio nothing is corrected", 120, []float64{0.02, 0.1, 0.4, 1, 3, 12}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c dispatch.TTFTCorrection
			observe(&c, tt.n, tt.pattern...)
			if got := c.Factor(); math.Abs(got/tt.want-1) > 0.03 {
				t.Errorf("Factor() = %.3f after %d observations of %v, want %.3f", got, tt.n, tt.pattern, tt.want)
			}
			if got := c.Observations(); got != tt.n {
				t.Errorf("Observations() = %d, want %d", got, tt.n)
			}
		})
	}
}

// Invalid observations (no estimate, no first byte) are not learned from.
func TestTTFTCorrectionIgnoresInvalidObservations(t *testing.T) {
	t.Parallel()
	var c dispatch.TTFTCorrection
	for _, o := range [][2]time.Duration{{0, time.Second}, {-time.Second, time.Second}, {time.Second, 0}, {time.Second, -1}} {
		c.Observe(o[0], o[1])
	}
	if c.Observations() != 0 || c.Factor() != 1 {
		t.Errorf("after invalid observations: %d observations, factor %v; want none and 1", c.Observations(), c.Factor())
	}
}

// A cluster whose ratio changes is corrected anew within about TTFTCorrectionMemory
// observations, in both directions.
func TestTTFTCorrectionAdaptsToAChange(t *testing.T) {
	t.Parallel()
	var c dispatch.TTFTCorrection
	observe(&c, 200, 1)
	observe(&c, dispatch.TTFTCorrectionMemory, 2.5)
	if got := c.Factor(); math.Abs(got/2.5-1) > 0.03 {
		t.Fatalf("%d observations after the cluster slowed down 2.5×: factor %.3f, want 2.5", dispatch.TTFTCorrectionMemory, got)
	}
	observe(&c, dispatch.TTFTCorrectionMemory, 1)
	if got := c.Factor(); math.Abs(got-1) > 0.03 {
		t.Errorf("%d observations after it recovered: factor %.3f, want 1", dispatch.TTFTCorrectionMemory, got)
	}
}

// The factor never leaves its bounds, whatever is observed.
func TestTTFTCorrectionStaysWithinBounds(t *testing.T) {
	t.Parallel()
	var c dispatch.TTFTCorrection
	for i := range 1000 {
		ratio := math.Exp(float64(i%97)/97*16 - 8) // e^-8 … e^8
		c.Observe(time.Millisecond, time.Duration(ratio*float64(time.Millisecond))+1)
		if f := c.Factor(); f < dispatch.MinTTFTCorrection || f > dispatch.MaxTTFTCorrection {
			t.Fatalf("observation %d (ratio %.3g): factor %v out of [%v, %v]", i, ratio, f, dispatch.MinTTFTCorrection, dispatch.MaxTTFTCorrection)
		}
	}
}

// BenchmarkTTFTCorrectionObserve is the learning cost of one observed attempt.
func BenchmarkTTFTCorrectionObserve(b *testing.B) {
	var c dispatch.TTFTCorrection
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		c.Observe(100*time.Millisecond, time.Duration(90+i%20)*time.Millisecond)
	}
}

// grantReleased routes one request of 1000 tokens with entry e and releases its
// reservation (the load stays as reported).
func (f *fixture) grantReleased(t *testing.T, e lbconfig.Entry) dispatch.Outcome {
	t.Helper()
	out := <-f.route(e, 1000, nil).Mailbox
	if out.Kind != dispatch.OutcomeGranted {
		t.Fatalf("outcome %+v, want granted", out)
	}
	f.sys.Root.Send(f.pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
	return out
}

// Two clusters report the same load, but "a" answers 3× slower than estimated: with
// ttft_correction the scheduler learns it from the observations and power-of-n stops
// choosing "a" (its corrected estimate, 300 ms, is no longer tied with b's 100 ms);
// without it the two stay tied and share the requests. The estimate of each grant is the
// decision's, corrected.
func TestTTFTCorrectionSteersAwayFromASlowCluster(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				l := load.Load{InputTPS: 10_000, MaxEngineConcurrency: 8}
				f.backend("a", 0, l, 0)
				f.backend("b", 0, l, 0)
				e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
				e.TTFTCorrection = on
				observed := map[string]time.Duration{"a": 300 * time.Millisecond, "b": 100 * time.Millisecond}
				for range 40 {
					out := f.grantReleased(t, e)
					if !out.HasEstimate {
						t.Fatalf("grant %+v has no estimate", out)
					}
					out.Feedback.Observe(observed[out.BackendID])
				}
				chosen := map[string]int{}
				for range 20 {
					out := f.grantReleased(t, e)
					chosen[out.BackendID]++
					want := 100 * time.Millisecond // 1000 tokens at 10 000 tokens/s, nothing queued
					if on && out.BackendID == "a" {
						want = 300 * time.Millisecond
					}
					if d := out.Estimate - want; d < -time.Millisecond || d > time.Millisecond {
						t.Errorf("grant to %s estimated %v, want %v", out.BackendID, out.Estimate, want)
					}
				}
				if on && chosen["a"] != 0 {
					t.Errorf("correction on: %v, want every request on b", chosen)
				}
				if !on && (chosen["a"] == 0 || chosen["b"] == 0) {
					t.Errorf("correction off: %v, want both chosen (tied estimates)", chosen)
				}
				if c := f.state(t).TTFTCorrections["a"]; math.Abs(c.Factor-3) > 0.1 {
					t.Errorf("a's correction %+v, want factor 3 (learned whether applied or not)", c)
				}
			})
		})
	}
}

// A correction belongs to the backends it learned about: a backend joining the cluster
// resets it, and observations of estimates made before the change are dropped.
func TestTTFTCorrectionResetsWhenTheClusterChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		l := load.Load{InputTPS: 10_000, MaxEngineConcurrency: 8}
		join := func(id string) {
			if f.seq[id] == nil {
				f.seq[id] = &atomic.Uint64{}
			}
			f.sys.Root.Send(f.pid, &dispatch.BackendChanged{View: dispatch.BackendView{
				ID: id, URL: "http://" + id, ClusterID: "c", Active: true, HasRTT: true, Load: l, Seq: f.seq[id], UpdatedAt: time.Now(),
			}})
		}
		join("c1")
		e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		var stale dispatch.Feedback
		for range 10 {
			out := f.grantReleased(t, e)
			out.Feedback.Observe(200 * time.Millisecond)
			stale = out.Feedback
		}
		if c := f.state(t).TTFTCorrections["c"]; math.Abs(c.Factor-2) > 0.05 || c.Observations != 10 {
			t.Fatalf("before the change: %+v, want factor 2 from 10 observations", c)
		}
		join("c2")
		// 1000 tokens at one backend's 10 000 tokens/s (one backend prefills the
		// request), uncorrected.
		if out := f.grantReleased(t, e); out.Estimate != 100*time.Millisecond {
			t.Errorf("after c2 joined: estimate %v, want the uncorrected 100ms", out.Estimate)
		}
		stale.Observe(time.Second)
		if c, ok := f.state(t).TTFTCorrections["c"]; ok {
			t.Errorf("after c2 joined and a stale observation: %+v, want no observations", c)
		}
	})
}

// Corrections do not leak across routing targets: each target's scheduler learns its own.
func TestTTFTCorrectionIsPerTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys, dir, _ := newDirectory(t, 0)
		l := load.Load{InputTPS: 10_000, MaxEngineConcurrency: 8}
		pids := []*actor.PID{dir.Ensure(dispatch.Target{Model: "m1"}), dir.Ensure(dispatch.Target{Model: "m2"})}
		for _, pid := range pids {
			sys.Root.Send(pid, view("b1", l))
		}
		e := lbconfig.DefaultEntry(lbconfig.PowerOfN)
		for range 10 {
			out, ok := answered(route(sys, pids[0], func(p *dispatch.Pending) { p.Entry, p.Req.InputTokens = &e, 1000 }))
			if !ok {
				t.Fatal("no answer")
			}
			sys.Root.Send(pids[0], dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
			out.Feedback.Observe(202 * time.Millisecond)
		}
		est := func(pid *actor.PID) time.Duration {
			out, _ := answered(route(sys, pid, func(p *dispatch.Pending) { p.Entry, p.Req.InputTokens = &e, 1000 }))
			sys.Root.Send(pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
			return out.Estimate
		}
		// RTT 1 ms + 100 ms prefill: m1 learned 2×, m2 nothing.
		if got := est(pids[1]); got != 101*time.Millisecond {
			t.Errorf("m2's estimate %v, want the uncorrected 101ms", got)
		}
		if got := est(pids[0]); got < 201*time.Millisecond || got > 203*time.Millisecond {
			t.Errorf("m1's estimate %v, want 202ms (corrected 2×)", got)
		}
	})
}

// A decision that discounted the chosen cluster's prefill for a prefix it expects cached
// (here an affinity group's requests without session memory, at
// cache_affinity_input_tokens_scale 0.1) reports that estimate, and its observation feeds
// the cluster's correction of discounted estimates, not its full-prefill correction: a
// cached request's error is the discount's and the engine's fixed cost, not the cluster's
// speed. Once warm, discounted estimates carry their own factor; full-prefill estimates
// stay as their own correction has it.
func TestTTFTCorrectionLearnsDiscountedEstimatesApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.backend("a", 0, load.Load{InputTPS: 10_000, MaxEngineConcurrency: 8}, 0)
		e := waw()
		e.SelectionCount, e.AffinityInputScale, e.SessionTTL = 1, 0.1, 0
		for i := range 10 {
			out := <-f.route(e, 1000, func(p *dispatch.Pending) { p.Req.AffinityKey = "k" }).Mailbox
			f.sys.Root.Send(f.pid, dispatch.Release{BackendID: out.BackendID, Seq: out.Seq})
			want := 10 * time.Millisecond // RTT 0 + 100 of 1000 tokens at 10k/s
			if i >= dispatch.TTFTCorrectionWarmup {
				want = 20 * time.Millisecond // the learned 2×
			}
			if out.Estimate != want {
				t.Fatalf("discounted estimate %d: %v, want %v", i, out.Estimate, want)
			}
			out.Feedback.Observe(20 * time.Millisecond)
		}
		c := f.state(t).TTFTCorrections["a"]
		if c.Observations != 0 || c.CachedObservations != 10 || math.Abs(c.CachedFactor-2) > 0.01 {
			t.Errorf("after 10 discounted estimates: %+v, want 10 cached observations, factor 2, and none of full prefills", c)
		}
		out := f.grantReleased(t, e) // no affinity key: a full-prefill estimate
		if out.Estimate != 100*time.Millisecond {
			t.Errorf("full-prefill estimate %v, want the uncorrected 100ms", out.Estimate)
		}
		out.Feedback.Observe(100 * time.Millisecond)
		if c := f.state(t).TTFTCorrections["a"]; c.Observations != 1 || c.CachedObservations != 10 {
			t.Errorf("after a full-prefill estimate: %+v, want 1 observation and the 10 cached ones", c)
		}
	})
}
