// Package headerset matches HTTP header names against a fixed list, ASCII
// case-insensitively, in the one pass over a header that the gateway and the pylon make
// on every request and response: the gateway to read its routing headers and to strip
// hop-by-hop and internal ones, the pylon to strip what the engine must not see and what
// the engine must not send back.
//
// It is a package of its own, beside internal/wire rather than inside it, because it is a
// mechanism and not part of the gateway–pylon contract: the lists it matches mix the
// contract's names with HTTP's hop-by-hop headers, and wire stays free of fasthttp (it
// only encodes and decodes; see docs/wire.md). Both sides import it, neither imports the
// other.
//
// A Set is laid out for a cold cache (it runs once per request, between other work): one
// bit mask per name length says which names have it, so most headers are rejected with
// one load, and the names are kept in fasthttp's canonical form (what arrives while header
// normalizing is on, fasthttp's default) in one contiguous array, so a match is usually
// one bytes.Equal. A Set holds at most MaxNames names; a name longer than FastNameLen (a
// configured one, say) is compared on a slower path of its own.
package headerset

import (
	"bytes"
	"iter"
	"math/bits"

	"github.com/valyala/fasthttp"
)

// Bounds of a Set.
const (
	// MaxNames is the most names a Set holds (one bit each in a Mask).
	MaxNames = 32
	// FastNameLen is the longest name matched on the fast path (every standard and
	// routing header); longer ones are compared one by one.
	FastNameLen = 32
)

// Mask has bit i set for the i-th name of a Set.
type Mask uint32

// Set is a fixed list of header names. It is read-only after New: safe for concurrent use.
type Set struct {
	byLen [FastNameLen + 1]uint32 // bit i: the i-th listed name has this length
	canon [][FastNameLen]byte     // the names, canonical, in the order listed
	names []string                // the names, canonical, as strings
	long  Mask                    // the names longer than FastNameLen
}

// New returns the set of names, indexed in the order given. It panics on more than
// MaxNames names (the lists are fixed in the code, a configured name at most adds one).
func New(names ...string) *Set {
	if len(names) > MaxNames {
		panic("headerset: too many names")
	}
	s := &Set{canon: make([][FastNameLen]byte, len(names)), names: make([]string, len(names))}
	for i, n := range names {
		c := fasthttp.AppendNormalizedHeaderKey(nil, n)
		s.names[i] = string(c)
		if len(c) > FastNameLen {
			s.long |= 1 << i
			continue
		}
		copy(s.canon[i][:], c)
		s.byLen[len(c)] |= 1 << i
	}
	return s
}

// Len is the number of names.
func (s *Set) Len() int { return len(s.names) }

// Name returns the i-th name in canonical form (X-Request-Id).
func (s *Set) Name(i int) string { return s.names[i] }

// Lookup returns the index of k's name in the list the set was made from.
func (s *Set) Lookup(k []byte) (int, bool) {
	if len(k) > FastNameLen {
		return s.lookupLong(k)
	}
	for m := s.byLen[len(k)]; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(m)
		if c := s.canon[i][:len(k)]; bytes.Equal(c, k) || bytes.EqualFold(c, k) {
			return i, true
		}
	}
	return 0, false
}

// lookupLong is Lookup for a key longer than FastNameLen.
func (s *Set) lookupLong(k []byte) (int, bool) {
	for m := s.long; m != 0; m &= m - 1 {
		i := bits.TrailingZeros32(uint32(m))
		if n := s.names[i]; len(n) == len(k) && bytes.EqualFold([]byte(n), k) {
			return i, true
		}
	}
	return 0, false
}

// Sent returns the name k, found at index i, as the header carries it, for deleting it:
// fasthttp's Del matches a name exactly when header normalizing is off. It copies k only
// when k is not in the canonical form (never while normalizing is on).
func (s *Set) Sent(i int, k []byte) string {
	if c := s.names[i]; string(k) == c {
		return c
	}
	return string(k)
}

// Present is the mask of the set's names found in all (a header's All).
func (s *Set) Present(all iter.Seq2[[]byte, []byte]) Mask {
	var m Mask
	for k := range all {
		if i, ok := s.Lookup(k); ok {
			m |= 1 << i
		}
	}
	return m
}

// DeleteRequest deletes the names of m from h by their canonical form: h must normalize
// header names (fasthttp's default), or a name sent in another case stays.
func (s *Set) DeleteRequest(h *fasthttp.RequestHeader, m Mask) {
	for ; m != 0; m &= m - 1 {
		h.Del(s.names[bits.TrailingZeros32(uint32(m))])
	}
}

// DeleteResponse is DeleteRequest for a response header.
func (s *Set) DeleteResponse(h *fasthttp.ResponseHeader, m Mask) {
	for ; m != 0; m &= m - 1 {
		h.Del(s.names[bits.TrailingZeros32(uint32(m))])
	}
}

// StripRequest deletes the set's names from h in one pass over its headers, whatever
// their case and whether h normalizes names or not; usually none is present and nothing
// is deleted (nor allocated).
func (s *Set) StripRequest(h *fasthttp.RequestHeader) {
	var buf [8]string
	del := buf[:0]
	for k := range h.All() {
		if i, ok := s.Lookup(k); ok {
			del = append(del, s.Sent(i, k))
		}
	}
	for _, k := range del {
		h.Del(k)
	}
}

// StripResponse is StripRequest for a response header.
func (s *Set) StripResponse(h *fasthttp.ResponseHeader) {
	var buf [8]string
	del := buf[:0]
	for k := range h.All() {
		if i, ok := s.Lookup(k); ok {
			del = append(del, s.Sent(i, k))
		}
	}
	for _, k := range del {
		h.Del(k)
	}
}
