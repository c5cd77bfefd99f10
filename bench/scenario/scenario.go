// Package scenario is the bench's scenario model: the reference bench's YAML schema,
// decoded strictly (an unknown field is an error naming it), validated with one precise
// message per problem, and turned into a deterministic request manifest from (scenario,
// seed). It is pure: no I/O beyond the bytes it is given, no clock, no goroutines.
package scenario

// Scenario is one decoded scenario file. Optional fields are pointers so validation can
// tell "absent" from zero; the accessors apply the documented defaults.
type Scenario struct {
	Name           string         `yaml:"name"`
	Metadata       Metadata       `yaml:"metadata"`
	Model          string         `yaml:"model"`
	Seed           uint64         `yaml:"seed"`
	RequestCount   int            `yaml:"request_count"`
	MaxConcurrency int            `yaml:"max_concurrency"`
	TunnelProtocol string         `yaml:"tunnel_protocol"`
	Stargates      Stargates      `yaml:"stargates"`
	Backends       Backends       `yaml:"backends"`
	TrafficPattern TrafficPattern `yaml:"traffic_pattern"`
	Degradation    Degradation    `yaml:"degradation"`
	Algorithms     []Algorithm    `yaml:"algorithms"`
	// Expect lists machine-checked outcomes of a run (see Expectation); optional.
	Expect []Expectation `yaml:"expect"`
}

// Metadata describes a scenario for humans; it has no effect on a run.
type Metadata struct {
	Description     string   `yaml:"description"`
	Tags            []string `yaml:"tags"`
	ExpectedRuntime string   `yaml:"expected_runtime"`
	ExpectedSignal  string   `yaml:"expected_signal"`
}

// Stargates is the gateway tier: how many gateway replicas every pylon registers with.
type Stargates struct {
	Count *int `yaml:"count"`
	// ClientSpread is how the driver spreads requests over the replicas:
	// ClientSpreadRoundRobin (the default, like an L4 service) or ClientSpreadAffinityKey
	// (a request with an x-cache-affinity-key always goes to the replica its key hashes
	// to, like a load balancer hashing on that header; requests without one round-robin).
	ClientSpread string `yaml:"client_spread"`
}

// Client spreads over gateway replicas (stargates.client_spread).
const (
	ClientSpreadRoundRobin  = "round-robin"
	ClientSpreadAffinityKey = "affinity-key"
)

// SpreadByAffinityKey reports whether the driver sends each affinity key to one replica.
func (s *Scenario) SpreadByAffinityKey() bool {
	return s.Stargates.ClientSpread == ClientSpreadAffinityKey
}

// Backends describes the pylons and the engines behind them.
type Backends struct {
	// Count is the number of pylons (backends), > 0.
	Count int `yaml:"count"`
	// ClusterIDTemplate names clusters, e.g. "cluster-{cluster_index}". Without it each
	// backend is its own cluster "backend-<i>".
	ClusterIDTemplate string `yaml:"cluster_id_template"`
	// PylonsPerCluster groups consecutive backends into clusters sharing one engine
	// (default 1).
	PylonsPerCluster int `yaml:"pylons_per_cluster"`
	// Profile is the profile of every backend when Profiles is empty.
	Profile *Profile `yaml:"profile"`
	// Profiles assigns profiles to consecutive backends; counts sum to Count.
	Profiles []ProfileGroup `yaml:"profiles"`
}

// ProfileGroup gives Count consecutive backends one profile.
type ProfileGroup struct {
	Count   int     `yaml:"count"`
	Profile Profile `yaml:"profile"`
}

// Profile is one backend's engine and registration shape.
type Profile struct {
	Name string `yaml:"name"`
	// Weight is accepted for compatibility; it has no local meaning.
	Weight                *float64     `yaml:"weight"`
	MaxConcurrentRequests int          `yaml:"max_concurrent_requests"`
	KVCacheCapacityTokens uint64       `yaml:"kv_cache_capacity_tokens"`
	ServiceTimeMs         ServiceTime  `yaml:"service_time_ms"`
	Registration          Registration `yaml:"registration"`
	// AdvertiseConcurrency (default true) makes the cluster's engine report its
	// concurrency limit in its stats pings; false runs it as an engine that does not,
	// so pylons publish the limit unknown (our extension of the scenario format).
	AdvertiseConcurrency *bool `yaml:"advertise_concurrency"`
}

// ServiceTime is the mock engine's timing profile (milliseconds and tokens per second).
type ServiceTime struct {
	TTFTMean          float64 `yaml:"ttft_mean"`
	TTFTJitterMs      float64 `yaml:"ttft_jitter_ms"`
	DecodeTokensPerS  float64 `yaml:"decode_tokens_per_s"`
	DecodeJitterMs    float64 `yaml:"decode_jitter_ms"`
	PrefillTokensPerS float64 `yaml:"prefill_tokens_per_s"`
}

// Registration is what the pylon publishes before it has measured anything.
type Registration struct {
	// LastMeanInputTPS is passed to the pylon as --initial-input-tps and is the
	// backend's capacity in the capacity-balance scores.
	LastMeanInputTPS float64 `yaml:"last_mean_input_tps"`
}

// Traffic pattern kinds.
const (
	KindUniform     = "uniform"
	KindHotset      = "zipf_hotset"
	KindBursty      = "bursty"
	KindStairStep   = "stair_step"
	KindMixedSize   = "mixed_size"
	KindPrefixReuse = "prefix_reuse"
)

// TrafficPattern is a tagged union on Kind; only the fields of that kind may be set.
type TrafficPattern struct {
	Kind              string `yaml:"kind"`
	RoutingKeys       int    `yaml:"routing_keys"`
	CacheAffinityKeys int    `yaml:"cache_affinity_keys"`

	InputTokens  *Distribution `yaml:"input_tokens"`
	OutputTokens *Distribution `yaml:"output_tokens"`
	Arrival      *Arrival      `yaml:"arrival"`

	HotsetFraction *float64 `yaml:"hotset_fraction"`
	HotsetShare    *float64 `yaml:"hotset_share"`

	QuietRPS            *float64 `yaml:"quiet_rps"`
	BurstRPS            *float64 `yaml:"burst_rps"`
	BurstPeriodRequests *int     `yaml:"burst_period_requests"`

	StartRPS     *float64 `yaml:"start_rps"`
	StepRPS      *float64 `yaml:"step_rps"`
	StepRequests *int     `yaml:"step_requests"`

	SmallShare *float64   `yaml:"small_share"`
	Small      *SizeClass `yaml:"small"`
	Large      *SizeClass `yaml:"large"`

	InitialInputTokens     *Distribution `yaml:"initial_input_tokens"`
	IncrementalInputTokens *Distribution `yaml:"incremental_input_tokens"`
}

// SizeClass is one side of a mixed_size pattern.
type SizeClass struct {
	InputTokens  *Distribution `yaml:"input_tokens"`
	OutputTokens *Distribution `yaml:"output_tokens"`
}

// Token distributions.
const (
	DistConstant  = "constant"
	DistUniform   = "uniform"
	DistLognormal = "lognormal"
)

// Distribution is a token-count distribution, tagged on Distribution.
type Distribution struct {
	Distribution string   `yaml:"distribution"`
	Value        *float64 `yaml:"value"`
	Min          *float64 `yaml:"min"`
	Max          *float64 `yaml:"max"`
	// Mean is the median of the lognormal (exp(ln(mean) + σz)), as in the reference.
	Mean   *float64 `yaml:"mean"`
	Sigma  *float64 `yaml:"sigma"`
	P99Cap *float64 `yaml:"p99_cap"`
}

// Arrival distributions.
const (
	ArrivalConstant = "constant"
	ArrivalPoisson  = "poisson"
)

// Arrival is the arrival process of uniform, zipf_hotset, mixed_size and prefix_reuse.
type Arrival struct {
	Distribution string   `yaml:"distribution"`
	IntervalMs   *float64 `yaml:"interval_ms"`
	TargetRPS    *float64 `yaml:"target_rps"`
}

// Degradation lists actions the runner performs while driving.
type Degradation struct {
	Actions []Action `yaml:"actions"`
}

// Degradation actions. The first two are the reference's; the rest are local.
const (
	// ActionDeleteBackendPod kills the backend's pylon with SIGKILL (the local
	// equivalent of deleting its pod).
	ActionDeleteBackendPod = "delete_backend_pod"
	// ActionScaleBackend is accepted for compatibility and ignored locally.
	ActionScaleBackend  = "scale_backend"
	ActionKillEngine    = "kill_engine"
	ActionKillPylon     = "kill_pylon"
	ActionRestartEngine = "restart_engine"
	ActionRestartPylon  = "restart_pylon"
)

// Action is one degradation step, run when the driver reaches AtRequest.
type Action struct {
	AtRequest    int    `yaml:"at_request"`
	BackendIndex int    `yaml:"backend_index"`
	Action       string `yaml:"action"`
	Replicas     *int   `yaml:"replicas"`
}

// Algorithm is one arm of the comparison: a label and a full lb-config.json object.
type Algorithm struct {
	Name                string          `yaml:"name"`
	Config              map[string]any  `yaml:"config"`
	PylonQueueAdmission *QueueAdmission `yaml:"pylon_queue_admission"`
	// PylonPromptWait false starts the pylons with --prompt-wait 0 (our extension): a
	// turn that reaches its session's engine while the session's prompt is still being
	// prefilled there is relayed at once, as the reference pylon does, instead of waiting
	// for the prompt to be cached. Absent: the pylon's default (wait).
	PylonPromptWait *bool `yaml:"pylon_prompt_wait"`
	// ClusterBackends starts the gateways with --cluster-backends (our extension): "" or
	// "spread" (the default), or "lead" (every request of a cluster through one of its
	// pylons, the same on every replica).
	ClusterBackends string `yaml:"cluster_backends"`
	// Clients is how the driver's clients talk to the gateway for this algorithm (our
	// extension): "" or ClientsRoutingHeaders sends the routing headers (x-input-tokens,
	// x-cache-affinity-key, …) with a prompt of "x"s; ClientsPlain sends none of them, as a
	// plain OpenAI client does, with prompt text that is each session's own and grows turn
	// by turn (so prefix-aware routing has real prefixes to match).
	Clients string `yaml:"clients"`
}

// Client modes of Algorithm.Clients.
const (
	ClientsRoutingHeaders = "routing-headers"
	ClientsPlain          = "plain"
)

// The gateway's --cluster-backends choices (Algorithm.ClusterBackends).
const (
	ClusterBackendsSpread = "spread"
	ClusterBackendsLead   = "lead"
)

// Plain reports whether the algorithm's clients send no routing headers.
func (a *Algorithm) Plain() bool { return a.Clients == ClientsPlain }

// QueueAdmission maps to the pylon's queue-admission flags (--[no-]queue-admission,
// --queue-admission-min-delta-ms, --queue-admission-tolerance,
// --[no-]queue-admission-require-free-slot).
type QueueAdmission struct {
	Enabled         *bool    `yaml:"enabled"`
	MinDeltaMs      *float64 `yaml:"min_delta_ms"`
	ToleranceFactor *float64 `yaml:"tolerance_factor"`
	// RetryAfterMs is the retry hint of the pylon's admission 429s
	// (--queue-mismatch-retry-after).
	RetryAfterMs *float64 `yaml:"retry_after_ms"`
	// RequireFreeSlot is --[no-]queue-admission-require-free-slot (our extension):
	// false admits a request expected to queue 0 ms at an engine without a free slot,
	// as the reference pylon does.
	RequireFreeSlot *bool `yaml:"require_free_slot"`
	// SlotShares (our extension; default false, the pylon's default) gives each pylon of a
	// cluster of several pylons its share of the shared engine's slots
	// (--engine-slot-share = the profile's max_concurrent_requests; the engine's limit is
	// that times the cluster's pylons). Unset or false runs them without, as the
	// reference pylons run.
	SlotShares *bool `yaml:"slot_shares"`
}

// Shares reports whether the pylons of a cluster of several get slot shares: SlotShares,
// and the admission rule that enforces a share on (admission and its free-slot rule not
// turned off; q may be nil).
func (q *QueueAdmission) Shares() bool {
	return q != nil && q.SlotShares != nil && *q.SlotShares &&
		(q.Enabled == nil || *q.Enabled) && (q.RequireFreeSlot == nil || *q.RequireFreeSlot)
}

// SetSlotShares sets every algorithm's pylon_queue_admission.slot_shares to on (bench run
// --slot-shares).
func (s *Scenario) SetSlotShares(on bool) {
	for i := range s.Algorithms {
		a := &s.Algorithms[i]
		q := QueueAdmission{}
		if a.PylonQueueAdmission != nil {
			q = *a.PylonQueueAdmission
		}
		q.SlotShares = &on
		a.PylonQueueAdmission = &q
	}
}

// GatewayCount returns stargates.count (default 1).
func (s *Scenario) GatewayCount() int {
	if s.Stargates.Count == nil {
		return 1
	}
	return *s.Stargates.Count
}

// PylonsPerCluster returns backends.pylons_per_cluster (default 1).
func (b *Backends) pylonsPerCluster() int {
	return max(b.PylonsPerCluster, 1)
}
