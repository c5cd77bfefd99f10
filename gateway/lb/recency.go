package lb

// recency orders a table's slots from most to least recently used: a doubly linked list
// threaded through slot indexes, so that moving a slot to the front, taking one out and
// finding the least recently used are O(1) and allocate nothing once the slots exist.
// Slot i's links are links[i]: the table that owns the slots grows both together (grow).
// Used by the session table and by the prefix index's block sets.
type recency struct {
	links []recencyLinks
	head  int32 // most recently used slot, -1 when empty
	tail  int32 // least recently used slot, -1 when empty
}

type recencyLinks struct{ prev, next int32 }

func newRecency() recency { return recency{head: -1, tail: -1} }

// grow adds the links of one more slot, not in the list yet, and returns its index.
func (r *recency) grow() int32 {
	r.links = append(r.links, recencyLinks{prev: -1, next: -1})
	return int32(len(r.links) - 1) //nolint:gosec // bounded by the owning table's limit
}

// touch makes slot i, which is in the list, the most recently used.
func (r *recency) touch(i int32) {
	if r.head == i {
		return
	}
	r.unlink(i)
	r.pushFront(i)
}

// unlink takes slot i, which is in the list, out of it.
func (r *recency) unlink(i int32) {
	l := &r.links[i]
	if l.prev >= 0 {
		r.links[l.prev].next = l.next
	} else {
		r.head = l.next
	}
	if l.next >= 0 {
		r.links[l.next].prev = l.prev
	} else {
		r.tail = l.prev
	}
	l.prev, l.next = -1, -1
}

// pushFront puts slot i, which is not in the list, at its front.
func (r *recency) pushFront(i int32) {
	l := &r.links[i]
	l.prev, l.next = -1, r.head
	if r.head >= 0 {
		r.links[r.head].prev = i
	}
	r.head = i
	if r.tail < 0 {
		r.tail = i
	}
}
