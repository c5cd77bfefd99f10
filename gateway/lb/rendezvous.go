package lb

import (
	"cmp"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"
)

// rendezvous is the rendezvous-hashing (highest random weight) score of id for seed: for
// one seed, the ids ordered by it are the same on every gateway replica, and adding or
// removing an id moves only the seeds that rank it first.
func rendezvous(id string, seed uint64) uint64 { return xxh3.HashStringSeed(id, seed) }

// LeadOrder appends to dst[:0] a cluster's backends ranked for the cluster id by rendezvous
// hashing, first to last (ties by id): the same order on every gateway replica, whatever
// order backends is in. Its first backend that has not failed for a request is the
// cluster's lead for it.
func LeadOrder(dst, backends []string, cluster string) []string {
	seed := xxh3.HashString(cluster)
	dst = append(dst[:0], backends...)
	slices.SortFunc(dst, func(a, b string) int {
		if c := cmp.Compare(rendezvous(b, seed), rendezvous(a, seed)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return dst
}

// RoundRobinBackend picks the next of a cluster's backends in round-robin order from
// start (taken modulo their number), skipping those failed reports and taking one that
// full reports only when every other has failed or is full too. It returns the pick's
// offset from start, so the caller's counter moves past it; false when every backend
// failed.
func RoundRobinBackend(backends []string, start uint64, failed, full func(id string) bool) (uint64, bool) {
	n := uint64(len(backends))
	firstFull := n // the offset of the first full one met; n: none
	for k := range n {
		id := backends[(start+k)%n]
		if failed(id) {
			continue
		}
		if !full(id) {
			return k, true
		}
		firstFull = min(firstFull, k)
	}
	return firstFull, firstFull < n
}

// KeyedBackend picks, among a cluster's backends, the one that ranks first for the
// session key by rendezvous hashing, skipping those failed reports — so a session's turns
// meet at one pylon and engine, whichever replica routed them. When that backend is full
// and a sibling is not, it picks the sibling that ranks first among those that are not.
// False when every backend failed.
func KeyedBackend(backends []string, key string, failed, full func(id string) bool) (string, bool) {
	kh := xxh3.HashString(key)
	var best, bestFree string
	var bestScore, freeScore uint64
	for _, id := range backends {
		if failed(id) {
			continue
		}
		score := rendezvous(id, kh)
		if best == "" || score > bestScore {
			best, bestScore = id, score
		}
		if !full(id) && (bestFree == "" || score > freeScore) {
			bestFree, freeScore = id, score
		}
	}
	if best == "" {
		return "", false
	}
	if bestFree != "" && bestFree != best && full(best) {
		return bestFree, true
	}
	return best, true
}
