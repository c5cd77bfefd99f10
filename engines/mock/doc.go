// Package mock is Switchyard's mock inference engine: an OpenAI-compatible fasthttp
// server (chat completions, completions, responses, embeddings, models, health) whose
// timing comes from the pure models in engines/latency and whose prefix reuse comes from
// the LRU cache in engines/kvcache. It also serves the NDJSON stats stream
// (/pylon/v1/stats/stream), /kv-cache/stats, /metrics (its own switchyard_engine_ names,
// or vLLM's with Config.MetricsNames) and, for tests and benchmarks only, fault injection
// (/test-control, served only with Config.EnableTestControl, the --enable-test-control
// flag).
//
// Token counts: input = x-input-tokens when present, else the body estimate: the number
// of Unicode characters of every message's text content (completions: of the prompt
// strings, plus one per token ID), at least the number of messages, at least 1 — the
// reference mock's estimator. Output = x-output-tokens when present (it wins over
// max_tokens, as in the reference), else min(max_tokens, max_completion_tokens,
// max_output_tokens, --num-tokens); at least 1.
//
// Prefix cache key: x-cache-affinity-key when present (one entry per key, growing to the
// longest prompt seen), else a chain of xxh3 hashes over the prompt content (role and text
// of each message) in 64-byte blocks, each hash covering the whole prefix to its block,
// with the input tokens spread over blocks in proportion to their bytes; reuse stops at
// the first block not cached. LRU eviction by tokens; the five x-kv-cache-* headers report
// each request's outcome.
//
// Legacy timing (the reference mock engine's model): semaphore → cache lookup → sleep
// uncached/prefill rate → commit → headers → TTFT + jitter → first token → (token delay +
// jitter) per later token. Batched timing (continuous batching): a driver goroutine
// advances latency.Batched at each step end and wakes the requests whose tokens are ready;
// a request goes to the worker that caches most of its prefix, else the least-loaded one.
//
// Streaming bodies are handed to fasthttp as body streams that implement
// fasthttp.BodyWriterTo: WriteTo blocks in the connection's serving goroutine until the
// next event is due, renders it into a pooled buffer and writes it as one flushed chunk,
// so a waiting stream holds no goroutine, pipe or buffer of its own (Read, the fallback,
// returns one event per call). Close releases the concurrency slot and reports the
// request. Memory per open stream is ~14 KB (BenchmarkOpenStreamMemory): the serving
// goroutine's 8 KiB stack, the RequestCtx, the 1 KiB write buffer (--write-buffer-bytes)
// and the stream's state; the server runs with ReduceMemoryUsage, so the 4 KiB read buffer
// (--read-buffer-bytes, which caps request headers) is pooled while a stream is open, and
// the request body, prompt copy and prefix hashes are dropped once the prompt is cached.
package mock
