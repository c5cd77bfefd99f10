package pylon

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/headerset"
	"github.com/switchyard/switchyard/internal/wire"
)

// hopByHop are the hop-by-hop headers removed in both directions (fasthttp's client does not
// strip them).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer", "Upgrade", "Proxy-Connection"}

var (
	// toEngine are removed from a request before the engine: hop-by-hop headers and the
	// gateway's routing headers the engine must not see.
	toEngine = headerset.New(append([]string{wire.HeaderExpectedQueueMs, wire.HeaderDispatchSeq, wire.HeaderPrefillTokens, wire.HeaderConversation, wire.HeaderDynamoPriority, wire.HeaderDynamoStrict}, hopByHop...)...)
	// hopOnly are the hop-by-hop headers alone (the health probe, both ways).
	hopOnly = headerset.New(hopByHop...)
)

// fromEngineSet lists what is removed from an engine response: the hop-by-hop headers, the
// engine's retry signal (index 0, read first) and any retry signalling of ours it echoed.
func fromEngineSet(upstreamRetryHeader string) *headerset.Set {
	return headerset.New(append([]string{upstreamRetryHeader, wire.HeaderRetryable, wire.HeaderRetryReason, wire.HeaderRetryAfterMs}, hopByHop...)...)
}

// Indexes of toEngine's routing names.
const (
	toEngineExpected = 0
	toEngineSeq      = 1
	toEnginePrefill  = 2
	toEngineConv     = 3
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
	expected, seq, prefill                  []byte
	affinityKey, conversation               []byte
	hasRequestID, hasModel, hasPriority     bool
	strip                                   headerset.Mask // toEngine names present
}

func (d *dataHeaders) collect(h *fasthttp.RequestHeader) {
	for k, v := range h.All() {
		if i, ok := toEngine.Lookup(k); ok {
			if d.strip&(1<<i) == 0 {
				switch i {
				case toEngineExpected:
					d.expected = v
				case toEngineSeq:
					d.seq = v
				case toEnginePrefill:
					d.prefill = v
				case toEngineConv:
					d.conversation = v
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
		case d.affinityKey == nil && equalFold(k, wire.HeaderCacheAffinityKey):
			d.affinityKey = nonNil(v)
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
