package engine_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard/switchyard/pylon/engine"
)

// Counters are rates only across two scrapes of one engine process.
func TestRatesOnlyAcrossOneProcess(t *testing.T) {
	t.Parallel()
	fig := func(prompt, gen, created float64, series int, waiting float64) *engine.Figures {
		return &engine.Figures{PromptTokensTotal: prompt, GenerationTokensTotal: gen, CountersCreated: created, CounterSeries: series, Waiting: waiting}
	}
	type step struct {
		after      time.Duration // since the previous scrape
		f          *engine.Figures
		gen, promp float64
		skip       string
	}
	for name, steps := range map[string][]step{
		"steady": {
			{0, fig(1e6, 5e6, 100, 2, 0), 0, 0, engine.RateFirst},
			{time.Second, fig(1e6+500, 5e6+80, 100, 2, 0), 80, 0, ""}, // no queue: no prompt rate
			{2 * time.Second, fig(1e6+500, 5e6+80, 100, 2, 0), 0, 0, ""},
			{time.Second, fig(1e6+2500, 5e6+80, 100, 2, 3), 0, 0, ""}, // a queue in this scrape only
			{time.Second, fig(1e6+4500, 5e6+100, 100, 2, 4), 20, 2000, ""},
		},
		"restart: counters go down": {
			{0, fig(1e6, 5e6, 0, 2, 0), 0, 0, engine.RateFirst},
			{time.Second, fig(300, 1000, 0, 2, 0), 0, 0, engine.RateReset},
			{time.Second, fig(400, 1100, 0, 2, 0), 100, 0, ""},
		},
		"restart: _created changes while the counters grew past their old values": {
			{0, fig(100, 200, 1000, 2, 0), 0, 0, engine.RateFirst},
			{time.Second, fig(5e6, 6e6, 1060, 2, 0), 0, 0, engine.RateReset},
		},
		"a counter series appears": {
			{0, fig(100, 200, 0, 2, 0), 0, 0, engine.RateFirst},
			{time.Second, fig(5e6, 6e6, 0, 4, 0), 0, 0, engine.RateReset},
		},
		"a gap longer than a few intervals": {
			{0, fig(100, 200, 0, 2, 0), 0, 0, engine.RateFirst},
			{engine.MaxRateGap + time.Millisecond, fig(100, 9200, 0, 2, 0), 0, 0, engine.RateGap},
			{engine.MaxRateGap, fig(100, 9200+4*engine.MaxRateGap.Seconds(), 0, 2, 0), 4, 0, ""},
		},
		"no token counters": {
			{0, fig(nan, nan, 0, 0, 3), 0, 0, ""},
			{time.Second, fig(nan, nan, 0, 0, 3), 0, 0, ""},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var r engine.Rates
			now := t0
			for i, s := range steps {
				now = now.Add(s.after)
				gen, prompt, skip := r.Observe("m", s.f, now)
				if gen != s.gen || prompt != s.promp || skip != s.skip {
					t.Errorf("scrape %d: gen %v prompt %v skip %q, want %v %v %q", i, gen, prompt, skip, s.gen, s.promp, s.skip)
				}
			}
		})
	}
	var r engine.Rates
	r.Observe("m", fig(1, 1, 0, 2, 0), t0)
	r.Retain(func(string) bool { return false })
	if _, _, skip := r.Observe("m", fig(2, 2, 0, 2, 0), t0.Add(time.Second)); skip != engine.RateFirst {
		t.Errorf("a model that left the exposition came back with skip %q, want a new baseline", skip)
	}
}

// A poller started against an engine whose counters are large (a pylon restart) hands over
// no rate on its first scrape; an engine restart (counters back near zero, a new _created)
// gives none either and is counted and logged; one second later the rates are real.
func TestPollerPublishesNoPhantomRates(t *testing.T) {
	t.Parallel()
	big := readFixture(t, "vllm_v0.10.txt")
	restarted := bytes.ReplaceAll(big, []byte("6.531002e+06"), []byte("1000.0"))
	restarted = bytes.ReplaceAll(restarted, []byte("1.7541168083172557e+09"), []byte("1.7541200000000000e+09"))
	later := bytes.ReplaceAll(restarted, []byte("generation_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\",engine=\"0\"} 1000.0"),
		[]byte("generation_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\",engine=\"0\"} 1250.0"))
	srv := &fixtureServer{body: big}
	client, stop := serve(t, srv.handle)
	defer stop()
	set := metrics.NewSet()
	now := t0
	sink := &metricsSink{}
	p := &engine.Poller{
		Client: client, BaseURL: "http://engine", Path: "/metrics", Sink: sink, Logger: discard(), Dialect: engine.DialectVLLM,
		Now: func() time.Time { return now }, Metrics: engine.StreamMetrics{Set: set, Prefix: "pylon_"},
	}
	bodies := [][]byte{big, big, restarted, later}
	gens := make([]float64, 0, len(bodies))
	for _, body := range bodies {
		srv.set(body)
		if err := p.Once(); err != nil {
			t.Fatal(err)
		}
		gens = append(gens, sink.scrapes[len(sink.scrapes)-1][llama].GenerationTPS)
		now = now.Add(time.Second)
	}
	if want := []float64{0, 0, 0, 250}; !slices.Equal(gens, want) {
		t.Errorf("generation rates %v, want %v", gens, want)
	}
	if s := p.Status(); s.CounterResets != 1 || !s.LastOK || s.Scrapes != 4 || len(s.EngineModels) != 1 {
		t.Errorf("status %+v", s)
	}
	var b strings.Builder
	set.WritePrometheus(&b)
	for _, want := range []string{
		`pylon_engine_metrics_rate_skips_total{reason="first"} 1`, `pylon_engine_metrics_rate_skips_total{reason="reset"} 1`,
		`pylon_engine_metrics_scrapes_total{result="ok"} 4`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
	srv.set([]byte("vllm:num_requests_running{model_name=\"m\" 1\n"))
	if err := p.Once(); err == nil {
		t.Error("a broken exposition was accepted")
	}
	if s := p.Status(); s.LastOK || s.Failures != 1 || !strings.Contains(s.LastError, "invalid prometheus exposition") {
		t.Errorf("status after a broken exposition: %+v", s)
	}
}
