package chaos

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is how one request ended, as its client saw it.
type Kind uint8

// The outcomes of a request. Every request the suites send ends in exactly one of them.
const (
	// KindOK is a 2xx response read to its end: a JSON body with choices, or a stream up
	// to "data: [DONE]".
	KindOK Kind = iota
	// KindStatus is a response whose status is not 2xx.
	KindStatus
	// KindStreamError is a stream that ended with an error event: the server said what
	// went wrong instead of cutting the stream.
	KindStreamError
	// KindTruncated is a 2xx response that ended early without an error event (a stream
	// without [DONE], a body cut short): a silent truncation.
	KindTruncated
	// KindTransport is no response at all: the connection was refused, reset or closed.
	KindTransport
	// KindHung is no complete answer within the hang bound; the client gave up.
	KindHung
	// KindAborted is a request the run itself stopped (Ctrl-C); it is neither a success
	// nor a failure of the fleet.
	KindAborted
)

var kindNames = [...]string{"ok", "status", "stream_error", "truncated", "transport", "hung", "aborted"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind_" + strconv.Itoa(int(k))
}

// Failed reports whether the outcome is a failure of the fleet.
func (k Kind) Failed() bool { return k != KindOK && k != KindAborted }

// Result is one request's outcome.
type Result struct {
	Start, End time.Time
	Kind       Kind
	// Status is the response status, 0 without a response.
	Status int
	// Backend is the backend that answered (the x-inference-server-id header), "" if none.
	Backend string
	Stream  bool
	// Err is the transport or stream error, one line, "" when none.
	Err string
	// Trailing says more events followed a stream's [DONE]: one request, two endings.
	Trailing bool
}

// Ledger is the outcome accounting of one load: every request is begun once, under a
// fresh id, and finished once with its outcome. Finishing an id twice, or an id that was
// never begun, is counted instead of recorded, so a client bug that loses or doubles
// outcomes shows up in the accounting rather than in the results. Safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	next    uint64
	open    map[uint64]time.Time
	done    []Result
	dupIDs  map[uint64]int
	unknown int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{open: map[uint64]time.Time{}, dupIDs: map[uint64]int{}}
}

// Begin records a request sent at now and returns its id (from 1).
func (l *Ledger) Begin(now time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	l.open[l.next] = now
	return l.next
}

// Finish records the outcome of request id.
func (l *Ledger) Finish(id uint64, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch _, open := l.open[id]; {
	case open:
		delete(l.open, id)
		l.done = append(l.done, r)
	case id >= 1 && id <= l.next:
		l.dupIDs[id]++
	default:
		l.unknown++
	}
}

// Results returns a copy of the recorded outcomes, in finishing order.
func (l *Ledger) Results() []Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.done)
}

// Accounting is the ledger's balance.
type Accounting struct {
	// Sent is the number of requests begun.
	Sent int
	// ExactlyOne is the number of requests with exactly one outcome; it equals Sent
	// when nothing was lost or doubled.
	ExactlyOne int
	// Lost is the number of requests begun and never finished.
	Lost int
	// Duplicates is the number of requests with more than one outcome: finished more
	// than once, or a stream with events after its [DONE].
	Duplicates int
	// Unanswered is the number of requests that got neither a response nor a transport
	// error within the hang bound (the client gave up: hung); they have no outcome.
	Unanswered int
	// Unknown is the number of outcomes recorded for ids never begun.
	Unknown int
}

// Balanced reports whether every request sent has exactly one outcome and no outcome
// belongs to no request.
func (a Accounting) Balanced() bool { return a.ExactlyOne == a.Sent && a.Unknown == 0 }

func (a Accounting) String() string {
	return strconv.Itoa(a.ExactlyOne) + " of " + strconv.Itoa(a.Sent) + " with exactly one outcome (lost " + strconv.Itoa(a.Lost) +
		", unanswered " + strconv.Itoa(a.Unanswered) + ", duplicated " + strconv.Itoa(a.Duplicates) + ", outcomes of unknown requests " + strconv.Itoa(a.Unknown) + ")"
}

// Accounting returns the balance so far.
func (l *Ledger) Accounting() Accounting {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := Accounting{
		Sent:       int(l.next), //nolint:gosec // a request count
		Lost:       len(l.open),
		Duplicates: len(l.dupIDs),
		Unknown:    l.unknown,
	}
	for i := range l.done {
		switch r := &l.done[i]; {
		case r.Kind == KindHung:
			a.Unanswered++
		case r.Trailing:
			a.Duplicates++
		}
	}
	a.ExactlyOne = a.Sent - a.Lost - a.Unanswered - a.Duplicates
	return a
}

// LoadStats summarises a load's outcomes around a fault.
type LoadStats struct {
	// Sent counts every request of the load.
	Sent int
	// Failed counts the new requests that failed (any failed kind but hung) and Hung
	// those that were not answered within the hang bound. New requests are all but those
	// in flight at the fault.
	Failed, Hung int
	// InFlightFailed counts the requests in flight at the fault (started before it, ended
	// after it) that failed; they are left out of Failed, Hung and the window.
	InFlightFailed int
	// Window is the error window: the time from the first to the last failure (its end,
	// when the client saw it) of a new request; 0 with fewer than two failures.
	Window time.Duration
	// FirstFailure and LastFailure bound the window (zero without failures).
	FirstFailure, LastFailure time.Time
	// ByKind counts the outcomes of every request, in flight at the fault or not;
	// NewFailures counts the failed kinds of the new requests only.
	ByKind, NewFailures map[Kind]int
	// Examples describe up to maxExamples distinct failures of new requests, e.g.
	// "status 503" or "transport: connection refused".
	Examples []string
}

// maxExamples bounds LoadStats.Examples.
const maxExamples = 3

// describe renders a failed result for LoadStats.Examples.
func describe(r *Result) string {
	switch r.Kind {
	case KindStatus:
		return "status " + strconv.Itoa(r.Status)
	case KindOK, KindAborted:
		return r.Kind.String()
	default:
		d := r.Kind.String()
		if r.Err != "" {
			d += ": " + r.Err
		}
		if len(d) > 120 {
			d = d[:120] + "…"
		}
		return d
	}
}

// Summarize computes the load statistics of results around a fault at fault (the zero
// time: no fault, every request is new).
func Summarize(results []Result, fault time.Time) LoadStats {
	s := LoadStats{Sent: len(results), ByKind: map[Kind]int{}, NewFailures: map[Kind]int{}}
	for i := range results {
		r := &results[i]
		s.ByKind[r.Kind]++
		if !r.Kind.Failed() {
			continue
		}
		if !fault.IsZero() && r.Start.Before(fault) && r.End.After(fault) {
			s.InFlightFailed++
			continue
		}
		if r.Kind == KindHung {
			s.Hung++
		} else {
			s.Failed++
		}
		s.NewFailures[r.Kind]++
		if d := describe(r); len(s.Examples) < maxExamples && !slices.Contains(s.Examples, d) {
			s.Examples = append(s.Examples, d)
		}
		if s.FirstFailure.IsZero() || r.End.Before(s.FirstFailure) {
			s.FirstFailure = r.End
		}
		if r.End.After(s.LastFailure) {
			s.LastFailure = r.End
		}
	}
	if !s.FirstFailure.IsZero() {
		s.Window = s.LastFailure.Sub(s.FirstFailure)
	}
	return s
}

// FailuresByKind renders the failed kinds of the new requests, e.g. "status 3,
// transport 1"; "" when none.
func (s LoadStats) FailuresByKind() string {
	var parts []string
	for k := KindStatus; k <= KindHung; k++ {
		if n := s.NewFailures[k]; n > 0 {
			parts = append(parts, k.String()+" "+strconv.Itoa(n))
		}
	}
	return strings.Join(parts, ", ")
}
