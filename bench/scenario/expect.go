package scenario

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Expectation is one machine-checked entry of a scenario's expect list: a metric of one
// algorithm (or of every algorithm, "*") compared with an absolute value, with value ×
// the same metric of another algorithm (ratio_to), or ranked lowest/highest among all the
// scenario's algorithms.
//
//	{metric: cache_hit_rate, algorithm: a, op: ">=", value: 0.85}           # a ≥ 0.85
//	{metric: cache_hit_rate, algorithm: a, op: ">=", ratio_to: b, value: 1.8} # a ≥ 1.8 × b
//	{metric: ttft_mean_ms, algorithm: a, op: lowest}                        # a ≤ every other
type Expectation struct {
	Metric    string `yaml:"metric"`
	Algorithm string `yaml:"algorithm"`
	Op        string `yaml:"op"`
	// Value is the bound, or with RatioTo the factor applied to the other algorithm's
	// value. Required for the comparison ops, not allowed for lowest and highest.
	Value *float64 `yaml:"value"`
	// RatioTo names the algorithm (or "*": each other algorithm) whose metric, times
	// Value, is the bound.
	RatioTo string `yaml:"ratio_to"`
	// Note says why, for readers of the scenario and the report; no effect on the check.
	Note string `yaml:"note"`
}

// AllAlgorithms in algorithm or ratio_to stands for every algorithm of the scenario
// (for ratio_to: every other one).
const AllAlgorithms = "*"

// Metrics an expectation can check, as bench score computes them per algorithm. Latencies
// are in milliseconds of the run's (time-scaled) clock; TTFT counts successful requests
// that streamed at least one token.
const (
	MetricSuccessRate            = "success_rate"             // successes / requests sent
	MetricGoodput                = "goodput_rps"              // successful completions per second of run length
	MetricOutputGoodput          = "output_goodput_tps"       // output tokens of successful requests per second
	MetricTTFTMean               = "ttft_mean_ms"             // mean TTFT
	MetricTTFTP50                = "ttft_p50_ms"              // median TTFT
	MetricTTFTP95                = "ttft_p95_ms"              // 95th percentile TTFT
	MetricTTFTP99                = "ttft_p99_ms"              // 99th percentile TTFT
	MetricTTLTP95                = "ttlt_p95_ms"              // 95th percentile time to last byte
	MetricCacheHitRate           = "cache_hit_rate"           // prefix-cache hits / responses reporting the cache
	MetricInputReuseRate         = "input_reuse_rate"         // reused input tokens / input tokens
	MetricCacheEvictions         = "cache_evictions"          // KV-cache entries evicted
	MetricKeyMovement            = "key_movement"             // share of affinity keys seen on more than one backend
	MetricMaxClusterShare        = "max_cluster_share"        // largest share of requests one cluster received
	MetricClusterCapacityBalance = "cluster_capacity_balance" // cluster input share vs capacity share, 1 = matched
	MetricPylonCapacityBalance   = "pylon_capacity_balance"   // pylon request share vs capacity share, 1 = matched
	MetricWeakestShare           = "weakest_share"            // share of requests the backends of the smallest registered capacity received
	MetricFallbacks              = "fallbacks"                // fallback route choices (gateway counter)
	MetricRetries                = "retries"                  // gateway retries, every reason
	MetricQueueMismatchRetries   = "queue_mismatch_retries"   // gateway retries after a pylon queue-mismatch 429
	MetricAdmissionRejected      = "admission_rejected"       // pylon queue-admission rejections
	MetricAdmissionDisabled      = "admission_disabled"       // pylon queue-admission decisions taken while disabled
	MetricFailures               = "failures"                 // requests that did not succeed
)

// Metrics returns every metric name an expectation accepts, sorted.
func Metrics() []string {
	out := []string{
		MetricSuccessRate, MetricGoodput, MetricOutputGoodput, MetricTTFTMean, MetricTTFTP50, MetricTTFTP95,
		MetricTTFTP99, MetricTTLTP95, MetricCacheHitRate, MetricInputReuseRate, MetricCacheEvictions,
		MetricKeyMovement, MetricMaxClusterShare, MetricClusterCapacityBalance, MetricPylonCapacityBalance,
		MetricWeakestShare,
		MetricFallbacks, MetricRetries, MetricQueueMismatchRetries, MetricAdmissionRejected,
		MetricAdmissionDisabled, MetricFailures,
	}
	slices.Sort(out)
	return out
}

// Expectation ops.
const (
	OpLess    = "<"
	OpAtMost  = "<="
	OpGreater = ">"
	OpAtLeast = ">="
	OpEqual   = "=="
	OpLowest  = "lowest"
	OpHighest = "highest"
)

const opListForError = `<, <=, >, >=, ==, lowest, highest (quote the symbols in YAML: op: ">=")`

// Ranked reports whether the op ranks the algorithm among all others (lowest, highest)
// rather than comparing it with a bound.
func (e *Expectation) Ranked() bool { return e.Op == OpLowest || e.Op == OpHighest }

func (s *Scenario) validateExpect(p *problems) {
	names := make([]string, 0, len(s.Algorithms))
	for _, a := range s.Algorithms {
		names = append(names, a.Name)
	}
	known := func(n string) bool { return n == AllAlgorithms || slices.Contains(names, n) }
	for i := range s.Expect {
		e := &s.Expect[i]
		path := fmt.Sprintf("expect[%d]", i)
		if !slices.Contains(Metrics(), e.Metric) {
			p.add(path+".metric", "%q is not a metric (want one of %s)", e.Metric, strings.Join(Metrics(), ", "))
		}
		switch {
		case e.Algorithm == "":
			p.add(path+".algorithm", `is required: an algorithm of this scenario or "*" for each`)
		case !known(e.Algorithm):
			p.add(path+".algorithm", "%q is not an algorithm of this scenario (it has %s)", e.Algorithm, strings.Join(names, ", "))
		}
		if e.RatioTo != "" {
			switch {
			case !known(e.RatioTo):
				p.add(path+".ratio_to", "%q is not an algorithm of this scenario (it has %s)", e.RatioTo, strings.Join(names, ", "))
			case e.RatioTo == e.Algorithm && e.RatioTo != AllAlgorithms:
				p.add(path+".ratio_to", "%q compares the algorithm with itself", e.RatioTo)
			}
		}
		switch e.Op {
		case OpLess, OpAtMost, OpGreater, OpAtLeast, OpEqual:
			switch {
			case e.Value == nil:
				p.add(path+".value", "is required for op %q", e.Op)
			case math.IsNaN(*e.Value) || math.IsInf(*e.Value, 0):
				p.add(path+".value", "is %v, want a finite number", *e.Value)
			case e.RatioTo != "" && *e.Value < 0:
				p.add(path+".value", "is %v, want a factor ≥ 0 with ratio_to", *e.Value)
			}
		case OpLowest, OpHighest:
			if e.Value != nil {
				p.add(path+".value", "is not allowed with op %q (it ranks the algorithm among the others)", e.Op)
			}
			if e.RatioTo != "" {
				p.add(path+".ratio_to", "is not allowed with op %q (it ranks the algorithm among all the others)", e.Op)
			}
			if e.Algorithm == AllAlgorithms {
				p.add(path+".algorithm", "must name one algorithm with op %q, not %q", e.Op, AllAlgorithms)
			}
			if len(names) < 2 {
				p.add(path+".op", "%q needs at least two algorithms in the scenario", e.Op)
			}
		case "":
			p.add(path+".op", "is required (want one of %s)", opListForError)
		default:
			p.add(path+".op", "%q is not an op (want one of %s)", e.Op, opListForError)
		}
	}
}

// String renders the check in one line, e.g. `cache_hit_rate of a >= 1.8 × b`.
func (e *Expectation) String() string {
	subject := e.Metric + " of " + e.Algorithm
	if e.Algorithm == AllAlgorithms {
		subject = e.Metric + " of every algorithm"
	}
	if e.Ranked() {
		return subject + " " + e.Op + " of all"
	}
	bound := "?"
	if e.Value != nil {
		bound = fmt.Sprintf("%g", *e.Value)
	}
	switch e.RatioTo {
	case "":
	case AllAlgorithms:
		bound += " × each other's"
	default:
		bound += " × " + e.RatioTo + "'s"
	}
	return subject + " " + e.Op + " " + bound
}
