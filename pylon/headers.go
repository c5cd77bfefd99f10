package pylon

import (
	"bytes"
	"iter"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/control"
)

// hopByHop are the hop-by-hop headers removed in both directions (LIBRARIES.md §2.3).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer", "Upgrade", "Proxy-Connection"}

// headerSet is a fixed list of header names (at most 64) that a proxy removes. It walks a
// header once to find which of them are present and deletes only those: a fasthttp Del
// normalizes the name and scans every header, and the names are usually all absent.
type headerSet []string

// find returns the index of key in s (case-insensitive), or −1.
func (s headerSet) find(key []byte) int {
	for i, name := range s {
		if len(name) == len(key) && bytes.EqualFold(key, []byte(name)) {
			return i
		}
	}
	return -1
}

// present is the bitmask of the names of s found in all.
func (s headerSet) present(all iter.Seq2[[]byte, []byte]) uint64 {
	var m uint64
	for k := range all {
		if i := s.find(k); i >= 0 {
			m |= 1 << i
		}
	}
	return m
}

// stripRequest deletes the names of s from h.
func (s headerSet) stripRequest(h *fasthttp.RequestHeader) {
	for m, i := s.present(h.All()), 0; m != 0; m, i = m>>1, i+1 {
		if m&1 != 0 {
			h.Del(s[i])
		}
	}
}

// stripResponse deletes the names of s from h.
func (s headerSet) stripResponse(h *fasthttp.ResponseHeader) {
	for m, i := s.present(h.All()), 0; m != 0; m, i = m>>1, i+1 {
		if m&1 != 0 {
			h.Del(s[i])
		}
	}
}

var (
	// toEngine are removed from a request before the engine: hop-by-hop headers and the
	// gateway's routing headers the engine must not see.
	toEngine = append(headerSet{control.HeaderExpectedQueueMs, control.HeaderDispatchSeq, control.HeaderDynamoPriority, control.HeaderDynamoStrict}, hopByHop...)
	// hopOnly are the hop-by-hop headers alone (the health probe, both ways).
	hopOnly = headerSet(hopByHop)
)

// fromEngineSet lists what is removed from an engine response: the hop-by-hop headers, the
// engine's retry signal (index 0, read first) and any retry signalling of ours it echoed.
func fromEngineSet(upstreamRetryHeader string) headerSet {
	return append(headerSet{upstreamRetryHeader, control.HeaderRetryable, control.HeaderRetryReason, control.HeaderRetryAfterMs}, hopByHop...)
}
