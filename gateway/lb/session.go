package lb

import "time"

// sessionTable remembers, per affinity key, the cluster that last served it: a bounded map
// with least-recently-used eviction and a time to live. The wait-and-widen balancer keeps
// one per routing target and consults it inside the affinity group, so a session returns
// to the member that holds its prefix while that member can take it, instead of
// alternating between the group's members as their loads cross. It is owned by the
// scheduler actor that calls the balancer: no locking. Once warm it allocates only for the
// map entry of a new key.
type sessionTable struct {
	index map[string]int32
	slots []sessionSlot
	head  int32 // most recently used slot, -1 when empty
	tail  int32 // least recently used slot
	ttl   time.Duration
	limit int
}

type sessionSlot struct {
	key, cluster string
	at           time.Time
	prev, next   int32
}

func newSessionTable(limit int, ttl time.Duration) sessionTable {
	return sessionTable{index: map[string]int32{}, head: -1, tail: -1, ttl: ttl, limit: max(limit, 1)}
}

// enabled reports whether the table is in use (a positive time to live).
func (t *sessionTable) enabled() bool { return t.ttl > 0 }

// get returns the cluster that last served key, if it did so within the time to live.
func (t *sessionTable) get(key string, now time.Time) (string, bool) {
	i, ok := t.index[key]
	if !ok {
		return "", false
	}
	s := &t.slots[i]
	if now.Sub(s.at) > t.ttl {
		return "", false
	}
	return s.cluster, true
}

// put records that cluster served key at now (the key becomes the most recently used).
func (t *sessionTable) put(key, cluster string, now time.Time) {
	if len(key) > maxCachedKeyBytes {
		return
	}
	if i, ok := t.index[key]; ok {
		t.slots[i].cluster, t.slots[i].at = cluster, now
		t.touch(i)
		return
	}
	var i int32
	if len(t.slots) < t.limit {
		i = int32(len(t.slots)) //nolint:gosec // bounded by limit
		t.slots = append(t.slots, sessionSlot{prev: -1, next: -1})
	} else {
		i = t.tail // evict the least recently used
		t.unlink(i)
		delete(t.index, t.slots[i].key)
	}
	t.slots[i] = sessionSlot{key: key, cluster: cluster, at: now, prev: -1, next: -1}
	t.index[key] = i
	t.pushFront(i)
}

func (t *sessionTable) touch(i int32) {
	if t.head == i {
		return
	}
	t.unlink(i)
	t.pushFront(i)
}

func (t *sessionTable) unlink(i int32) {
	s := &t.slots[i]
	if s.prev >= 0 {
		t.slots[s.prev].next = s.next
	} else {
		t.head = s.next
	}
	if s.next >= 0 {
		t.slots[s.next].prev = s.prev
	} else {
		t.tail = s.prev
	}
	s.prev, s.next = -1, -1
}

func (t *sessionTable) pushFront(i int32) {
	s := &t.slots[i]
	s.prev, s.next = -1, t.head
	if t.head >= 0 {
		t.slots[t.head].prev = i
	}
	t.head = i
	if t.tail < 0 {
		t.tail = i
	}
}
