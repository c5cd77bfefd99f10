package score_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard/switchyard/bench/score"
)

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	// 10 observations: 2 ≤ 0.1, 6 ≤ 0.2, 9 ≤ 0.5, 10 in total.
	b := []score.Bucket{{0.1, 2}, {0.2, 6}, {0.5, 9}, {inf, 10}}
	tests := []struct {
		name    string
		buckets []score.Bucket
		q       float64
		want    float64
	}{
		{"within the first bucket, from 0", b, 0.1, 0.05},
		{"median interpolated in its bucket", b, 0.5, 0.175},
		{"p90 at a bucket's upper bound", b, 0.9, 0.5},
		{"in the +Inf bucket: the largest finite bound", b, 0.95, 0.5},
		{"no observations", []score.Bucket{{0.1, 0}, {inf, 0}}, 0.5, 0},
		{"no buckets", nil, 0.5, 0},
	}
	for _, tt := range tests {
		if got := score.HistogramQuantile(tt.buckets, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: HistogramQuantile(q=%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

// The TTFT-estimate figures come from the gateway histograms' deltas, summed over
// clusters and models (any metrics prefix); a run without them has none.
func TestScoreTTFTEstimate(t *testing.T) {
	t.Parallel()
	deltas := map[string]float64{}
	bucket := func(name, cluster, le string, v float64) {
		deltas[`sy_`+name+`_bucket{model="m",cluster_id="`+cluster+`",le="`+le+`"}`] = v
	}
	// Cluster a: 4 attempts with errors ≤ 5 %; cluster b: 2 ≤ 5 %, 3 ≤ 10 %, 1 beyond.
	bucket("ttft_estimate_error_ratio", "a", "0.05", 4)
	bucket("ttft_estimate_error_ratio", "a", "0.1", 4)
	bucket("ttft_estimate_error_ratio", "a", "+Inf", 4)
	bucket("ttft_estimate_error_ratio", "b", "0.05", 2)
	bucket("ttft_estimate_error_ratio", "b", "0.1", 5)
	bucket("ttft_estimate_error_ratio", "b", "+Inf", 6)
	bucket("ttft_estimate_error_seconds", "a", "0.01", 8)
	bucket("ttft_estimate_error_seconds", "a", "0.1", 10)
	bucket("ttft_estimate_error_seconds", "a", "+Inf", 10)
	deltas[`sy_ttft_estimate_exceeded_total{model="m",cluster_id="b"}`] = 4
	s := score.Score(&score.Input{Algorithm: "x", MetricDeltas: deltas})
	// Ratio: 10 attempts, 6 ≤ 0.05, 9 ≤ 0.1: p50 at rank 5 → 0.05 × 5/6; p90 at rank 9 → 0.1.
	// Seconds: p50 at rank 5 → 0.01 × 5/8; p90 at rank 9 → 0.01 + 0.09 × 1/2.
	want := &score.EstimateError{
		Attempts: 10, P50Relative: 0.05 * 5 / 6, P90Relative: 0.1,
		P50: time.Duration(0.01 * 5 / 8 * float64(time.Second)), P90: 55 * time.Millisecond, Exceeded: 0.4,
	}
	if diff := cmp.Diff(want, s.TTFTEstimate, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("TTFTEstimate (-want +got):\n%s", diff)
	}
	if s := score.Score(&score.Input{Algorithm: "x"}); s.TTFTEstimate != nil {
		t.Errorf("without the histograms: %+v, want nil", s.TTFTEstimate)
	}
}

// Buckets that did not change over the run stay among the deltas, so a quantile whose
// observations all fell into one high bucket interpolates from the bound below it (here
// 0.9), not from 0.
func TestDeltasKeepEmptyBuckets(t *testing.T) {
	t.Parallel()
	page := func(low, high float64) string {
		return "sy_ttft_estimate_error_ratio_bucket{model=\"m\",cluster_id=\"a\",le=\"0.9\"} " + ftoa(low) + "\n" +
			"sy_ttft_estimate_error_ratio_bucket{model=\"m\",cluster_id=\"a\",le=\"1\"} " + ftoa(high) + "\n" +
			"sy_ttft_estimate_error_ratio_bucket{model=\"m\",cluster_id=\"a\",le=\"+Inf\"} " + ftoa(high) + "\n"
	}
	deltas := score.MetricDeltas([][2]string{{page(0, 0), page(0, 10)}})
	if _, ok := deltas[`sy_ttft_estimate_error_ratio_bucket{model="m",cluster_id="a",le="0.9"}`]; !ok {
		t.Fatalf("the unchanged bucket is missing from the deltas: %v", deltas)
	}
	s := score.Score(&score.Input{Algorithm: "x", MetricDeltas: deltas})
	if s.TTFTEstimate == nil || math.Abs(s.TTFTEstimate.P50Relative-0.95) > 1e-9 {
		t.Errorf("p50 relative error %+v, want 0.95 (interpolated between 0.9 and 1)", s.TTFTEstimate)
	}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
