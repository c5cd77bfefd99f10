package pylon

import (
	"bytes"
	"iter"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
)

// hopByHop are the hop-by-hop headers removed in both directions (fasthttp's client does not
// strip them).
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
	toEngine = append(headerSet{wire.HeaderExpectedQueueMs, wire.HeaderDispatchSeq, wire.HeaderDynamoPriority, wire.HeaderDynamoStrict}, hopByHop...)
	// hopOnly are the hop-by-hop headers alone (the health probe, both ways).
	hopOnly = headerSet(hopByHop)
)

// fromEngineSet lists what is removed from an engine response: the hop-by-hop headers, the
// engine's retry signal (index 0, read first) and any retry signalling of ours it echoed.
func fromEngineSet(upstreamRetryHeader string) headerSet {
	return append(headerSet{upstreamRetryHeader, wire.HeaderRetryable, wire.HeaderRetryReason, wire.HeaderRetryAfterMs}, hopByHop...)
}

// Indexes of toEngine's routing names.
const (
	toEngineExpected = 0
	toEngineSeq      = 1
)

// Canonical names of the engine priority headers the dynamo backend sets on every request.
var (
	hdrDynamoPriority = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderDynamoPriority)
	hdrDynamoStrict   = fasthttp.AppendNormalizedHeaderKey(nil, wire.HeaderDynamoStrict)
)

// dataHeaders are the request headers the data path reads, found in one pass over the
// header (fasthttp's Peek normalizes the name and scans every header, once per name),
// together with the toEngine names to delete. The values alias the header: read them
// before the header is modified.
type dataHeaders struct {
	requestID, model, inputTokens, priority []byte
	expected, seq                           []byte
	hasRequestID, hasModel, hasPriority     bool
	strip                                   uint64 // toEngine names present
}

func (d *dataHeaders) collect(h *fasthttp.RequestHeader) {
	for k, v := range h.All() {
		if i := toEngine.find(k); i >= 0 {
			if d.strip&(1<<i) == 0 {
				switch i {
				case toEngineExpected:
					d.expected = v
				case toEngineSeq:
					d.seq = v
				}
			}
			d.strip |= 1 << i
			continue
		}
		switch {
		case !d.hasRequestID && equalFold(k, wire.HeaderRequestID):
			d.requestID, d.hasRequestID = v, true
		case !d.hasModel && equalFold(k, wire.HeaderModel):
			d.model, d.hasModel = v, true
		case d.inputTokens == nil && equalFold(k, wire.HeaderInputTokens):
			d.inputTokens = nonNil(v)
		case !d.hasPriority && equalFold(k, wire.HeaderPriority):
			d.priority, d.hasPriority = v, true
		}
	}
}

func equalFold(k []byte, name string) bool {
	return len(k) == len(name) && bytes.EqualFold(k, []byte(name))
}

// nonNil keeps a present but empty value distinguishable from an absent one.
func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// deleteMask deletes the names of s whose bits are set in m.
func (s headerSet) deleteMask(h *fasthttp.RequestHeader, m uint64) {
	for i := 0; m != 0; m, i = m>>1, i+1 {
		if m&1 != 0 {
			h.Del(s[i])
		}
	}
}
