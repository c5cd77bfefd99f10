package pylon

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
)

// maxGateways bounds the gateways a pylon keeps dispatch seqs and deliveries for: their
// ids come from request headers, so a client sending made-up ids cannot grow the table
// without limit. Requests naming a gateway beyond the bound are served without an echo.
const maxGateways = 256

// gatewayState is what the pylon tracks for one gateway that dispatches to it: the
// highest dispatch seq it has admitted (echoed in x-pylon-load and registrations, so the
// gateway drops exactly the reservations at or below it). Generations key their deliveries
// by it.
type gatewayState struct {
	id  string
	seq atomic.Uint64
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

// add returns the state of gateway id, created on first use (id is copied); nil when
// the table is full.
func (t *gatewayTable) add(id string) *gatewayState {
	if s := t.get(id); s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[string]*gatewayState
	if m := t.m.Load(); m != nil {
		old = *m
	}
	if s := old[id]; s != nil {
		return s
	}
	if len(old) >= maxGateways {
		return nil
	}
	next := make(map[string]*gatewayState, len(old)+1)
	maps.Copy(next, old)
	s := &gatewayState{id: strings.Clone(id)}
	next[s.id] = s
	t.m.Store(&next)
	return s
}
