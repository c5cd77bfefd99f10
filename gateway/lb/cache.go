package lb

// maxCachedKeyBytes: longer affinity keys are routed but never cached.
const maxCachedKeyBytes = 256

// defaultCacheKeys is the size of each key cache tier.
const defaultCacheKeys = 4096

// keyCache is a FIFO cache from affinity key to a derived value (an affinity group or a
// ranking). With probation on, a key is first admitted to a probation tier and promoted to
// the main tier on its second use, so one-off keys cannot evict hot ones. Performance
// only: a miss recomputes the same value.
type keyCache[V any] struct {
	main      fifo[V]
	probation fifo[V]
	tiered    bool
}

func newKeyCache[V any](limit int, tiered bool) keyCache[V] {
	return keyCache[V]{main: newFIFO[V](limit), probation: newFIFO[V](limit), tiered: tiered}
}

// get returns the cached value for key, promoting a probation hit.
func (c *keyCache[V]) get(key string) (V, bool) {
	if v, ok := c.main.m[key]; ok {
		return v, true
	}
	if !c.tiered {
		var zero V
		return zero, false
	}
	v, ok := c.probation.m[key]
	if ok {
		c.probation.remove(key)
		c.main.put(key, v)
	}
	return v, ok
}

// put caches v for key unless the key is too long to cache.
func (c *keyCache[V]) put(key string, v V) {
	if len(key) > maxCachedKeyBytes {
		return
	}
	if c.tiered {
		c.probation.put(key, v)
		return
	}
	c.main.put(key, v)
}

// reset drops every entry (the candidate list or the weights changed).
func (c *keyCache[V]) reset() {
	c.main.reset()
	c.probation.reset()
}

// fifo is a bounded map with first-in-first-out eviction.
type fifo[V any] struct {
	m     map[string]V
	order []string // insertion order ring; "" marks a removed slot
	head  int
	limit int
	bytes int
}

func newFIFO[V any](limit int) fifo[V] {
	return fifo[V]{m: make(map[string]V), limit: max(limit, 1)}
}

func (f *fifo[V]) put(key string, v V) {
	if _, ok := f.m[key]; ok {
		f.m[key] = v
		return
	}
	if len(f.order) < f.limit {
		f.order = append(f.order, key)
	} else {
		if old := f.order[f.head]; old != "" {
			f.bytes -= len(old)
			delete(f.m, old)
		}
		f.order[f.head] = key
		f.head = (f.head + 1) % f.limit
	}
	f.m[key] = v
	f.bytes += len(key)
}

func (f *fifo[V]) remove(key string) {
	if _, ok := f.m[key]; !ok {
		return
	}
	delete(f.m, key)
	f.bytes -= len(key)
	for i, k := range f.order {
		if k == key {
			f.order[i] = ""
			return
		}
	}
}

func (f *fifo[V]) reset() {
	clear(f.m)
	f.order = f.order[:0]
	f.head = 0
	f.bytes = 0
}
