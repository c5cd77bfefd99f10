package dispatch

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard/switchyard/gateway/lb"
)

// warmCell is a correction cell that has learned ratio observed/estimated from enough
// observations to apply it.
func warmCell(ratio float64) *ttftCell {
	cell := newTTFTCell(nil)
	for range TTFTCorrectionWarmup {
		cell.observe(0, 100*time.Millisecond, time.Duration(ratio*float64(100*time.Millisecond)), false)
	}
	return cell
}

// scatteredCell is a correction cell with enough observations to be warm but no typical
// ratio: its answers were all far faster than estimated (cache hits, which no correction
// applies to).
func scatteredCell() *ttftCell {
	cell := newTTFTCell(nil)
	for i := range 3 * TTFTCorrectionWarmup {
		cell.observe(0, 100*time.Millisecond, time.Duration(1+i%5)*time.Millisecond, false)
	}
	return cell
}

// A cluster whose correction is not warm takes its warm peers' (geometric mean) factor,
// so that it does not look slower than they only for lack of observations; with no warm
// peer nothing is corrected, and turning the correction off clears every factor.
func TestColdClustersTakeTheirPeersCorrection(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cells []*ttftCell
		want  []float64
	}{
		{"one warm, one cold", []*ttftCell{warmCell(0.5), newTTFTCell(nil)}, []float64{0.5, 0.5}},
		{"two warm, one cold", []*ttftCell{warmCell(0.5), warmCell(2), newTTFTCell(nil)}, []float64{0.5, 2, 1}},
		{"all cold", []*ttftCell{newTTFTCell(nil), newTTFTCell(nil)}, []float64{0, 0}},
		// Its observations scattered over ratios no correction fits (every bin below
		// MinTTFTCorrection/2 or no bin holding enough of them): as unknown as a new one.
		{"warm without a typical ratio", []*ttftCell{warmCell(0.5), scatteredCell()}, []float64{0.5, 0.5}},
		{"cold after a reset", []*ttftCell{warmCell(0.5), func() *ttftCell { c := warmCell(2); c.reset(); return c }()}, []float64{0.5, 0.5}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Scheduler{cells: tt.cells}
			snap := &lb.Snapshot{Candidates: make([]lb.Candidate, len(tt.cells))}
			s.correct(snap, true)
			for i, want := range tt.want {
				if got := snap.Candidates[i].Correction; math.Abs(got-want) > 0.05*want || (want == 0) != (got == 0) {
					t.Errorf("candidate %d: correction %v, want %v", i, got, want)
				}
			}
			s.correct(snap, false)
			for i := range snap.Candidates {
				if got := snap.Candidates[i].Correction; got != 0 {
					t.Errorf("off: candidate %d keeps correction %v", i, got)
				}
			}
		})
	}
}

// The snapshot's corrections are read again for the clusters whose factors changed: a
// factor learned after the last decision reaches the next one, and a cell that changed
// many times is read once.
func TestCorrectionsFollowTheirCells(t *testing.T) {
	s := &Scheduler{}
	s.cells = []*ttftCell{newTTFTCell(&s.cellQueue), newTTFTCell(&s.cellQueue)}
	for i, c := range s.cells {
		c.idx = i
	}
	snap := &lb.Snapshot{Candidates: make([]lb.Candidate, 2)}
	s.correct(snap, true)
	if got := snap.Candidates[0].Correction; got != 0 {
		t.Fatalf("cold: correction %v, want none", got)
	}
	for k := range 3 * TTFTCorrectionWarmup {
		s.cells[0].observe(0, 100*time.Millisecond, time.Duration(200+k%3)*time.Millisecond, false)
	}
	if got := len(s.cellQueue.cells); got != 1 {
		t.Fatalf("%d cells queued after one cell's factor changed, want 1", got)
	}
	s.correct(snap, true)
	for i, c := range snap.Candidates { // the cold one takes its warm peer's factor
		if math.Abs(c.Correction-2) > 0.1 {
			t.Errorf("after warming: candidate %d correction %v, want about 2", i, c.Correction)
		}
	}
	s.cells[0].reset()
	s.correct(snap, true)
	for i, c := range snap.Candidates {
		if c.Correction != 0 {
			t.Errorf("after a reset: candidate %d correction %v, want none", i, c.Correction)
		}
	}
}
