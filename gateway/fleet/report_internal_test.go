package fleet

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
)

// Load reports are latest-wins while one waits for the actor: a newer report of the same
// model replaces it, an older one is dropped, another model's goes on its own, and the
// actor takes the newest.
func TestReportSlotKeepsTheNewest(t *testing.T) {
	var b Backend
	at := time.Unix(100, 0)
	rep := func(model string, seq uint64, observedMs int64, queued uint64) *wire.LoadReport {
		return &wire.LoadReport{Model: model, DispatchSeq: seq, Load: load.Load{ObservedAtUnixMilli: observedMs, QueuedInputTokens: queued}}
	}
	steps := []struct {
		r    *wire.LoadReport
		want int
	}{
		{rep("m", 1, 10, 100), reportNotify},
		{rep("m", 3, 30, 300), reportMerged},
		{rep("m", 2, 20, 200), reportMerged}, // older: dropped
		{rep("m", 3, 25, 250), reportMerged}, // same seq, older observation: dropped
		{rep("n", 9, 90, 900), reportAlone},
	}
	for i, s := range steps {
		if got := b.offerReport(s.r, at.Add(time.Duration(i)*time.Second)); got != s.want {
			t.Fatalf("step %d: offer = %d, want %d", i, got, s.want)
		}
	}
	m, ok := b.takeReport()
	if !ok || m.report.Model != "m" || m.report.DispatchSeq != 3 || m.report.Load.QueuedInputTokens != 300 || !m.at.Equal(at.Add(time.Second)) {
		t.Fatalf("took %+v (%v), want the seq-3 report received at +1s", m, ok)
	}
	if _, ok := b.takeReport(); ok {
		t.Fatal("the slot must be empty after a take")
	}
	if got := b.offerReport(rep("m", 4, 40, 400), at); got != reportNotify {
		t.Fatalf("after a take the next report must notify the actor, got %d", got)
	}
}

// Within a generation the snapshot build orders reports taken in the same millisecond;
// a report of a newer generation (whose builds start again at 1) replaces one of an
// older generation, never the other way round.
func TestReportSlotOrdersBuildsAndGenerations(t *testing.T) {
	var b Backend
	at := time.Unix(100, 0)
	rep := func(gen, build uint64) *wire.LoadReport {
		return &wire.LoadReport{Model: "m", Generation: gen, Build: build, DispatchSeq: 4, Load: load.Load{ObservedAtUnixMilli: 10}}
	}
	for i, r := range []*wire.LoadReport{rep(1, 5), rep(1, 4), rep(1, 6), rep(2, 1), rep(1, 9)} {
		b.offerReport(r, at.Add(time.Duration(i)*time.Second))
	}
	m, ok := b.takeReport()
	if !ok || m.report.Generation != 2 || m.report.Build != 1 || !m.at.Equal(at.Add(3*time.Second)) {
		t.Fatalf("took generation %d build %d received at %v (%v), want generation 2 build 1 at +3s", m.report.Generation, m.report.Build, m.at, ok)
	}
	b.offerReport(rep(3, 2), at)
	b.offerReport(rep(3, 1), at) // same generation, earlier build, same millisecond
	if m, _ := b.takeReport(); m.report.Build != 2 {
		t.Errorf("an earlier build replaced build 2: took build %d", m.report.Build)
	}
}
