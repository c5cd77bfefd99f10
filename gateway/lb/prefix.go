package lb

import (
	"time"

	"github.com/zeebo/xxh3"
)

// PrefixBlockBytes is the size of the prompt blocks the gateway hashes for prefix-aware
// routing (prefix_affinity).
const PrefixBlockBytes = 256

// MaxPrefixBytes bounds how much of a prompt's leading content is hashed: a longer prompt
// is matched on its first MaxPrefixBytes bytes only.
const MaxPrefixBytes = 1 << 20

// AppendPrefixHashes appends the chained block hashes of content (each block's hash covers
// the whole content up to the end of its block, seeded by the model name) to dst, for at
// most MaxPrefixBytes bytes of content. A partial last block is hashed too, so a prompt
// shorter than a block still has an identity.
func AppendPrefixHashes(dst []uint64, model string, content []byte) []uint64 {
	content = content[:min(len(content), MaxPrefixBytes)]
	h := xxh3.HashString(model)
	for start := 0; start < len(content); start += PrefixBlockBytes {
		h = xxh3.HashSeed(content[start:min(start+PrefixBlockBytes, len(content))], h)
		dst = append(dst, h)
	}
	return dst
}

// prefixIndex remembers, per cluster of one routing target, which prompt blocks the
// gateway recently sent there: an approximation of each engine's prefix cache built from
// the gateway's own routing history. Each cluster keeps a least-recently-used set bounded
// in blocks (prefix_index_blocks) and in tokens (the cluster's reported KV capacity, when
// it reports one), and blocks older than the time to live no longer count. It is owned by
// the scheduler actor that calls the balancer: no locking.
type prefixIndex struct {
	clusters  map[string]*blockLRU
	maxBlocks int
	ttl       time.Duration
	members   uint64 // snapshot membership the cluster set was last pruned for
	scales    []float64
	keyBuf    [1]uint64
}

func newPrefixIndex(maxBlocks int, ttl time.Duration) prefixIndex {
	return prefixIndex{clusters: map[string]*blockLRU{}, maxBlocks: max(maxBlocks, 1), ttl: ttl}
}

// blockTokens is the tokens one block of r stands for: its input tokens spread evenly over
// its blocks (the last, partial block counts as a whole one).
func blockTokens(r *Request) uint64 {
	return max(r.InputTokens/uint64(max(len(r.Prefix), 1)), 1)
}

// cachedScales fills and returns, per candidate of s, the prefill scale 1 − expected
// cached tokens / input tokens, and the index of the candidate expected to hold the most
// of r's prompt (-1 when none holds any).
func (x *prefixIndex) cachedScales(s *Snapshot, r *Request) (scales []float64, best int32) {
	x.prune(s)
	scales, best = x.scales[:0], -1
	per := blockTokens(r)
	var most uint64
	for i := range s.Candidates {
		cached := uint64(0)
		if c := x.clusters[s.Candidates[i].ClusterID]; c != nil {
			cached = min(uint64(c.matched(r.Prefix, r.At, x.ttl))*per, r.InputTokens) //nolint:gosec // a block count is never negative
		}
		scale := 1.0
		if r.InputTokens > 0 {
			scale = 1 - float64(cached)/float64(r.InputTokens)
		}
		scales = append(scales, scale)
		if cached > most {
			most, best = cached, int32(i)
		}
	}
	x.scales = scales
	return scales, best
}

// record notes that r's prompt was sent to cand's cluster at r.At.
func (x *prefixIndex) record(cand *Candidate, r *Request) {
	c := x.clusters[cand.ClusterID]
	if c == nil {
		c = newBlockLRU()
		x.clusters[cand.ClusterID] = c
	}
	x.add(cand, r.Prefix, blockTokens(r), r.At)
}

// recordKey notes that the session of affinity key hash key, now tokens long, was sent to
// cand's cluster at now: one entry per session, for the KV accounting of keyed sessions.
func (x *prefixIndex) recordKey(cand *Candidate, key, tokens uint64, now time.Time) {
	x.keyBuf[0] = key
	x.add(cand, x.keyBuf[:], tokens, now)
}

// keyTokens returns the tokens recorded by recordKey for the session of key hash key on
// cluster, when it is still remembered there and fresh.
func (x *prefixIndex) keyTokens(cluster string, key uint64, now time.Time) (uint64, bool) {
	c := x.clusters[cluster]
	if c == nil || !c.fresh(key, now, x.ttl) {
		return 0, false
	}
	return c.slots[c.index[key]].tokens, true
}

func (x *prefixIndex) add(cand *Candidate, chain []uint64, tokens uint64, now time.Time) {
	c := x.clusters[cand.ClusterID]
	if c == nil {
		c = newBlockLRU()
		x.clusters[cand.ClusterID] = c
	}
	c.add(chain, tokens, now, x.maxBlocks, cand.Load.KVCapacityTokens)
}

// kvHeadroom is the share of a cluster's KV capacity new sessions may fill: the rest is
// left for the sessions already there to grow into.
const kvHeadroom = 0.85

// hasRoom reports whether cand's cluster is expected to cache r's prompt without evicting
// another prompt the gateway sent there: the tokens remembered for it plus r's fit within
// kvHeadroom of its reported KV capacity (always true when it reports none).
func (x *prefixIndex) hasRoom(cand *Candidate, r *Request) bool {
	kv := cand.Load.KVCapacityTokens
	if kv == 0 {
		return true
	}
	var used uint64
	if c := x.clusters[cand.ClusterID]; c != nil {
		used = c.used
	}
	return float64(used+r.InputTokens) <= kvHeadroom*float64(kv)
}

// roomy appends the members of s (nil = every candidate) that have room for r (hasRoom)
// to dst.
func (x *prefixIndex) roomy(dst []int32, s *Snapshot, r *Request, members []int32) []int32 {
	if members == nil {
		for i := range s.Candidates {
			if x.hasRoom(&s.Candidates[i], r) {
				dst = append(dst, int32(i))
			}
		}
		return dst
	}
	for _, i := range members {
		if x.hasRoom(&s.Candidates[i], r) {
			dst = append(dst, i)
		}
	}
	return dst
}

// prune forgets the clusters that left the routing target (their engines' caches are
// gone or unreachable), once per membership change.
func (x *prefixIndex) prune(s *Snapshot) {
	if x.members == s.membership {
		return
	}
	x.members = s.membership
	for id := range x.clusters {
		if !s.hasCluster(id) {
			delete(x.clusters, id)
		}
	}
}

// blockLRU is one cluster's remembered blocks, most recently sent first, with the tokens
// they stand for.
type blockLRU struct {
	used  uint64 // tokens of the remembered blocks
	index map[uint64]int32
	slots []blockSlot
	free  []int32 // slots of evicted blocks, reused before the slice grows
	order recency // slots, most recently used first
}

type blockSlot struct {
	key    uint64
	tokens uint64
	at     time.Time
}

func newBlockLRU() *blockLRU { return &blockLRU{index: map[uint64]int32{}, order: newRecency()} }

// fresh reports whether key is remembered and younger than ttl (0 = no expiry).
func (c *blockLRU) fresh(key uint64, now time.Time, ttl time.Duration) bool {
	i, ok := c.index[key]
	return ok && (ttl <= 0 || now.Sub(c.slots[i].at) <= ttl)
}

// matched is how many leading blocks of chain are remembered and fresh. Chained hashes
// make a remembered block imply that its whole prefix was sent, and blocks are added last
// first, so a chain's blocks leave the set tail first: presence is monotone along the
// chain, and a binary search finds its end in O(log n) lookups.
func (c *blockLRU) matched(chain []uint64, now time.Time, ttl time.Duration) int {
	lo, hi := 0, len(chain) // chain[:lo] matched, chain[hi:] not
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if c.fresh(chain[mid], now, ttl) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// add remembers chain's blocks, each standing for tokens tokens, at now: last block first
// so the chain's head ends most recently used. Least recently used blocks are evicted
// beyond maxBlocks blocks and beyond capTokens tokens (0 = no token bound).
func (c *blockLRU) add(chain []uint64, tokens uint64, now time.Time, maxBlocks int, capTokens uint64) {
	for k := len(chain) - 1; k >= 0; k-- {
		key := chain[k]
		if i, ok := c.index[key]; ok {
			c.used += tokens - c.slots[i].tokens
			c.slots[i].at, c.slots[i].tokens = now, tokens
			c.order.touch(i)
			continue
		}
		for c.order.tail >= 0 && (len(c.index) >= maxBlocks || (capTokens > 0 && c.used+tokens > capTokens)) {
			c.evictTail()
		}
		var i int32
		if n := len(c.free); n > 0 {
			i, c.free = c.free[n-1], c.free[:n-1]
		} else {
			i = c.order.grow()
			c.slots = append(c.slots, blockSlot{})
		}
		c.slots[i] = blockSlot{key: key, tokens: tokens, at: now}
		c.used += tokens
		c.index[key] = i
		c.order.pushFront(i)
	}
}

func (c *blockLRU) evictTail() {
	i := c.order.tail
	c.order.unlink(i)
	delete(c.index, c.slots[i].key)
	c.used -= c.slots[i].tokens
	c.free = append(c.free, i)
}
