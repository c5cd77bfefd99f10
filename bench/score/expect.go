package score

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/switchyard/switchyard/bench/scenario"
)

// Status is the verdict of one expectation check.
type Status string

// Verdicts. A check is skipped when an algorithm it needs did not run (bench run
// --algorithms); a metric that is undefined in the run (no cache headers, no successful
// request) misses.
const (
	Met     Status = "met"
	Missed  Status = "missed"
	Skipped Status = "skipped"
)

// Observed is one algorithm's value of the checked metric; nil when undefined in its run.
type Observed struct {
	Algorithm string   `json:"algorithm"`
	Value     *float64 `json:"value"`
}

// Outcome is one check of a scenario's expect entry against a run. An entry whose
// algorithm or ratio_to is "*" gives one outcome per algorithm (or pair) that ran.
type Outcome struct {
	// Entry is the entry's index in the scenario's expect list.
	Entry     int      `json:"entry"`
	Metric    string   `json:"metric"`
	Algorithm string   `json:"algorithm"`
	Op        string   `json:"op"`
	Value     *float64 `json:"value,omitempty"`
	RatioTo   string   `json:"ratio_to,omitempty"`
	// Check is the check in one line, with "*" resolved.
	Check  string `json:"check"`
	Status Status `json:"status"`
	// Observed is the algorithm's value first, then ratio_to's, or for lowest and highest
	// every other algorithm's.
	Observed []Observed `json:"observed"`
	// Reason says why a check was skipped or missed without a comparison.
	Reason string `json:"reason,omitempty"`
	Note   string `json:"note,omitempty"`
}

// tolerance is the relative slack of ==, <= and >=, so a bound computed as a product
// (value × another algorithm's metric) is not missed by a rounding error.
const tolerance = 1e-9

// Evaluate checks every expect entry of s against the runs' summaries. Entries naming an
// algorithm that did not run are skipped; "*" covers the algorithms that ran; lowest and
// highest need every algorithm of the scenario to have run.
func Evaluate(s *scenario.Scenario, runs []Summary) []Outcome {
	byName := make(map[string]*Summary, len(runs))
	ran := make([]string, 0, len(runs))
	for i := range runs {
		byName[runs[i].Algorithm] = &runs[i]
		ran = append(ran, runs[i].Algorithm)
	}
	var out []Outcome
	for i := range s.Expect {
		e := s.Expect[i]
		subjects := []string{e.Algorithm}
		if e.Algorithm == scenario.AllAlgorithms {
			subjects = ran
		}
		for _, a := range subjects {
			c := e
			c.Algorithm = a
			if c.Ranked() {
				out = append(out, rank(i, &c, s, byName))
				continue
			}
			others := []string{c.RatioTo}
			if c.RatioTo == scenario.AllAlgorithms {
				others = slices.DeleteFunc(slices.Clone(ran), func(n string) bool { return n == a })
			}
			for _, b := range others {
				if b == a {
					continue // "*" against a named ratio_to: not the named one with itself
				}
				cc := c
				cc.RatioTo = b
				out = append(out, compare(i, &cc, byName))
			}
		}
	}
	return out
}

func newOutcome(entry int, e *scenario.Expectation) Outcome {
	return Outcome{
		Entry: entry, Metric: e.Metric, Algorithm: e.Algorithm, Op: e.Op, Value: e.Value, RatioTo: e.RatioTo,
		Check: e.String(), Note: e.Note,
	}
}

func observe(name, metric string, s *Summary) Observed {
	o := Observed{Algorithm: name}
	if v, ok := MetricValue(s, metric); ok {
		o.Value = &v
	}
	return o
}

func compare(entry int, e *scenario.Expectation, byName map[string]*Summary) Outcome {
	o := newOutcome(entry, e)
	for _, n := range []string{e.Algorithm, e.RatioTo} {
		if n != "" && byName[n] == nil {
			o.Status, o.Reason = Skipped, n+" did not run"
			return o
		}
	}
	a := observe(e.Algorithm, e.Metric, byName[e.Algorithm])
	o.Observed = []Observed{a}
	bound := *e.Value
	if e.RatioTo != "" {
		b := observe(e.RatioTo, e.Metric, byName[e.RatioTo])
		o.Observed = append(o.Observed, b)
		if b.Value == nil {
			o.Status, o.Reason = Missed, fmt.Sprintf("%s is undefined for %s", e.Metric, e.RatioTo)
			return o
		}
		bound *= *b.Value
	}
	if a.Value == nil {
		o.Status, o.Reason = Missed, fmt.Sprintf("%s is undefined for %s", e.Metric, e.Algorithm)
		return o
	}
	o.Status = verdict(holds(*a.Value, e.Op, bound))
	return o
}

func rank(entry int, e *scenario.Expectation, s *scenario.Scenario, byName map[string]*Summary) Outcome {
	o := newOutcome(entry, e)
	for _, alg := range s.Algorithms {
		if byName[alg.Name] == nil {
			o.Status, o.Reason = Skipped, fmt.Sprintf("%s ranks every algorithm and %s did not run", e.Op, alg.Name)
			return o
		}
	}
	a := observe(e.Algorithm, e.Metric, byName[e.Algorithm])
	o.Observed = []Observed{a}
	op := OpFor(e.Op)
	ok := true
	for _, alg := range s.Algorithms {
		if alg.Name == e.Algorithm {
			continue
		}
		b := observe(alg.Name, e.Metric, byName[alg.Name])
		o.Observed = append(o.Observed, b)
		if a.Value != nil && b.Value != nil && !holds(*a.Value, op, *b.Value) {
			ok = false
		}
	}
	if a.Value == nil {
		o.Status, o.Reason = Missed, fmt.Sprintf("%s is undefined for %s", e.Metric, e.Algorithm)
		return o
	}
	o.Status = verdict(ok)
	return o
}

// OpFor returns the comparison a ranked op makes with each other algorithm: lowest is
// "<=", highest ">=" (ties count as met); other ops are returned unchanged.
func OpFor(op string) string {
	switch op {
	case scenario.OpLowest:
		return scenario.OpAtMost
	case scenario.OpHighest:
		return scenario.OpAtLeast
	}
	return op
}

func verdict(ok bool) Status {
	if ok {
		return Met
	}
	return Missed
}

// holds reports whether a op b, with a relative tolerance on ==, <= and >=.
func holds(a float64, op string, b float64) bool {
	slack := tolerance * math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
	switch op {
	case scenario.OpLess:
		return a < b
	case scenario.OpAtMost:
		return a <= b+slack
	case scenario.OpGreater:
		return a > b
	case scenario.OpAtLeast:
		return a >= b-slack
	case scenario.OpEqual:
		return math.Abs(a-b) <= slack
	}
	return false
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func deref(v *float64) (float64, bool) {
	if v == nil {
		return 0, false
	}
	return *v, true
}

// MetricValue returns metric (one of scenario.Metrics) of a scored run, and false when
// it is undefined there: latencies without a successful streamed request, cache figures
// without cache headers, shares and balances without traffic or capacities.
func MetricValue(s *Summary, metric string) (float64, bool) {
	ttft := s.TTFT.Count > 0
	switch metric {
	case scenario.MetricSuccessRate:
		return s.SuccessRate, s.Requests > 0
	case scenario.MetricGoodput:
		return s.SuccessfulRPS, s.Length > 0
	case scenario.MetricOutputGoodput:
		return s.OutputGoodput, s.Length > 0
	case scenario.MetricTTFTMean:
		return millis(s.TTFT.Avg), ttft
	case scenario.MetricTTFTP50:
		return millis(s.TTFT.P50), ttft
	case scenario.MetricTTFTP95:
		return millis(s.TTFT.P95), ttft
	case scenario.MetricTTFTP99:
		return millis(s.TTFT.P99), ttft
	case scenario.MetricTTLTP95:
		return millis(s.TTLT.P95), s.TTLT.Count > 0
	case scenario.MetricCacheHitRate:
		return deref(s.Cache.HitRate)
	case scenario.MetricInputReuseRate:
		return deref(s.Cache.InputReuseRate)
	case scenario.MetricCacheEvictions:
		return float64(s.Cache.Evictions), true
	case scenario.MetricKeyMovement:
		return deref(s.Stickiness.MovementRate)
	case scenario.MetricMaxClusterShare:
		return MaxClusterShare(s)
	case scenario.MetricClusterCapacityBalance:
		return deref(s.ClusterInputCapacityBalance)
	case scenario.MetricPylonCapacityBalance:
		return deref(s.PylonCapacityBalance)
	case scenario.MetricWeakestShare:
		return WeakestShare(s)
	case scenario.MetricFallbacks:
		return s.Counters.FallbackChoices, true
	case scenario.MetricRetries:
		var n float64
		for _, reason := range slices.Sorted(maps.Keys(s.Counters.Retries)) {
			n += s.Counters.Retries[reason]
		}
		return n, true
	case scenario.MetricQueueMismatchRetries:
		return s.Counters.QueueMismatchRetries, true
	case scenario.MetricAdmissionRejected:
		return s.Counters.AdmissionDecisions["rejected"], true
	case scenario.MetricAdmissionDisabled:
		return s.Counters.AdmissionDecisions["disabled"], true
	case scenario.MetricFailures:
		return float64(s.Requests - s.Successes), true
	}
	return 0, false
}

// MaxClusterShare is the largest share of the requests any one cluster received; false
// when no request reached a cluster.
func MaxClusterShare(s *Summary) (float64, bool) {
	var top float64
	routed := 0
	for _, c := range s.Clusters {
		top = math.Max(top, c.RequestShare)
		routed += c.Requests
	}
	return top, routed > 0
}

// WeakestShare is the share of the requests that went to the backends of the smallest
// registered capacity (the fleet's weakest profile); false when the backends' capacities
// are unknown or all equal (no backend is weaker than another) or no request was routed.
func WeakestShare(s *Summary) (float64, bool) {
	low, high := math.Inf(1), math.Inf(-1)
	for _, b := range s.Backends {
		if b.CapacityShare == nil {
			return 0, false
		}
		low, high = math.Min(low, *b.CapacityShare), math.Max(high, *b.CapacityShare)
	}
	if !(low < high) {
		return 0, false
	}
	var share float64
	routed := 0
	for _, b := range s.Backends {
		routed += b.Requests
		if *b.CapacityShare == low {
			share += b.RequestShare
		}
	}
	return share, routed > 0
}

// MissedCount counts the outcomes that missed.
func MissedCount(outs []Outcome) int {
	n := 0
	for i := range outs {
		if outs[i].Status == Missed {
			n++
		}
	}
	return n
}
