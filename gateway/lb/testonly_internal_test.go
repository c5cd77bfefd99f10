package lb

// Test-only accessors of unexported state.

// keyBytes is the total length of the cached keys (both tiers).
func (c *keyCache[V]) keyBytes() int { return c.main.bytes + c.probation.bytes }

// len is the number of remembered sessions.
func (t *sessionTable) len() int { return len(t.index) }
