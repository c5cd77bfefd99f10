package kvcache_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/engines/kvcache"
)

func TestAccessAndCommit(t *testing.T) {
	t.Parallel()
	c := kvcache.New(1000)
	if diff := cmp.Diff(kvcache.Access{Uncached: 300}, c.Access(1, 300)); diff != "" {
		t.Fatalf("cold access (-want +got):\n%s", diff)
	}
	c.Commit(1, 300)
	// A longer prompt on the same key pays only for its suffix.
	if diff := cmp.Diff(kvcache.Access{Cached: 300, Reused: 300, Uncached: 120, Hit: true}, c.Access(1, 420)); diff != "" {
		t.Fatalf("warm access (-want +got):\n%s", diff)
	}
	c.Commit(1, 420)
	// A shorter prompt reuses at most its own input.
	if diff := cmp.Diff(kvcache.Access{Cached: 420, Reused: 100, Uncached: 0, Hit: true}, c.Access(1, 100)); diff != "" {
		t.Fatalf("short access (-want +got):\n%s", diff)
	}
	c.Commit(1, 100) // never shrinks
	want := kvcache.Stats{CapacityTokens: 1000, UsedTokens: 420, FreeTokens: 580, Entries: 1, Hits: 2, Misses: 1}
	if diff := cmp.Diff(want, c.Stats()); diff != "" {
		t.Fatalf("stats (-want +got):\n%s", diff)
	}
}

func TestEvictionFollowsLRU(t *testing.T) {
	t.Parallel()
	c := kvcache.New(100)
	c.Commit(1, 30)
	c.Commit(2, 30)
	c.Commit(3, 30)
	c.Access(1, 30) // 1 becomes most recent: order 1,3,2
	if diff := cmp.Diff([]uint64{1, 3, 2}, c.Keys()); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
	// 50 tokens need 2 and then 3 to go (2 is least recent, then 3).
	if diff := cmp.Diff(kvcache.Evicted{Entries: 2, Tokens: 60}, c.Commit(4, 50)); diff != "" {
		t.Fatalf("evicted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{4, 1}, c.Keys()); diff != "" {
		t.Fatalf("order after eviction (-want +got):\n%s", diff)
	}
	// Growing key 1 to 60 evicts 4 (least recent after 1 is refreshed).
	if diff := cmp.Diff(kvcache.Evicted{Entries: 1, Tokens: 50}, c.Commit(1, 60)); diff != "" {
		t.Fatalf("evicted on growth (-want +got):\n%s", diff)
	}
	// An entry larger than the capacity is not stored and drops the key's old entry.
	if diff := cmp.Diff(kvcache.Evicted{Entries: 1, Tokens: 60}, c.Commit(1, 101)); diff != "" {
		t.Fatalf("oversize (-want +got):\n%s", diff)
	}
	st := c.Stats()
	if st.Entries != 0 || st.UsedTokens != 0 || st.Evictions != 4 || st.EvictedTokens != 170 {
		t.Fatalf("stats %+v", st)
	}
}

func TestZeroCapacityStoresNothing(t *testing.T) {
	t.Parallel()
	c := kvcache.New(0)
	c.Commit(1, 1)
	if a := c.Access(1, 10); a.Hit || a.Uncached != 10 {
		t.Fatalf("access %+v", a)
	}
}

func TestChainReusesLongestPrefix(t *testing.T) {
	t.Parallel()
	c := kvcache.New(1000)
	c.CommitChain([]uint64{10, 11, 12}, []uint64{64, 64, 20})
	// Same first two blocks, different third.
	a := c.AccessChain([]uint64{10, 11, 99, 100}, []uint64{64, 64, 64, 5})
	if diff := cmp.Diff(kvcache.Access{Cached: 128, Reused: 128, Uncached: 69, Hit: true}, a); diff != "" {
		t.Fatalf("chain access (-want +got):\n%s", diff)
	}
	// The chain head is the most recent; the unmatched tail 12 is the least recent.
	if diff := cmp.Diff([]uint64{10, 11, 12}, c.Keys()); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

// The cache never holds more than its capacity, used equals the sum of entries, and
// every stored entry fits.
func TestCacheInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.Uint64Range(0, 500).Draw(t, "capacity")
		c := kvcache.New(capacity)
		model := map[uint64]uint64{}
		for range rapid.IntRange(1, 100).Draw(t, "ops") {
			key := rapid.Uint64Range(0, 10).Draw(t, "key")
			tokens := rapid.Uint64Range(0, 200).Draw(t, "tokens")
			if rapid.Bool().Draw(t, "commit") {
				c.Commit(key, tokens)
			} else {
				a := c.Access(key, tokens)
				if a.Reused+a.Uncached != tokens || a.Reused > a.Cached {
					t.Fatalf("access %+v for %d tokens", a, tokens)
				}
			}
			st := c.Stats()
			if st.UsedTokens > capacity || st.UsedTokens+st.FreeTokens != capacity {
				t.Fatalf("stats %+v over capacity %d", st, capacity)
			}
			clear(model)
			var sum uint64
			for _, k := range c.Keys() {
				model[k] = c.Peek(k)
				sum += model[k]
			}
			if sum != st.UsedTokens || uint64(len(model)) != st.Entries {
				t.Fatalf("sum %d entries %d vs stats %+v", sum, len(model), st)
			}
		}
	})
}
