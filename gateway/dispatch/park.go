package dispatch

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// Parked requests: a request that must wait (a balancer's Wait, x-max-wait-ms,
// capacity_wait_ms, prefill_wait) is held in a heap by wake time; the scheduler's alarm
// retries the due ones, and any change retries all.

// retryParked re-evaluates parked requests: every one (onlyDue false, after a change) or
// those whose wake time has come (a timer tick).
func (s *Scheduler) retryParked(onlyDue bool) {
	now := s.deps.Now()
	var batch []*Pending
	if onlyDue {
		for len(s.parked) > 0 && s.parked[0].wake <= now.UnixNano() {
			if e := heap.Pop(&s.parked).(parkedEntry); e.p.parked {
				batch = append(batch, e.p)
			}
		}
	} else {
		for _, e := range s.parked {
			if e.p.parked {
				batch = append(batch, e.p)
			}
		}
		clear(s.parked)
		s.parked = s.parked[:0]
		slices.SortFunc(batch, retryOrder)
	}
	for _, p := range batch {
		p.parked = false
	}
	s.parkedCount -= len(batch)
	if len(batch) > 0 {
		s.deps.Observer.Parked(s.target, -len(batch))
	}
	for i, p := range batch {
		s.batch = batch[i+1:]
		s.try(p)
	}
	s.batch = nil
}

// retryOrder is the order in which parked requests are retried after a change, so the
// first of them takes a slot that freed up: arrival order, except that requests whose
// entry says capacity_wait_order "shortest" go by their Work (least first, then arrival),
// after any that do not.
func retryOrder(a, b *Pending) int {
	if c := cmp.Compare(shortestKey(a), shortestKey(b)); c != 0 {
		return c
	}
	return a.Arrival.Compare(b.Arrival)
}

func shortestKey(p *Pending) uint64 {
	if p.Entry == nil || !p.Entry.ShortestFirst {
		return 0
	}
	return p.Work()
}

func (s *Scheduler) armAlarm() {
	for len(s.parked) > 0 && !s.parked[0].p.parked {
		heap.Pop(&s.parked) // cancelled
	}
	if len(s.parked) == 0 || s.alarm == nil || s.life.stopped {
		return
	}
	s.alarm.Arm(s.deps.Now(), time.Unix(0, s.parked[0].wake))
}

func (s *Scheduler) park(p *Pending, wake time.Time) {
	s.trying = nil
	p.parked, p.everParked = true, true
	s.parkedCount++
	heap.Push(&s.parked, parkedEntry{wake: wake.UnixNano(), p: p})
	s.deps.Observer.Parked(s.target, 1)
}

// parkedEntry is what the scheduler holds per parked request: 16 bytes in the heap.
type parkedEntry struct {
	wake int64 // unix ns
	p    *Pending
}

// parkHeap orders parked requests by wake time.
type parkHeap []parkedEntry

func (h parkHeap) Len() int { return len(h) }

func (h parkHeap) Less(i, j int) bool { return h[i].wake < h[j].wake }

func (h parkHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *parkHeap) Push(x any) { *h = append(*h, x.(parkedEntry)) }

func (h *parkHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = parkedEntry{}
	*h = old[:n-1]
	return e
}
