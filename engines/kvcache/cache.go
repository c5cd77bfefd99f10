// Package kvcache is the mock engine's prefix KV cache: entries keyed by a 64-bit prefix
// key hold a number of tokens, total tokens are bounded by a capacity, and the least
// recently used entries are evicted first. It is pure (no clock, no I/O, no locking); the
// engine serialises access.
package kvcache

// Access is the outcome of looking up a request's prefix.
type Access struct {
	// Cached is the number of tokens the cache held for the prefix.
	Cached uint64
	// Reused is min(Cached, input): input tokens that need no prefill.
	Reused uint64
	// Uncached is input − Reused.
	Uncached uint64
	// Hit is Reused > 0.
	Hit bool
}

// Evicted counts entries and tokens removed by one commit.
type Evicted struct {
	// Entries is the number of entries removed.
	Entries uint64
	// Tokens is the number of tokens they held.
	Tokens uint64
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	CapacityTokens uint64 `json:"kv_cache_capacity_tokens"`
	UsedTokens     uint64 `json:"kv_cache_used_tokens"`
	FreeTokens     uint64 `json:"kv_cache_free_tokens"`
	Entries        uint64 `json:"kv_cache_entries"`
	Hits           uint64 `json:"kv_cache_hit_count"`
	Misses         uint64 `json:"kv_cache_miss_count"`
	Evictions      uint64 `json:"kv_cache_eviction_count"`
	EvictedTokens  uint64 `json:"kv_cache_evicted_tokens"`
}

// Add returns the field-wise sum of s and o (for caches on several workers).
func (s Stats) Add(o Stats) Stats {
	return Stats{
		CapacityTokens: s.CapacityTokens + o.CapacityTokens,
		UsedTokens:     s.UsedTokens + o.UsedTokens,
		FreeTokens:     s.FreeTokens + o.FreeTokens,
		Entries:        s.Entries + o.Entries,
		Hits:           s.Hits + o.Hits,
		Misses:         s.Misses + o.Misses,
		Evictions:      s.Evictions + o.Evictions,
		EvictedTokens:  s.EvictedTokens + o.EvictedTokens,
	}
}

type entry struct {
	key        uint64
	tokens     uint64
	prev, next *entry // prev is more recently used
}

// Cache is an LRU prefix cache bounded in tokens. The zero value is not usable; use New.
// A cache with capacity 0 stores nothing and every access is a miss.
type Cache struct {
	capacity uint64
	used     uint64
	entries  map[uint64]*entry
	head     entry // sentinel: head.next is the most recently used, head.prev the least

	hits, misses, evictions, evictedTokens uint64
}

// New returns an empty cache holding at most capacityTokens tokens.
func New(capacityTokens uint64) *Cache {
	c := &Cache{capacity: capacityTokens, entries: make(map[uint64]*entry)}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

// Capacity returns the capacity in tokens.
func (c *Cache) Capacity() uint64 { return c.capacity }

// Peek returns the tokens cached for key without touching LRU order or counters.
func (c *Cache) Peek(key uint64) uint64 {
	if e, ok := c.entries[key]; ok {
		return e.tokens
	}
	return 0
}

// PeekChain returns the tokens a chain would reuse (see AccessChain) without touching LRU
// order or counters.
func (c *Cache) PeekChain(keys, blockTokens []uint64) uint64 {
	var cached uint64
	for i := 0; i < len(keys) && i < len(blockTokens); i++ {
		e, ok := c.entries[keys[i]]
		if !ok {
			break
		}
		cached += min(e.tokens, blockTokens[i])
	}
	return cached
}

// Access looks up key for a request with inputTokens input tokens, refreshes the entry's
// LRU position, and counts a hit or a miss.
func (c *Cache) Access(key, inputTokens uint64) Access {
	var a Access
	if e, ok := c.entries[key]; ok {
		a.Cached = e.tokens
		c.moveToFront(e)
	}
	a.Reused = min(a.Cached, inputTokens)
	a.Uncached = inputTokens - a.Reused
	a.Hit = a.Reused > 0
	c.count(a.Hit)
	return a
}

// AccessChain looks up a chain of block keys (each block's key covers the whole prefix up
// to and including it) whose blocks hold blockTokens[i] tokens. Reuse stops at the first
// block not cached. Matched blocks are refreshed last block first, so that the chain's
// head is the most recently used and eviction trims chains from their tail.
func (c *Cache) AccessChain(keys, blockTokens []uint64) Access {
	var a Access
	n := 0
	for n < len(keys) && n < len(blockTokens) {
		e, ok := c.entries[keys[n]]
		if !ok {
			break
		}
		a.Cached += min(e.tokens, blockTokens[n])
		n++
	}
	for i := n - 1; i >= 0; i-- {
		c.moveToFront(c.entries[keys[i]])
	}
	var input uint64
	for _, t := range blockTokens {
		input += t
	}
	a.Reused = min(a.Cached, input)
	a.Uncached = input - a.Reused
	a.Hit = a.Reused > 0
	c.count(a.Hit)
	return a
}

// Commit stores tokens for key: the entry becomes max(previous, tokens) tokens and the
// most recently used, then least recently used entries are evicted until the cache fits.
// An entry larger than the whole capacity is not stored, and the key's old entry is
// removed and counted as evicted.
func (c *Cache) Commit(key, tokens uint64) Evicted {
	var ev Evicted
	e, ok := c.entries[key]
	if ok && e.tokens >= tokens {
		c.moveToFront(e)
		return ev
	}
	if tokens > c.capacity {
		if ok {
			c.evict(e, &ev)
		}
		return ev
	}
	if ok {
		c.used += tokens - e.tokens
		e.tokens = tokens
		c.moveToFront(e)
	} else {
		e = &entry{key: key, tokens: tokens}
		c.entries[key] = e
		c.used += tokens
		c.pushFront(e)
	}
	for c.used > c.capacity {
		lru := c.head.prev
		if lru == e {
			break // unreachable: e alone fits
		}
		c.evict(lru, &ev)
	}
	return ev
}

// CommitChain commits every block of a chain (see AccessChain), last block first so the
// chain's head ends most recently used.
func (c *Cache) CommitChain(keys, blockTokens []uint64) Evicted {
	var ev Evicted
	for i := min(len(keys), len(blockTokens)) - 1; i >= 0; i-- {
		e := c.Commit(keys[i], blockTokens[i])
		ev.Entries += e.Entries
		ev.Tokens += e.Tokens
	}
	return ev
}

// Keys returns the keys from most to least recently used (for tests and debugging).
func (c *Cache) Keys() []uint64 {
	keys := make([]uint64, 0, len(c.entries))
	for e := c.head.next; e != &c.head; e = e.next {
		keys = append(keys, e.key)
	}
	return keys
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	return Stats{
		CapacityTokens: c.capacity,
		UsedTokens:     c.used,
		FreeTokens:     c.capacity - c.used,
		Entries:        uint64(len(c.entries)),
		Hits:           c.hits,
		Misses:         c.misses,
		Evictions:      c.evictions,
		EvictedTokens:  c.evictedTokens,
	}
}

func (c *Cache) count(hit bool) {
	if hit {
		c.hits++
	} else {
		c.misses++
	}
}

func (c *Cache) evict(e *entry, ev *Evicted) {
	c.unlink(e)
	delete(c.entries, e.key)
	c.used -= e.tokens
	c.evictions++
	c.evictedTokens += e.tokens
	ev.Entries++
	ev.Tokens += e.tokens
}

func (c *Cache) unlink(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (c *Cache) pushFront(e *entry) {
	e.prev = &c.head
	e.next = c.head.next
	c.head.next.prev = e
	c.head.next = e
}

func (c *Cache) moveToFront(e *entry) {
	if c.head.next == e {
		return
	}
	c.unlink(e)
	c.pushFront(e)
}
