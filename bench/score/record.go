// Package score turns the driver's per-request records into the per-algorithm figures
// of the reference bench's report: success, throughput, latency percentiles, balance, cache and
// stickiness summaries, failure groups and Prometheus counter deltas. It is pure: the
// run's length and the scraped metrics text are inputs.
package score

import "time"

// Record is the outcome of one request, as the driver observed it.
type Record struct {
	Index        int    `json:"index"`
	ID           string `json:"id"`
	Class        string `json:"class"`
	AffinityKey  string `json:"affinity_key,omitempty"`
	RoutingKey   string `json:"routing_key,omitempty"`
	InputTokens  uint64 `json:"input_tokens"`
	WantedOutput uint64 `json:"wanted_output_tokens"`
	// Sent is when the request was sent, from the start of the run.
	Sent time.Duration `json:"sent_ns"`
	// Status is the HTTP status (0 when no response arrived).
	Status int `json:"status"`
	// Error is the transport or stream error, or the error body's message.
	Error string `json:"error,omitempty"`
	// ErrorCode is x-stargate-error-code, when present.
	ErrorCode string `json:"error_code,omitempty"`
	// TTFT is the time from sending to the first SSE event with content (0 if none).
	TTFT time.Duration `json:"ttft_ns"`
	// TTLT is the time from sending to the last byte.
	TTLT time.Duration `json:"ttlt_ns"`
	// OutputTokens counts content events received.
	OutputTokens uint64 `json:"output_tokens"`
	// Backend is x-inference-server-id; Cluster is x-stargate-cluster-id.
	Backend string `json:"backend,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	// KV is the mock engine's x-kv-cache-* headers, when present.
	KV *KV `json:"kv,omitempty"`
	// EngineQueued says the mock engine made the request wait for a concurrency slot
	// (x-engine-queued): routing pushed its engine past its concurrency.
	EngineQueued bool `json:"engine_queued,omitempty"`
	// Retries is the gateway's retry count for this request when it reports one.
	Retries int `json:"retries,omitempty"`
	// Completed is false when the stream ended before its terminating event.
	Completed bool `json:"completed"`
}

// KV is the prefix-cache outcome the engine reported for one request.
type KV struct {
	Hit            bool   `json:"hit"`
	ReusedInput    uint64 `json:"reused_input_tokens"`
	UncachedInput  uint64 `json:"uncached_input_tokens"`
	EvictedEntries uint64 `json:"evicted_entries"`
	EvictedTokens  uint64 `json:"evicted_tokens"`
}

// OK reports whether the request succeeded: a 2xx status and a complete body.
func (r *Record) OK() bool {
	return r.Status >= 200 && r.Status < 300 && r.Error == "" && r.Completed
}
