package engine

import (
	"math"
	"time"
)

// MaxRateGap is the longest spacing of two scrapes whose counters still give a rate: a
// few poll intervals. Past it (the engine or the scraper stalled) the tokens counted in
// between are spread over an unknown stretch, so no rate is taken.
const MaxRateGap = 4 * PollInterval

// Reasons a scrape's counters gave no rate (engine_metrics_rate_skips_total{reason}).
const (
	RateFirst = "first" // no earlier scrape of this model: the counters only set the baseline
	RateReset = "reset" // a counter went down, or its _created time or series set changed: another engine process
	RateGap   = "gap"   // the previous scrape is older than MaxRateGap
)

// Rates turns cumulative token counters into rates, per engine model, across two scrapes
// of one engine process only. The zero value is ready; not safe for concurrent use.
type Rates struct {
	last map[string]baseline
}

type baseline struct {
	prompt, generation, created float64
	waiting                     float64
	series                      int
	at                          time.Time
}

// Observe records model's figures scraped at now and returns the generation and prompt
// token rates since the previous scrape (0 when there is no sample), or why there is none
// (skip; "" when a rate was taken or the engine exports no token counters). The prompt
// rate is only taken while the engine had waiting requests in both scrapes: then prefill
// runs flat out and the rate measures capacity, not offered load.
func (r *Rates) Observe(model string, f *Figures, now time.Time) (generationTPS, promptTPS float64, skip string) {
	if math.IsNaN(f.PromptTokensTotal) && math.IsNaN(f.GenerationTokensTotal) {
		delete(r.last, model)
		return 0, 0, ""
	}
	if r.last == nil {
		r.last = map[string]baseline{}
	}
	b, seen := r.last[model]
	r.last[model] = baseline{
		prompt: f.PromptTokensTotal, generation: f.GenerationTokensTotal, created: f.CountersCreated,
		waiting: f.Waiting, series: f.CounterSeries, at: now,
	}
	d := now.Sub(b.at)
	switch {
	case !seen:
		return 0, 0, RateFirst
	case f.CountersCreated != b.created || f.CounterSeries != b.series ||
		decreased(b.prompt, f.PromptTokensTotal) || decreased(b.generation, f.GenerationTokensTotal):
		return 0, 0, RateReset
	case d > MaxRateGap || d <= 0:
		return 0, 0, RateGap
	}
	sec := d.Seconds()
	if g := f.GenerationTokensTotal - b.generation; g > 0 {
		generationTPS = g / sec
	}
	if p := f.PromptTokensTotal - b.prompt; p > 0 && f.Waiting > 0 && b.waiting > 0 {
		promptTPS = p / sec
	}
	return generationTPS, promptTPS, ""
}

// Retain forgets every model not in keep (a model that left the exposition starts over
// with a baseline when it comes back).
func (r *Rates) Retain(keep func(model string) bool) {
	for m := range r.last {
		if !keep(m) {
			delete(r.last, m)
		}
	}
}

// decreased reports a counter that went down, or appeared or vanished between scrapes.
func decreased(before, after float64) bool {
	if math.IsNaN(before) || math.IsNaN(after) {
		return math.IsNaN(before) != math.IsNaN(after)
	}
	return after < before
}
