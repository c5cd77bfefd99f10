// Package lb holds the pure load balancers of the gateway: power-of-n, round-robin,
// random, wait-and-widen (TTFT buckets, affinity ring, affinity hold X, prefill discount,
// queue-SLO interpolation, capacity check), pulsar (weighted rendezvous hashing) and
// pulsar-wait-and-widen, plus cluster aggregation and input-work admission.
//
// The model: a scheduler owns one Balancer per (routing target, algorithm definition) and
// asks it Decide(snapshot, request, elapsed) for every routing attempt. The answer is
// three-valued: Selected (a candidate index and its rank depth; rank 1 = primary), Wait
// (nothing is selectable now, but time passing can change that: a bucket unlocks or the
// affinity hold expires) or Unavailable (only fresh stats can help).
//
// Invariants:
//   - A Selected index is a non-excluded candidate; wait-and-widen only selects candidates
//     with capacity (running < max engine concurrency + max_queued, or an unknown limit).
//   - elapsed is always measured from the request's arrival, never from the attempt.
//   - Affinity group membership is computed before retry exclusions.
//   - Balancers are not safe for concurrent use: each is owned by one scheduler, which
//     keeps its per-instance state (round-robin counter, ring, key caches) lock-free.
//   - Randomness is injected (Rand), so decisions are reproducible in tests.
//
// Units: estimates are load.Millis (float64 ms, +Inf = never); waits and elapsed times are
// time.Duration. No clock, no I/O, no logging.
package lb
