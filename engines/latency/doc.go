// Package latency holds the mock engine's timing models: Legacy (per-request delays, the
// reference mock's model) and Batched (continuous batching on GPU workers with a step-time
// model). Both are pure and deterministic: they take times and durations as values,
// derive jitter from the request ID (and an optional seed), and never read a clock, start
// goroutines, log or do I/O. The mock engine's HTTP layer drives them.
//
// Units: time.Duration for delays, tokens as ints; every delay is multiplied by the
// configured time scale.
package latency
