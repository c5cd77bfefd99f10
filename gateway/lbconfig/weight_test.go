package lbconfig

import (
	"testing"
	"time"
)

// pulsar-wait-and-widen takes the affinity hold, the prefill scale, the band interval,
// fallback_max_queued and rendezvous_weight; pulsar takes rendezvous_weight; name-only
// entries have the default weight.
func TestPulsarWideningFields(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"pulsar","models":{
		"a":{"algorithm":"pulsar-wait-and-widen","cache_affinity_wait_ms":200,"cache_affinity_input_tokens_scale":0.1,
			"band_widen_interval_ms":50,"fallback_max_queued":2,"rendezvous_weight":"last-mean-input-tps"},
		"b":{"algorithm":"pulsar","rendezvous_weight":"max-input-tps"}}}`)
	a := c.Models["a"].Entry
	if a.AffinityWait != 200*time.Millisecond || a.AffinityInputScale != 0.1 || !a.HasBandWiden || a.BandWiden != 50*time.Millisecond ||
		a.FallbackMaxQueued != 2 || a.RendezvousWeight != WeightLastMeanInputTPS {
		t.Errorf("pulsar-wait-and-widen entry %+v", a)
	}
	if w := c.Models["b"].RendezvousWeight; w != WeightMaxInputTPS || w.String() != "max-input-tps" {
		t.Errorf("pulsar weight %v", w)
	}
	if w := c.Default.RendezvousWeight; w != WeightDefault || w.String() != "max-input-tps" {
		t.Errorf("name-only default weight %v", w)
	}
	if e := mustParse(t, `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","band_widen_interval_ms":0}}}`).Models["m"].Entry; !e.HasBandWiden || e.BandWiden != 0 {
		t.Errorf("band_widen_interval_ms 0: %+v", e)
	}
}
