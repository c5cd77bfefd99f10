package score

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// BackendInfo is one backend of the fleet as the scorer needs it.
type BackendInfo struct {
	ID      string
	Cluster string
	// CapacityTPS is the registered last_mean_input_tps (0 = unknown).
	CapacityTPS float64
}

// Input is everything one algorithm's run produced.
type Input struct {
	Algorithm     string
	AdmissionMode string
	Records       []Record
	// Length is the run's total length (first send to last byte).
	Length time.Duration
	// Backends is the fleet; when empty, the backends seen in Records are used.
	Backends []BackendInfo
	// MetricDeltas are Prometheus counter deltas over the run (see MetricDeltas).
	MetricDeltas map[string]float64
}

// Latency summarises a latency sample.
type Latency struct {
	Count int           `json:"count"`
	Avg   time.Duration `json:"avg_ns"`
	P50   time.Duration `json:"p50_ns"`
	P95   time.Duration `json:"p95_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Cache is the prefix-cache summary from the engines' x-kv-cache-* headers.
type Cache struct {
	Reported       int      `json:"reported"`
	Hits           int      `json:"hits"`
	HitRate        *float64 `json:"hit_rate"`
	Evictions      uint64   `json:"evictions"`
	EvictedTokens  uint64   `json:"evicted_tokens"`
	ReusedInput    uint64   `json:"reused_input_tokens"`
	UncachedInput  uint64   `json:"uncached_input_tokens"`
	InputReuseRate *float64 `json:"input_reuse_rate"`
}

// Stickiness counts how cache keys spread over backends.
type Stickiness struct {
	Keys         int      `json:"keys"`
	Stayed       int      `json:"stayed"`
	Moved        int      `json:"moved"`
	MovementRate *float64 `json:"movement_rate"`
}

// FailureGroup counts failed requests with one (status, backend, error).
type FailureGroup struct {
	Status  int    `json:"status"`
	Backend string `json:"backend"`
	Error   string `json:"error"`
	Count   int    `json:"count"`
}

// Share is one backend's or cluster's part of the traffic.
type Share struct {
	ID            string        `json:"id"`
	Cluster       string        `json:"cluster,omitempty"`
	Requests      int           `json:"requests"`
	Successes     int           `json:"successes"`
	RequestShare  float64       `json:"request_share"`
	InputShare    float64       `json:"input_share"`
	OutputShare   float64       `json:"output_share"`
	CapacityShare *float64      `json:"capacity_share"`
	AvgTTLT       time.Duration `json:"avg_ttlt_ns"`
	P95TTLT       time.Duration `json:"p95_ttlt_ns"`
	CacheHitRate  *float64      `json:"cache_hit_rate"`
	Evictions     uint64        `json:"evictions"`
}

// Counters are the Prometheus deltas the report shows.
type Counters struct {
	AdmissionDecisions   map[string]float64 `json:"pylon_admission_decisions"`
	Retries              map[string]float64 `json:"gateway_retries"`
	RetryExhausted       map[string]float64 `json:"gateway_retry_exhausted"`
	QueueMismatchRetries float64            `json:"queue_mismatch_retries"`
	RetryExhaustedTotal  float64            `json:"retry_exhausted_total"`
	PrimaryChoices       float64            `json:"primary_route_choices"`
	FallbackChoices      float64            `json:"fallback_route_choices"`
	KVFreeFallback       float64            `json:"kv_free_fallback_choices"`
}

// Summary is one algorithm's scored run.
type Summary struct {
	Algorithm     string `json:"algorithm"`
	AdmissionMode string `json:"admission_mode"`
	Requests      int    `json:"requests"`
	Successes     int    `json:"successes"`
	// SuccessRate is successes / requests sent.
	SuccessRate float64 `json:"success_rate"`
	// SuccessfulRPS is successes × 1000 / run length in ms.
	SuccessfulRPS float64 `json:"successful_rps"`
	// OutputGoodput is output tokens of successful requests per second.
	OutputGoodput float64       `json:"output_goodput_tps"`
	TTFT          Latency       `json:"ttft"`
	TTLT          Latency       `json:"ttlt"`
	Length        time.Duration `json:"length_ns"`

	ClusterEqualBalance         *float64 `json:"cluster_equal_balance"`
	ClusterInputCapacityBalance *float64 `json:"cluster_input_capacity_balance"`
	PylonEqualBalance           *float64 `json:"pylon_equal_balance"`
	PylonCapacityBalance        *float64 `json:"pylon_capacity_balance"`

	Cache      Cache      `json:"cache"`
	Stickiness Stickiness `json:"stickiness"`
	// EngineQueued counts the requests an engine made wait for a concurrency slot
	// (the mock engine's x-engine-queued): the router sent more than the engine runs at once.
	EngineQueued int            `json:"engine_queued"`
	Failures     []FailureGroup `json:"failures"`
	Backends     []Share        `json:"backends"`
	Clusters     []Share        `json:"clusters"`
	Counters     Counters       `json:"counters"`
	Warnings     []string       `json:"warnings"`
	// TTFTEstimate is the gateway's TTFT-estimate error over the run (nil when the
	// gateway observed none).
	TTFTEstimate *EstimateError `json:"ttft_estimate_error,omitempty"`
}

// Percentile returns sorted[round((n−1)·q)] of an ascending sample (0 when empty).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.Round(float64(len(sorted)-1)*q))]
}

// Summarize returns the latency summary of sample (which it sorts).
func Summarize(sample []time.Duration) Latency {
	if len(sample) == 0 {
		return Latency{}
	}
	slices.Sort(sample)
	var sum time.Duration
	for _, d := range sample {
		sum += d
	}
	return Latency{
		Count: len(sample),
		Avg:   sum / time.Duration(len(sample)),
		P50:   Percentile(sample, 0.50),
		P95:   Percentile(sample, 0.95),
		P99:   Percentile(sample, 0.99),
		Max:   sample[len(sample)-1],
	}
}

func ptr(v float64) *float64 { return &v }

func clamp01(v float64) float64 { return math.Max(0, math.Min(1, v)) }

// EqualBalance is clamp(1 − mean|share − 1/k| / (1/k), 0, 1) over k shares.
func EqualBalance(shares []float64) *float64 {
	k := float64(len(shares))
	if k == 0 {
		return nil
	}
	var dev float64
	for _, s := range shares {
		dev += math.Abs(s - 1/k)
	}
	return ptr(clamp01(1 - (dev/k)/(1/k)))
}

// CapacityBalance is clamp(1 − ½ Σ|share − capacity share|, 0, 1); nil without capacities.
func CapacityBalance(shares, capacity []float64) *float64 {
	var total float64
	for _, c := range capacity {
		total += c
	}
	if total <= 0 || len(shares) != len(capacity) {
		return nil
	}
	var dev float64
	for i := range shares {
		dev += math.Abs(shares[i] - capacity[i]/total)
	}
	return ptr(clamp01(1 - dev/2))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

type group struct {
	id, cluster         string
	capacity            float64
	requests, successes int
	input, output       float64
	ttlt                []time.Duration
	kvReported, kvHits  int
	evictions           uint64
}

// Score computes the Summary of one run.
func Score(in *Input) Summary {
	s := Summary{Algorithm: in.Algorithm, AdmissionMode: in.AdmissionMode, Requests: len(in.Records), Length: in.Length}
	var ttft, ttlt []time.Duration
	var outputTokens float64
	backends, order := backendGroups(in)
	var extra []string // backends seen in records but not in the fleet
	keyBackends := map[string]map[string]bool{}
	failures := map[FailureGroup]int{}
	withKeys := false
	for i := range in.Records {
		r := &in.Records[i]
		withKeys = withKeys || r.AffinityKey != ""
		if r.OK() {
			s.Successes++
			outputTokens += float64(r.OutputTokens)
			ttlt = append(ttlt, r.TTLT)
			if r.OutputTokens > 0 {
				ttft = append(ttft, r.TTFT)
			}
		} else {
			failures[FailureGroup{Status: r.Status, Backend: r.Backend, Error: r.Error}]++
		}
		if r.EngineQueued {
			s.EngineQueued++
		}
		if kv := r.KV; kv != nil {
			s.Cache.Reported++
			if kv.Hit {
				s.Cache.Hits++
			}
			s.Cache.Evictions += kv.EvictedEntries
			s.Cache.EvictedTokens += kv.EvictedTokens
			s.Cache.ReusedInput += kv.ReusedInput
			s.Cache.UncachedInput += kv.UncachedInput
		}
		if r.Backend == "" {
			continue
		}
		g := backends[r.Backend]
		if g == nil {
			g = &group{id: r.Backend, cluster: r.Cluster}
			backends[r.Backend] = g
			extra = append(extra, r.Backend)
		}
		g.add(r)
		if r.AffinityKey != "" {
			if keyBackends[r.AffinityKey] == nil {
				keyBackends[r.AffinityKey] = map[string]bool{}
			}
			keyBackends[r.AffinityKey][r.Backend] = true
		}
	}
	if s.Requests > 0 {
		s.SuccessRate = float64(s.Successes) / float64(s.Requests)
	}
	if ms := float64(in.Length) / float64(time.Millisecond); ms > 0 {
		s.SuccessfulRPS = float64(s.Successes) * 1000 / ms
		s.OutputGoodput = outputTokens * 1000 / ms
	}
	s.TTFT, s.TTLT = Summarize(ttft), Summarize(ttlt)
	if s.Cache.Reported > 0 {
		s.Cache.HitRate = ptr(float64(s.Cache.Hits) / float64(s.Cache.Reported))
		s.Cache.InputReuseRate = ptr(ratio(float64(s.Cache.ReusedInput), float64(s.Cache.ReusedInput+s.Cache.UncachedInput)))
	} else if withKeys {
		s.Warnings = append(s.Warnings, "requests carry cache affinity keys but no response had x-kv-cache-* headers: cache figures are empty")
	}
	for _, bs := range keyBackends {
		s.Stickiness.Keys++
		if len(bs) == 1 {
			s.Stickiness.Stayed++
		} else {
			s.Stickiness.Moved++
		}
	}
	if s.Stickiness.Keys > 0 {
		s.Stickiness.MovementRate = ptr(float64(s.Stickiness.Moved) / float64(s.Stickiness.Keys))
	}
	s.Failures = failureGroups(failures)
	slices.Sort(extra)
	s.Backends, s.Clusters = shares(backends, append(order, extra...))
	s.balances()
	s.Counters = counters(in.MetricDeltas)
	s.TTFTEstimate = estimateError(in.MetricDeltas)
	return s
}

func (g *group) add(r *Record) {
	g.requests++
	g.input += float64(r.InputTokens)
	if r.OK() {
		g.successes++
		g.output += float64(r.OutputTokens)
		g.ttlt = append(g.ttlt, r.TTLT)
	}
	if r.KV != nil {
		g.kvReported++
		if r.KV.Hit {
			g.kvHits++
		}
		g.evictions += r.KV.EvictedEntries
	}
}

func backendGroups(in *Input) (map[string]*group, []string) {
	m := map[string]*group{}
	order := make([]string, 0, len(in.Backends))
	for _, b := range in.Backends {
		m[b.ID] = &group{id: b.ID, cluster: b.Cluster, capacity: b.CapacityTPS}
		order = append(order, b.ID)
	}
	return m, order
}

func failureGroups(m map[FailureGroup]int) []FailureGroup {
	out := make([]FailureGroup, 0, len(m))
	for g, n := range m {
		g.Count = n
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b FailureGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Status, b.Status), cmp.Compare(a.Backend, b.Backend), cmp.Compare(a.Error, b.Error))
	})
	return out
}

// shares builds the per-backend and per-cluster tables in the given order.
func shares(backends map[string]*group, order []string) (bs, cs []Share) {
	var totalReq, totalIn, totalOut, totalCap float64
	for _, id := range order {
		g := backends[id]
		totalReq += float64(g.requests)
		totalIn += g.input
		totalOut += g.output
		totalCap += g.capacity
	}
	clusters := map[string]*group{}
	var clusterOrder []string
	for _, id := range order {
		g := backends[id]
		bs = append(bs, g.share(totalReq, totalIn, totalOut, totalCap))
		c := clusters[g.cluster]
		if c == nil {
			c = &group{id: g.cluster}
			clusters[g.cluster] = c
			clusterOrder = append(clusterOrder, g.cluster)
		}
		c.requests += g.requests
		c.successes += g.successes
		c.input += g.input
		c.output += g.output
		c.capacity += g.capacity
		c.ttlt = append(c.ttlt, g.ttlt...)
		c.kvReported += g.kvReported
		c.kvHits += g.kvHits
		c.evictions += g.evictions
	}
	for _, id := range clusterOrder {
		cs = append(cs, clusters[id].share(totalReq, totalIn, totalOut, totalCap))
	}
	return bs, cs
}

func (g *group) share(totalReq, totalIn, totalOut, totalCap float64) Share {
	sh := Share{
		ID: g.id, Cluster: g.cluster, Requests: g.requests, Successes: g.successes,
		RequestShare: ratio(float64(g.requests), totalReq), InputShare: ratio(g.input, totalIn), OutputShare: ratio(g.output, totalOut),
		Evictions: g.evictions,
	}
	if totalCap > 0 {
		sh.CapacityShare = ptr(g.capacity / totalCap)
	}
	l := Summarize(g.ttlt)
	sh.AvgTTLT, sh.P95TTLT = l.Avg, l.P95
	if g.kvReported > 0 {
		sh.CacheHitRate = ptr(float64(g.kvHits) / float64(g.kvReported))
	}
	return sh
}

func (s *Summary) balances() {
	if len(s.Backends) == 0 {
		return
	}
	req := make([]float64, len(s.Backends))
	capacity := make([]float64, len(s.Backends))
	for i, b := range s.Backends {
		req[i] = b.RequestShare
		if b.CapacityShare != nil {
			capacity[i] = *b.CapacityShare
		}
	}
	s.PylonEqualBalance = EqualBalance(req)
	s.PylonCapacityBalance = CapacityBalance(req, capacity)
	creq := make([]float64, len(s.Clusters))
	cin := make([]float64, len(s.Clusters))
	ccap := make([]float64, len(s.Clusters))
	for i, c := range s.Clusters {
		creq[i], cin[i] = c.RequestShare, c.InputShare
		if c.CapacityShare != nil {
			ccap[i] = *c.CapacityShare
		}
	}
	s.ClusterEqualBalance = EqualBalance(creq)
	s.ClusterInputCapacityBalance = CapacityBalance(cin, ccap)
}

func counters(deltas map[string]float64) Counters {
	c := Counters{
		AdmissionDecisions: sumBy(deltas, "queue_admission_decisions_total", "result"),
		Retries:            sumBy(deltas, "proxy_retries_total", "reason"),
		RetryExhausted:     sumBy(deltas, "proxy_retry_exhausted_total", "reason"),
	}
	c.QueueMismatchRetries = c.Retries["queue_estimate_mismatch"]
	for _, v := range c.RetryExhausted {
		c.RetryExhaustedTotal += v
	}
	sel := sumBy(deltas, "routing_selections_total", "selection")
	c.PrimaryChoices, c.FallbackChoices = sel["primary"], sel["fallback"]
	c.KVFreeFallback = sumBy(deltas, "routing_kv_free_token_fallback_selections_total", "")[""]
	return c
}
