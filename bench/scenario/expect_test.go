package scenario_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/scenarios"
)

// twoAlgorithms is minimal with a second algorithm, so ranks and ratios have a peer.
const twoAlgorithms = minimal + `  - name: waw
    config: {default: wait-and-widen}
`

func withExpect(entries string) string { return twoAlgorithms + "expect:\n" + entries }

func TestExpectDecodes(t *testing.T) {
	t.Parallel()
	s := parse(t, withExpect(`
  - {metric: cache_hit_rate, algorithm: waw, op: ">=", value: 0.85, note: target}
  - {metric: cache_hit_rate, algorithm: waw, op: ">=", ratio_to: rr, value: 1.8}
  - {metric: max_cluster_share, algorithm: "*", op: "<=", value: 0.6}
  - {metric: ttft_p99_ms, algorithm: waw, op: "<=", ratio_to: "*", value: 0.5}
  - {metric: ttft_mean_ms, algorithm: waw, op: lowest}
  - metric: goodput_rps
    algorithm: rr
    op: highest
  - {metric: fallbacks, algorithm: rr, op: "==", value: 0}
  - {metric: retries, algorithm: rr, op: <, value: 3}
  - {metric: failures, algorithm: rr, op: ">", value: -1}
`))
	f := func(v float64) *float64 { return &v }
	want := []scenario.Expectation{
		{Metric: "cache_hit_rate", Algorithm: "waw", Op: ">=", Value: f(0.85), Note: "target"},
		{Metric: "cache_hit_rate", Algorithm: "waw", Op: ">=", RatioTo: "rr", Value: f(1.8)},
		{Metric: "max_cluster_share", Algorithm: "*", Op: "<=", Value: f(0.6)},
		{Metric: "ttft_p99_ms", Algorithm: "waw", Op: "<=", RatioTo: "*", Value: f(0.5)},
		{Metric: "ttft_mean_ms", Algorithm: "waw", Op: "lowest"},
		{Metric: "goodput_rps", Algorithm: "rr", Op: "highest"},
		{Metric: "fallbacks", Algorithm: "rr", Op: "==", Value: f(0)},
		{Metric: "retries", Algorithm: "rr", Op: "<", Value: f(3)},
		{Metric: "failures", Algorithm: "rr", Op: ">", Value: f(-1)},
	}
	if d := cmp.Diff(want, s.Expect); d != "" {
		t.Errorf("expect (-want +got):\n%s", d)
	}
	checks := make([]string, 0, len(s.Expect))
	for i := range s.Expect {
		checks = append(checks, s.Expect[i].String())
	}
	wantChecks := []string{
		"cache_hit_rate of waw >= 0.85",
		"cache_hit_rate of waw >= 1.8 × rr's",
		"max_cluster_share of every algorithm <= 0.6",
		"ttft_p99_ms of waw <= 0.5 × each other's",
		"ttft_mean_ms of waw lowest of all",
		"goodput_rps of rr highest of all",
		"fallbacks of rr == 0",
		"retries of rr < 3",
		"failures of rr > -1",
	}
	if d := cmp.Diff(wantChecks, checks); d != "" {
		t.Errorf("checks (-want +got):\n%s", d)
	}
}

// A scenario without an expect section has none (and behaves as before).
func TestExpectIsOptional(t *testing.T) {
	t.Parallel()
	if s := parse(t, twoAlgorithms); s.Expect != nil {
		t.Errorf("expect %+v", s.Expect)
	}
}

// Each bad entry gives one precise message naming the entry's index and field.
func TestExpectRejects(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, entry, want string }{
		{
			"unknown metric", `{metric: cache_hits, algorithm: rr, op: ">", value: 0}`,
			`expect[0].metric: "cache_hits" is not a metric (want one of admission_disabled, admission_rejected, cache_evictions, cache_hit_rate,`,
		},
		{
			"unknown algorithm", `{metric: fallbacks, algorithm: pulsar, op: ">", value: 0}`,
			`expect[0].algorithm: "pulsar" is not an algorithm of this scenario (it has rr, waw)`,
		},
		{
			"missing algorithm", `{metric: fallbacks, op: ">", value: 0}`,
			`expect[0].algorithm: is required: an algorithm of this scenario or "*" for each`,
		},
		{
			"unknown ratio_to", `{metric: fallbacks, algorithm: rr, op: ">", ratio_to: nope, value: 1}`,
			`expect[0].ratio_to: "nope" is not an algorithm of this scenario (it has rr, waw)`,
		},
		{
			"ratio_to itself", `{metric: fallbacks, algorithm: rr, op: ">", ratio_to: rr, value: 1}`,
			`expect[0].ratio_to: "rr" compares the algorithm with itself`,
		},
		{
			"bad op", `{metric: fallbacks, algorithm: rr, op: "=>", value: 0}`,
			`expect[0].op: "=>" is not an op (want one of <, <=, >, >=, ==, lowest, highest (quote the symbols in YAML: op: ">="))`,
		},
		{
			"missing op", `{metric: fallbacks, algorithm: rr, value: 0}`,
			`expect[0].op: is required (want one of <, <=, >, >=, ==, lowest, highest`,
		},
		{
			"missing value", `{metric: fallbacks, algorithm: rr, op: ">"}`,
			`expect[0].value: is required for op ">"`,
		},
		{
			"infinite value", `{metric: fallbacks, algorithm: rr, op: ">", value: .inf}`,
			`expect[0].value: is +Inf, want a finite number`,
		},
		{
			"negative factor", `{metric: fallbacks, algorithm: rr, op: ">", ratio_to: waw, value: -1}`,
			`expect[0].value: is -1, want a factor ≥ 0 with ratio_to`,
		},
		{
			"value with lowest", `{metric: fallbacks, algorithm: rr, op: lowest, value: 1}`,
			`expect[0].value: is not allowed with op "lowest"`,
		},
		{
			"ratio_to with highest", `{metric: fallbacks, algorithm: rr, op: highest, ratio_to: waw}`,
			`expect[0].ratio_to: is not allowed with op "highest"`,
		},
		{
			"every algorithm lowest", `{metric: fallbacks, algorithm: "*", op: lowest}`,
			`expect[0].algorithm: must name one algorithm with op "lowest", not "*"`,
		},
		{
			"unknown field", `{metric: fallbacks, algorithm: rr, op: ">", value: 0, ratio: 2}`,
			`unknown field "ratio"`,
		},
		{
			"value not a number", `{metric: fallbacks, algorithm: rr, op: ">", value: lots}`,
			`cannot unmarshal !!str`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			doc := withExpect("  - " + c.entry + "\n")
			_, err := scenario.Parse([]byte(doc))
			if !errors.Is(err, scenario.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, c.want)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
				t.Errorf("%d messages, want 1: %v", n, err)
			}
		})
	}
}

// The index in the message is the bad entry's.
func TestExpectMessageNamesTheEntry(t *testing.T) {
	t.Parallel()
	_, err := scenario.Parse([]byte(withExpect(`
  - {metric: fallbacks, algorithm: rr, op: ">", value: 0}
  - {metric: fallbacks, algorithm: rr, op: ">", value: 0}
  - {metric: fallback, algorithm: rr, op: ">", value: 0}
`)))
	if err == nil || !strings.HasPrefix(scenario.OneLine(err), `invalid scenario: expect[2].metric: "fallback" is not a metric`) {
		t.Errorf("error %v", err)
	}
}

func TestRankedOpNeedsTwoAlgorithms(t *testing.T) {
	t.Parallel()
	_, err := scenario.Parse([]byte(minimal + "expect:\n  - {metric: fallbacks, algorithm: rr, op: highest}\n"))
	if err == nil || !strings.Contains(err.Error(), `expect[0].op: "highest" needs at least two algorithms in the scenario`) {
		t.Errorf("error %v", err)
	}
}

// Every bundled scenario's expect section validates against its own algorithms, and the
// scenarios make quality runs carry one.
func TestBundledExpectSectionsValidate(t *testing.T) {
	t.Parallel()
	quality := []string{
		"demo", "lb-balance-smoke-2c2p-1s", "overload-6-backends", "lb-balance-prefix-reuse-4c2p-2s",
		"lb-balance-prefix-reuse-pulsar-wait-and-widen-slo-4c2p-1s",
	}
	for _, n := range scenarios.Names() {
		data, err := scenarios.Read(n)
		if err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Parse(data)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if slices.Contains(quality, n) && len(s.Expect) == 0 {
			t.Errorf("%s: no expect section", n)
		}
		names := make([]string, 0, len(s.Algorithms))
		for _, a := range s.Algorithms {
			names = append(names, a.Name)
		}
		for i, e := range s.Expect {
			for _, a := range []string{e.Algorithm, e.RatioTo} {
				if a != "" && a != scenario.AllAlgorithms && !slices.Contains(names, a) {
					t.Errorf("%s: expect[%d] names %q, not one of %v", n, i, a, names)
				}
			}
		}
	}
}
