package score

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EstimateError is how far the gateway's TTFT estimates were from the times to first byte
// it observed over one run (docs/routing.md, "TTFT estimate accuracy"): quantiles of the
// relative error |observed − estimate| / estimate and of the absolute error, from the run's
// deltas of the gateway's ttft_estimate_error_ratio and ttft_estimate_error_seconds
// histograms (every cluster and model together), interpolated linearly within buckets as
// Prometheus's histogram_quantile does. The estimate is the routing decision's, correction
// included when the algorithm applies it.
type EstimateError struct {
	// Attempts is the number of observed attempts (streamed, not failed).
	Attempts    int           `json:"attempts"`
	P50Relative float64       `json:"p50_relative"`
	P90Relative float64       `json:"p90_relative"`
	P50         time.Duration `json:"p50_ns"`
	P90         time.Duration `json:"p90_ns"`
	// Exceeded is the share of attempts whose first byte came later than estimated.
	Exceeded float64 `json:"exceeded_share"`
}

// The gateway's TTFT-estimate series (any --metrics-prefix).
const (
	ttftErrorRatio   = "ttft_estimate_error_ratio"
	ttftErrorSeconds = "ttft_estimate_error_seconds"
	ttftExceeded     = "ttft_estimate_exceeded_total"
)

// estimateError summarises the TTFT-estimate histograms in deltas; nil when the run
// observed no attempt (an older gateway, or no streamed answer).
func estimateError(deltas map[string]float64) *EstimateError {
	ratio, seconds := histogramBuckets(deltas, ttftErrorRatio), histogramBuckets(deltas, ttftErrorSeconds)
	n := total(ratio)
	if n <= 0 {
		return nil
	}
	return &EstimateError{
		Attempts:    int(math.Round(n)),
		P50Relative: HistogramQuantile(ratio, 0.5),
		P90Relative: HistogramQuantile(ratio, 0.9),
		P50:         time.Duration(HistogramQuantile(seconds, 0.5) * float64(time.Second)),
		P90:         time.Duration(HistogramQuantile(seconds, 0.9) * float64(time.Second)),
		Exceeded:    sumBy(deltas, ttftExceeded, "")[""] / n,
	}
}

// Bucket is one cumulative histogram bucket: Count observations at or below UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// histogramBuckets sums the deltas of the <name>_bucket series over every label but le,
// in ascending bound order (MetricDeltas keeps buckets whose delta is 0, so a quantile
// interpolates from the bound of the bucket below, as histogram_quantile does).
func histogramBuckets(deltas map[string]float64, name string) []Bucket {
	byBound := map[float64]float64{}
	for k, v := range deltas {
		s := ParseSeries(k)
		if !strings.HasSuffix(s.Name, name+"_bucket") {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		byBound[le] += v
	}
	out := make([]Bucket, 0, len(byBound))
	for le, c := range byBound {
		out = append(out, Bucket{UpperBound: le, Count: c})
	}
	slices.SortFunc(out, func(a, b Bucket) int { return cmpFloat(a.UpperBound, b.UpperBound) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// total is the observation count of cumulative buckets (the last, +Inf, bucket's).
func total(buckets []Bucket) float64 {
	if len(buckets) == 0 {
		return 0
	}
	return buckets[len(buckets)-1].Count
}

// HistogramQuantile is the q-quantile of cumulative buckets sorted by bound, as
// Prometheus's histogram_quantile computes it: linear interpolation within the bucket
// holding rank q × total (the first bucket's lower bound is 0); a rank in the +Inf
// bucket gives the largest finite bound. 0 without observations.
func HistogramQuantile(buckets []Bucket, q float64) float64 {
	n := total(buckets)
	if n <= 0 {
		return 0
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for _, b := range buckets {
		if b.Count >= rank {
			if math.IsInf(b.UpperBound, 1) {
				return lower
			}
			if b.Count == below {
				return b.UpperBound
			}
			return lower + (b.UpperBound-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.UpperBound, b.Count
	}
	return lower
}
