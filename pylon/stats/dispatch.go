package stats

import (
	"math"

	"github.com/switchyard/switchyard/engines/load"
)

// Dispatch says who sent a request and in which order: From identifies the gateway (a
// comparable value, nil for a request not dispatched by a gateway) and Seq is the
// gateway's dispatch sequence to this pylon (x-switchyard-dispatch-seq).
//
// A gateway computes the queue it expects for its n-th dispatch from its view of the
// pylon (the last load report it received, which covers its dispatches up to the report's
// echo, the highest seq admitted then) plus its own later dispatches up to n−1. Yet a
// burst's dispatches leave the gateway within a millisecond or two on separate
// connections, and the pylon's goroutines take them up in any order (often the most
// recent first). Two things then set the gateway's expectation and the local queue apart,
// and admission would refuse requests for nothing but the arrival order:
//   - dispatches after n admitted before n: the gateway could not count them;
//   - dispatches before n admitted after a later one ("late"): a report sent in between
//     echoes the later seq, so the gateway drops its reservations of the late ones while
//     the report's load does not hold them yet.
//
// Admission therefore compares n's expectation with the local queue without the same
// gateway's later dispatches and late ones. When no report went out in between, the
// gateway still counts a late one and the comparison is slightly lenient: admission is a
// tolerance check against load the gateway did not know about, which it still catches.
//
// Prefill (with HasPrefill) is the number of the request's input tokens the gateway expects
// the engine to prefill, the rest being in its prompt cache (x-switchyard-prefill-tokens):
// the request's queued work is that much instead of its whole input.
type Dispatch struct {
	From       any
	Seq        uint64
	Prefill    uint64
	HasPrefill bool
}

// AtMostPrefill lowers the request's expected prefill to the rest of its input beyond
// the first cached tokens (a prompt it waits to find cached), unless it already expects
// less. cached ≥ input changes nothing.
func (d *Dispatch) AtMostPrefill(input, cached uint64) {
	if cached >= input {
		return
	}
	if w := input - cached; !d.HasPrefill || w < d.Prefill {
		d.Prefill, d.HasPrefill = w, true
	}
}

// noteDispatch records the highest seq admitted from d.From and reports whether d is
// late (a later dispatch of d.From was admitted before it).
func (a *Aggregate) noteDispatch(d Dispatch) (late bool) {
	if d.From == nil || d.Seq == 0 {
		return false
	}
	if a.latest == nil {
		a.latest = make(map[any]uint64)
	}
	if hi := a.latest[d.From]; d.Seq < hi && hi-d.Seq <= restartGap {
		a.lateQueued++
		return true
	}
	a.latest[d.From] = d.Seq // higher, or far lower: the gateway restarted under its id
	return false
}

// restartGap is how far below the highest seq a dispatch may arrive and still be taken
// for one that was overtaken: far more than a gateway ever has in flight to one pylon. A
// seq further below means the gateway restarted with the same id and counts from 1 again.
const restartGap = 1 << 16

// withoutLaterDispatches removes from l, the load of the live requests, those of d.From
// dispatched after d and the late ones (see Dispatch): one running request each, and
// their prompt work from the queue (work being processed counts at every priority,
// pending work at its own priority and after). Nothing is scanned unless there are such
// requests.
func (a *Aggregate) withoutLaterDispatches(l *load.Load, d Dispatch) {
	if d.From == nil || d.Seq == 0 || (a.latest[d.From] <= d.Seq && a.lateQueued == 0) {
		return
	}
	var (
		running, queued, work uint64 // requests, queued requests, their prompt tokens
		processing            uint64 // prompt tokens being processed (ahead of every priority)
	)
	pending, pendingWork := a.laterPrios[:0], a.laterPending[:0] // the pending ones' priorities and work
	for _, r := range a.reqs {
		if r.dispatch.From != d.From || (r.dispatch.Seq <= d.Seq && !r.late) {
			continue
		}
		running++
		switch r.phase {
		case Pending:
			queued++
			work += r.work
			pending = append(pending, r.priority)
			pendingWork = append(pendingWork, r.work)
		case InputProcessing:
			queued++
			work += r.work
			processing += r.work
		default:
		}
	}
	a.laterPrios, a.laterPending = pending[:0], pendingWork[:0]
	if running == 0 {
		return
	}
	l.RunningRequests = subSat(l.RunningRequests, running)
	l.QueueSize = subSat(l.QueueSize, queued)
	l.QueuedInputTokens = subSat(l.QueuedInputTokens, work)
	l.TotalInputTokens = subSat(l.TotalInputTokens, work)
	if !load.ValidTPS(l.InputTPS) {
		return
	}
	// Each estimate is ceil(work at or below its priority / tps): take off the left-out
	// work's share, rounded down so that the estimate never drops below the exact value.
	for i := range l.QueueEstimates {
		e := &l.QueueEstimates[i]
		gone := processing
		for j, p := range pending {
			if p <= e.Priority {
				gone += pendingWork[j]
			}
		}
		e.QueueMs = subSat(e.QueueMs, uint64(math.Floor(float64(gone)/l.InputTPS*1000)))
	}
}

func subSat(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}
