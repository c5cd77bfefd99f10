package lb

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// ranker computes and caches pulsar's weighted rendezvous ranking per affinity key, as the
// reference router does: score = weight / −ln(u), u = (h + 1) / (2⁶⁴ + 1), with h the xxh3
// of the tagged (seed, routing key, model, key, cluster id) and weight the cluster's valid
// peak input TPS (rendezvous_weight max-input-tps, the default; a cluster without a peak is
// weighed by its mean) or its mean input TPS (last-mean-input-tps). Higher scores rank
// first, ties by cluster id; clusters without a valid weight are not ranked.
type ranker struct {
	seed    string
	byMean  bool // rendezvous_weight last-mean-input-tps
	cache   keyCache[[]int32]
	prefix  []byte
	members uint64
	rk      string
	model   string
	weights []float64
	built   bool
	buf     []byte
	scores  []rankScore
	scratch []int32
}

type rankScore struct {
	score float64
	idx   int32
}

func newRanker(e lbconfig.Entry) ranker {
	return ranker{seed: e.Seed, byMean: e.RendezvousWeight == lbconfig.WeightLastMeanInputTPS, cache: newKeyCache[[]int32](defaultCacheKeys, true)}
}

// weight is c's rendezvous weight.
func (k *ranker) weight(c *Candidate) float64 {
	if k.byMean || c.Load.MaxInputTPS == 0 {
		return c.Load.InputTPS
	}
	return c.Load.MaxInputTPS
}

// refresh invalidates the cache when the candidate list, the target or a weight changed.
func (k *ranker) refresh(s *Snapshot) {
	same := k.built && s.sameMembership(k.members, k.rk, k.model) && len(k.weights) == len(s.Candidates)
	if same {
		for i := range s.Candidates {
			if w := k.weight(&s.Candidates[i]); w != k.weights[i] && !(math.IsNaN(w) && math.IsNaN(k.weights[i])) {
				same = false
				break
			}
		}
	}
	if same {
		return
	}
	k.prefix = appendPrefix(k.prefix[:0], k.seed, s.RoutingKey, s.Model)
	k.weights = k.weights[:0]
	for i := range s.Candidates {
		k.weights = append(k.weights, k.weight(&s.Candidates[i]))
	}
	k.members, k.rk, k.model, k.built = s.membership, s.RoutingKey, s.Model, true
	k.cache.reset()
}

// rank returns the ranking (candidate indices, best first) of key on s. The slice is owned
// by the ranker: do not modify or retain it across calls.
func (k *ranker) rank(s *Snapshot, key string) []int32 {
	k.refresh(s)
	if r, ok := k.cache.get(key); ok {
		return r
	}
	k.scores = k.scores[:0]
	base := appendTagged(append(k.buf[:0], k.prefix...), "cache_affinity_key", key)
	for i := range s.Candidates {
		w := k.weight(&s.Candidates[i])
		if !load.ValidTPS(w) {
			continue
		}
		h := xxh3.Hash(appendTagged(base, "cluster_id", s.Candidates[i].ClusterID))
		u := (float64(h) + 1) / (math.Exp2(64) + 1)
		d := -math.Log(u)
		if !(d > 0) || math.IsInf(d, 0) {
			continue
		}
		k.scores = append(k.scores, rankScore{score: w / d, idx: int32(i)})
	}
	k.buf = base[:0]
	slices.SortFunc(k.scores, func(a, b rankScore) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(s.Candidates[a.idx].ClusterID, s.Candidates[b.idx].ClusterID)
	})
	var out []int32
	if len(key) > maxCachedKeyBytes {
		out = k.scratch[:0]
	} else {
		out = make([]int32, 0, len(k.scores))
	}
	for _, x := range k.scores {
		out = append(out, x.idx)
	}
	if len(key) > maxCachedKeyBytes {
		k.scratch = out
	} else {
		k.cache.put(key, out)
	}
	return out
}

// eligible reports whether a ranked candidate may serve r: not excluded and, with
// considerKV, KV-feasible; kvSkipped says it was passed over for KV alone.
func eligible(c *Candidate, r *Request, considerKV bool) (ok, kvSkipped bool) {
	if r.IsExcluded(c.ClusterID) {
		return false, false
	}
	if considerKV && !kvFeasible(&c.Load, r.InputTokens) {
		return false, true
	}
	return true, false
}

// kvFeasible is pulsar's KV check: the request has input, the cluster reports KV figures
// and has at least that many free tokens.
func kvFeasible(l *load.Load, inputTokens uint64) bool {
	return inputTokens > 0 && l.ReportsKV() && l.KVFreeTokens >= inputTokens
}

// pulsar picks the first feasible cluster of the rendezvous ranking; rank depth is its
// 1-based position. It never waits.
type pulsar struct {
	considerKV bool
	ranker     ranker
}

func newPulsar(e lbconfig.Entry) *pulsar {
	return &pulsar{considerKV: e.ConsiderKVFreeTokens, ranker: newRanker(e)}
}

func (b *pulsar) Decide(s *Snapshot, r *Request, _ time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	ranking := b.ranker.rank(s, r.AffinityKey)
	kvSkipped := false
	for pos, idx := range ranking {
		ok, kv := eligible(&s.Candidates[idx], r, b.considerKV)
		kvSkipped = kvSkipped || kv
		if !ok {
			continue
		}
		d := Selected(int(idx), pos+1)
		d.KVSkipped = kvSkipped
		return d
	}
	return Unavailable(ReasonNotRanked)
}

// pulsarWaitAndWiden uses the pulsar ranking as the affinity source and wait-and-widen
// buckets (comparator "none") over it for fallback. With no queue SLO configured a
// feasible primary wins at once. Otherwise, without an affinity hold (and no
// band_widen_interval_ms), over disjoint bands of the ranking: [1], [2,3], [4,7], [8,15], …;
// with one, see widen.
type pulsarWaitAndWiden struct {
	cfg        wawConfig
	considerKV bool
	// widening: the affinity hold opens the ranking band by band (widen)
	widening     bool
	bandInterval time.Duration
	fallbackCfg  wawConfig // cfg with fallback_max_queued as max_queued
	open         []int32
	rng          Rand
	ranker       ranker
	scratch      wawScratch
	band         []int32
	promoted     []int32
}

func newPulsarWaitAndWiden(e lbconfig.Entry, rng Rand) Balancer {
	cfg := newWAWConfig(e)
	cfg.comparator = load.ComparatorNone
	b := &pulsarWaitAndWiden{cfg: cfg, considerKV: e.ConsiderKVFreeTokens, rng: rng, ranker: newRanker(e)}
	b.widening = e.AffinityWait > 0 || e.HasBandWiden
	b.bandInterval = e.AffinityWait
	if e.HasBandWiden {
		b.bandInterval = e.BandWiden
	}
	b.fallbackCfg = cfg
	b.fallbackCfg.maxQueued = e.FallbackMaxQueued
	return b
}

func (b *pulsarWaitAndWiden) Decide(s *Snapshot, r *Request, elapsed time.Duration) Decision {
	if d, ok := precheck(s, r); !ok {
		return d
	}
	ranking := b.ranker.rank(s, r.AffinityKey)
	if len(ranking) == 0 {
		return Unavailable(ReasonNotRanked)
	}
	if !b.cfg.lastCluster {
		return b.decide(s, r, ranking, elapsed)
	}
	// last_cluster_affinity: a returning session's cluster is promoted to rank 1 (see
	// waitAndWiden.byLastCluster); the ranking is cached, so the promotion works on a copy.
	// A cluster outside the ranking (no valid weight) counts as stale.
	state := SessionReturning
	switch last := s.index(r.LastCluster); {
	case r.LastCluster == "":
		state = SessionNew
	case last < 0 || !slices.Contains(ranking, last):
		state = SessionStale
	default:
		b.promoted = promote(b.promoted[:0], ranking, last)
		ranking = b.promoted
	}
	d := b.decide(s, r, ranking, elapsed)
	d.Session = state
	return d
}

// decide is the banded decision over ranking.
func (b *pulsarWaitAndWiden) decide(s *Snapshot, r *Request, ranking []int32, elapsed time.Duration) Decision {
	if !b.cfg.hasQueueSLO {
		if c := &s.Candidates[ranking[0]]; !r.IsExcluded(c.ClusterID) && (!b.considerKV || kvFeasible(&c.Load, r.InputTokens)) {
			return Selected(int(ranking[0]), 1)
		}
	}
	if b.widening {
		return b.widen(s, r, ranking, elapsed)
	}
	kvSkipped := false
	wait := Unavailable(ReasonNoCapacity)
	for start, width := 0, 1; start < len(ranking); start, width = start+width, width*2 {
		end := min(start+width, len(ranking))
		band := b.band[:0]
		for _, idx := range ranking[start:end] {
			ok, kv := eligible(&s.Candidates[idx], r, b.considerKV)
			kvSkipped = kvSkipped || kv
			if !ok {
				continue
			}
			band = append(band, idx)
		}
		b.band = band
		if len(band) == 0 {
			continue
		}
		d := b.cfg.evaluate(&b.scratch, b.rng, s, r, band, fullPrice, elapsed, elapsed, -1)
		switch d.Kind {
		case KindSelected:
			pos := slices.IndexFunc(ranking, func(idx int32) bool { return int(idx) == d.Index })
			d.RankDepth = pos + 1
			d.KVSkipped = kvSkipped && b.skippedAbove(s, r, ranking[:pos])
			return d
		case KindWait:
			wait = Wait(minWait(wait, d.Wait))
		default:
		}
	}
	if wait.Kind == KindUnavailable && kvSkipped {
		return Unavailable(ReasonNotRanked)
	}
	return wait
}

// skippedAbove reports whether a cluster ranked above the choice was skipped for KV.
func (b *pulsarWaitAndWiden) skippedAbove(s *Snapshot, r *Request, above []int32) bool {
	for _, idx := range above {
		c := &s.Candidates[idx]
		if !r.IsExcluded(c.ClusterID) && b.considerKV && !kvFeasible(&c.Load, r.InputTokens) {
			return true
		}
	}
	return false
}

// widen is the decision with an affinity hold X = cache_affinity_wait_ms and band
// interval S = band_widen_interval_ms (default X). The affinity group is the first k ranked
// clusters (k = cache_affinity_backend_selection_count, at least 1), chosen among with the
// group's prefill scale; before X the request waits for them. From X the open set grows
// one band per S: ranks 1..k+2 at X, 1..k+6 at X+S, 1..k+14 at X+2S, … (S = 0 opens every
// ranked cluster at X), chosen among at full prefill with buckets unlocking from X and
// fallback_max_queued as the capacity rule. A full open set waits for the next band even
// when the clusters beyond it are full too.
func (b *pulsarWaitAndWiden) widen(s *Snapshot, r *Request, ranking []int32, elapsed time.Duration) Decision {
	k := min(max(b.cfg.selectionCount, 1), len(ranking))
	group, kvSkipped := b.feasible(s, r, ranking[:k], b.band[:0])
	b.band = group
	affine := Unavailable(ReasonNoCapacity)
	if len(group) > 0 {
		affine = b.cfg.evaluate(&b.scratch, b.rng, s, r, group, pricing{scale: b.cfg.scale, only: -1}, elapsed, elapsed, -1)
		if affine.Kind == KindSelected {
			return b.ranked(affine, ranking, kvSkipped, s, r)
		}
	}
	if elapsed < b.cfg.hold {
		return Wait(minWait(affine, b.cfg.hold-elapsed))
	}
	after := elapsed - b.cfg.hold
	width, nextBand := len(ranking), time.Duration(0)
	if b.bandInterval > 0 {
		bands := int(min(after/b.bandInterval, 60))
		width = k + (1 << (bands + 2)) - 2
		if width < len(ranking) {
			nextBand = time.Duration(bands+1)*b.bandInterval - after
		}
	}
	open, kv := b.feasible(s, r, ranking[:min(width, len(ranking))], b.open[:0])
	b.open = open
	kvSkipped = kvSkipped || kv
	global := Unavailable(ReasonNoCapacity)
	if len(open) > 0 {
		global = b.fallbackCfg.evaluate(&b.scratch, b.rng, s, r, open, fullPrice, elapsed, after, -1)
	}
	switch global.Kind {
	case KindSelected:
		return b.ranked(global, ranking, kvSkipped, s, r)
	case KindWait:
		if nextBand > 0 {
			return Wait(min(global.Wait, nextBand))
		}
		return global
	default:
		if nextBand > 0 {
			return Wait(nextBand)
		}
		if kvSkipped && len(open) == 0 {
			return Unavailable(ReasonNotRanked)
		}
		return global
	}
}

// feasible appends the members of ranked that may serve r (not excluded, KV-feasible when
// considered) to out; kvSkipped says one was passed over for KV.
func (b *pulsarWaitAndWiden) feasible(s *Snapshot, r *Request, ranked, out []int32) (_ []int32, kvSkipped bool) {
	for _, idx := range ranked {
		ok, kv := eligible(&s.Candidates[idx], r, b.considerKV)
		kvSkipped = kvSkipped || kv
		if ok {
			out = append(out, idx)
		}
	}
	return out, kvSkipped
}

// ranked gives a selection its rank depth (1-based position in the ranking) and KV flag.
func (b *pulsarWaitAndWiden) ranked(d Decision, ranking []int32, kvSkipped bool, s *Snapshot, r *Request) Decision {
	pos := slices.IndexFunc(ranking, func(idx int32) bool { return int(idx) == d.Index })
	d.RankDepth = pos + 1
	d.KVSkipped = kvSkipped && b.skippedAbove(s, r, ranking[:pos])
	return d
}
