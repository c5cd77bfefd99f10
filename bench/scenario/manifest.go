package scenario

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Request classes.
const (
	ClassUniform     = "uniform"
	ClassHot         = "hot"
	ClassCold        = "cold"
	ClassBurst       = "burst"
	ClassQuiet       = "quiet"
	ClassRamp        = "ramp"
	ClassSmall       = "small"
	ClassLarge       = "large"
	ClassPrefixStart = "prefix_start"
	ClassPrefixReuse = "prefix_reuse"
)

// Request is one manifest entry.
type Request struct {
	Index int `json:"index"`
	// ID is "<slug(name)>-<seed>-<index:06>".
	ID string `json:"id"`
	// Arrival is the offset from the start of the run at which the request is sent.
	Arrival      time.Duration `json:"arrival_ns"`
	RoutingKey   string        `json:"routing_key,omitempty"`
	AffinityKey  string        `json:"affinity_key,omitempty"`
	InputTokens  uint64        `json:"input_tokens"`
	OutputTokens uint64        `json:"output_tokens"`
	Class        string        `json:"class"`
}

// Manifest is the deterministic request list of (scenario, seed).
type Manifest struct {
	Scenario string    `json:"scenario"`
	Seed     uint64    `json:"seed"`
	Model    string    `json:"model"`
	Requests []Request `json:"requests"`
}

// Slug lower-cases name and replaces every run of other characters than [a-z0-9] by '-'.
func Slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// streamSeed separates the manifest's random stream from other uses of the seed.
const streamSeed = 0x5b1c_a7d0_0b3e_7a11

// NewManifest returns the manifest of s (which must be valid) under seed: the same
// (scenario, seed) always gives the same manifest.
func NewManifest(s *Scenario, seed uint64) Manifest {
	g := &generator{rng: rand.New(rand.NewPCG(seed, streamSeed)), s: s, slug: Slug(s.Name)}
	m := Manifest{Scenario: s.Name, Seed: seed, Model: s.Model, Requests: make([]Request, s.RequestCount)}
	t := &s.TrafficPattern
	sessions := map[string]uint64{}
	var at time.Duration
	for i := range m.Requests {
		r := &m.Requests[i]
		r.Index = i
		r.ID = fmt.Sprintf("%s-%d-%06d", g.slug, seed, i)
		if i > 0 {
			at += g.gap(i)
		}
		r.Arrival = at
		if t.RoutingKeys > 0 {
			r.RoutingKey = g.key("route", g.rng.IntN(t.RoutingKeys))
		}
		switch t.Kind {
		case KindHotset:
			g.hotset(r)
		case KindMixedSize:
			sc, class := t.Large, ClassLarge
			if g.rng.Float64() < *t.SmallShare {
				sc, class = t.Small, ClassSmall
			}
			r.Class = class
			r.AffinityKey = g.anyKey()
			r.InputTokens = g.sample(sc.InputTokens)
			r.OutputTokens = g.sample(sc.OutputTokens)
		case KindPrefixReuse:
			r.AffinityKey = g.anyKey()
			if prev, ok := sessions[r.AffinityKey]; ok {
				r.Class = ClassPrefixReuse
				r.InputTokens = prev + g.sample(t.IncrementalInputTokens)
			} else {
				r.Class = ClassPrefixStart
				r.InputTokens = g.sample(t.InitialInputTokens)
			}
			sessions[r.AffinityKey] = r.InputTokens
			r.OutputTokens = g.sample(t.OutputTokens)
		default:
			r.Class = g.plainClass(i)
			r.AffinityKey = g.anyKey()
			r.InputTokens = g.sample(t.InputTokens)
			r.OutputTokens = g.sample(t.OutputTokens)
		}
	}
	return m
}

type generator struct {
	rng  *rand.Rand
	s    *Scenario
	slug string
}

func (g *generator) key(kind string, k int) string {
	return fmt.Sprintf("%s-%s-%04d", g.slug, kind, k)
}

// anyKey picks an affinity key uniformly, or none without keys.
func (g *generator) anyKey() string {
	if n := g.s.TrafficPattern.CacheAffinityKeys; n > 0 {
		return g.key("cache", g.rng.IntN(n))
	}
	return ""
}

// HotsetSize is round(keys × fraction), at least 1 when fraction > 0 and keys > 0.
func HotsetSize(keys int, fraction float64) int {
	if keys <= 0 || fraction <= 0 {
		return 0
	}
	return min(keys, max(1, int(math.Round(float64(keys)*fraction))))
}

func (g *generator) hotset(r *Request) {
	t := &g.s.TrafficPattern
	hot := HotsetSize(t.CacheAffinityKeys, *t.HotsetFraction)
	draw := g.rng.Float64()
	switch {
	case hot > 0 && draw < *t.HotsetShare:
		r.Class = ClassHot
		r.AffinityKey = g.key("cache", g.rng.IntN(hot))
	default:
		r.Class = ClassCold
		r.AffinityKey = g.anyKey()
	}
	r.InputTokens = g.sample(t.InputTokens)
	r.OutputTokens = g.sample(t.OutputTokens)
}

func (g *generator) plainClass(i int) string {
	t := &g.s.TrafficPattern
	switch t.Kind {
	case KindBursty:
		if (i / *t.BurstPeriodRequests)%2 == 0 {
			return ClassBurst
		}
		return ClassQuiet
	case KindStairStep:
		return ClassRamp
	default:
		return ClassUniform
	}
}

// gap is the inter-arrival time before request i (i ≥ 1).
func (g *generator) gap(i int) time.Duration {
	t := &g.s.TrafficPattern
	var rps float64
	switch t.Kind {
	case KindBursty:
		rps = *t.QuietRPS
		if (i / *t.BurstPeriodRequests)%2 == 0 {
			rps = *t.BurstRPS
		}
	case KindStairStep:
		rps = *t.StartRPS + *t.StepRPS*float64(i / *t.StepRequests)
	default:
		if t.Arrival.Distribution == ArrivalConstant {
			return millis(*t.Arrival.IntervalMs)
		}
		rps = *t.Arrival.TargetRPS
	}
	return millis(g.rng.ExpFloat64() / rps * 1000)
}

// millis rounds ms to whole milliseconds, as the reference does.
func millis(ms float64) time.Duration {
	return time.Duration(math.Round(ms)) * time.Millisecond
}

// sample draws a token count: at least 1, rounded.
func (g *generator) sample(d *Distribution) uint64 {
	var v float64
	switch d.Distribution {
	case DistConstant:
		v = *d.Value
	case DistUniform:
		lo, hi := int64(math.Round(*d.Min)), int64(math.Round(*d.Max))
		v = float64(lo + g.rng.Int64N(hi-lo+1))
	case DistLognormal:
		v = math.Round(math.Exp(math.Log(*d.Mean) + *d.Sigma*g.rng.NormFloat64()))
		v = max(v, 1)
		if d.Min != nil {
			v = max(v, math.Round(*d.Min))
		}
		if d.P99Cap != nil {
			v = min(v, math.Round(*d.P99Cap))
		}
	}
	return uint64(max(math.Round(v), 1))
}
