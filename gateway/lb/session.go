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
	order recency // slots, most recently used first
	ttl   time.Duration
	limit int
}

type sessionSlot struct {
	key, cluster string
	at           time.Time
}

func newSessionTable(limit int, ttl time.Duration) sessionTable {
	return sessionTable{index: map[string]int32{}, order: newRecency(), ttl: ttl, limit: max(limit, 1)}
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
		t.order.touch(i)
		return
	}
	var i int32
	if len(t.slots) < t.limit {
		i = t.order.grow()
		t.slots = append(t.slots, sessionSlot{})
	} else {
		i = t.order.tail // evict the least recently used
		t.order.unlink(i)
		delete(t.index, t.slots[i].key)
	}
	t.slots[i] = sessionSlot{key: key, cluster: cluster, at: now}
	t.index[key] = i
	t.order.pushFront(i)
}
