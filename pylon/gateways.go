package pylon

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxGateways bounds the gateways a pylon keeps dispatch seqs and deliveries for: their
// ids come from request headers, so a client sending made-up ids cannot grow the table
// without limit. Requests naming a gateway beyond the bound are served without an echo.
// Gateways come and go (a restarted gateway has a new id), so once the table is full a new
// gateway takes the places of those that have dispatched nothing for gatewayIdle.
const maxGateways = 256

// gatewayIdle is how long a gateway must have dispatched nothing before a new one may take
// its place in a full table.
const gatewayIdle = 10 * time.Minute

// touchEvery is the granularity of gatewayState.last: it is stored at most once per
// touchEvery, so that the data path mostly only loads it.
const touchEvery = time.Second

// gatewayState is what the pylon tracks for one gateway that dispatches to it: the
// highest dispatch seq it has admitted (echoed in x-pylon-load and registrations, so the
// gateway drops exactly the reservations at or below it). Generations key their deliveries
// by it.
type gatewayState struct {
	id   string
	seq  atomic.Uint64
	last atomic.Int64 // when it last dispatched a request (unix ns, to touchEvery)
}

// idle reports whether the gateway has dispatched nothing for gatewayIdle at now (unix ns).
func (s *gatewayState) idle(now int64) bool { return now-s.last.Load() >= int64(gatewayIdle) }

func anyIdle(m map[string]*gatewayState, now int64) bool {
	for _, s := range m {
		if s.idle(now) {
			return true
		}
	}
	return false
}

// touch records a dispatch at now (unix ns).
func (s *gatewayState) touch(now int64) {
	if now-s.last.Load() >= int64(touchEvery) {
		s.last.Store(now)
	}
}

// note raises the highest admitted seq to seq.
func (s *gatewayState) note(seq uint64) {
	for {
		cur := s.seq.Load()
		if seq <= cur || s.seq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// gatewayTable maps gateway ids to their state: a copy-on-write map, so the data path
// looks a gateway up with one atomic load and no lock or allocation.
type gatewayTable struct {
	m  atomic.Pointer[map[string]*gatewayState]
	mu sync.Mutex // serializes writers
}

// get returns the state of gateway id, nil when unknown. id may alias a request buffer.
func (t *gatewayTable) get(id string) *gatewayState {
	if m := t.m.Load(); m != nil {
		return (*m)[id]
	}
	return nil
}

// add returns the state of gateway id, created on first use (id is copied), and records
// a dispatch from it at now (unix ns). A full table first drops the gateways idle for
// gatewayIdle; nil when none is.
func (t *gatewayTable) add(id string, now int64) *gatewayState {
	if s := t.get(id); s != nil {
		s.touch(now)
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[string]*gatewayState
	if m := t.m.Load(); m != nil {
		old = *m
	}
	if s := old[id]; s != nil {
		s.touch(now)
		return s
	}
	full := len(old) >= maxGateways
	if full && !anyIdle(old, now) {
		return nil // refused before copying the table: a made-up id costs a scan, no allocation
	}
	next := make(map[string]*gatewayState, min(len(old)+1, maxGateways))
	maps.Copy(next, old)
	if full {
		maps.DeleteFunc(next, func(_ string, s *gatewayState) bool { return s.idle(now) })
	}
	s := &gatewayState{id: strings.Clone(id)}
	s.last.Store(now)
	next[s.id] = s
	t.m.Store(&next)
	return s
}
