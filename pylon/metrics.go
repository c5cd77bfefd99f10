package pylon

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard/switchyard/internal/relay"
	"github.com/switchyard/switchyard/pylon/admission"
	"github.com/switchyard/switchyard/pylon/stats"
)

// Metric names, without the configurable prefix.
const (
	mTargetInfo          = "target_info"
	mRegistrationConn    = "registration_stream_connected"
	mRequestsInflight    = "requests_inflight"
	mRequestsState       = "requests_state"
	mRequestsStateTokens = "requests_state_input_tokens"
	mRequestsTotal       = "requests_total"
	mTimeToHeaders       = "request_time_to_response_headers_seconds"
	mTimeToFirstOutput   = "request_time_to_first_output_seconds"
	mRequestDuration     = "request_duration_seconds"
	mInputTokensTotal    = "request_input_tokens_total"
	mOutputTokensTotal   = "request_output_tokens_total"
	mStatsSourcesTotal   = "request_stats_sources_total"
	mInputTokens         = "request_input_tokens"
	mOutputTokens        = "request_output_tokens"
	mStreamConnected     = "engine_stats_stream_connected"
	mDiscoveryPolls      = "model_discovery_polls_total"
	mDiscoveryModels     = "model_discovery_models"
	mRetryable           = "retryable_responses_total"
	mNonRetryable        = "nonretryable_failures_total"
	mAdmissionDecisions  = "queue_admission_decisions_total"
	mAdmissionExpected   = "queue_admission_expected_seconds"
	mAdmissionActual     = "queue_admission_actual_seconds"
	mAdmissionNoSlot     = "queue_admission_no_free_slot_total"
	mModelOutputTPS      = "model_output_tokens_per_second"
	mModelInputTPS       = "model_last_mean_input_tokens_per_second"
	mModelMaxOutputTPS   = "model_max_output_tokens_per_second"
	mModelQueueSize      = "model_queue_size"
	mModelQueuedTokens   = "model_queued_input_tokens" //nolint:gosec // a metric name, not a credential
	mModelKVCapacity     = "model_kv_cache_capacity_tokens"
	mModelKVUsed         = "model_kv_cache_used_tokens"
	mModelKVFree         = "model_kv_cache_free_tokens"
	mModelMaxConcurrency = "model_max_engine_concurrency"
	mModelAdvertised     = "model_advertised_status"
	// mUpstreamTimeouts counts engine connections the pylon closed because the engine
	// sent nothing for too long: reason first_output (no response bytes within the
	// first-output timeout; the request got 504) or stream_idle (a response stalled longer
	// than the stream idle timeout; the relayed stream was ended with an error event).
	mUpstreamTimeouts = "upstream_timeouts_total"
	// mEngineUnresponsive counts the times the engine liveness watch marked the engine
	// unresponsive; mEngineUnresponsiveNow is 1 while it is.
	mEngineUnresponsive    = "engine_unresponsive_total"
	mEngineUnresponsiveNow = "engine_unresponsive"
	mStreamsRelayed        = "streams_relayed"
	// mPromptWaits counts requests that waited for the same affinity key's prompt in
	// flight on the engine (Config.PromptWait), by outcome: cached (released in time) or
	// timeout; mPromptWaitSeconds is how long they waited; mPromptsInflight is the number
	// of keys whose prompt is being prefilled.
	mPromptWaits       = "prompt_waits_total"
	mPromptWaitSeconds = "prompt_wait_seconds"
	mPromptsInflight   = "prompts_inflight"
	// mShareHolds counts admitted requests held back from the engine while the pylon's own
	// requests there filled its slot share (Admission.SlotShareWait), by outcome: released
	// (one of them finished) or timeout; mShareHoldSeconds is how long they were held;
	// mShareHeld is the number held now.
	mShareHolds       = "slot_share_holds_total"
	mShareHoldSeconds = "slot_share_hold_seconds"
	mShareHeld        = "slot_share_held"
	mCanaryChecks     = "canary_checks_total"
)

// The reference router's names of the series above whose units are not base units,
// exported as well with Config.MetricsReferenceNames.
const (
	refAdmissionExpectedMs = "queue_admission_expected_ms"
	refAdmissionActualMs   = "queue_admission_actual_ms"
	refModelOutputTPS      = "model_output_tps"
	refModelInputTPS       = "model_last_mean_input_tps"
	refModelMaxOutputTPS   = "model_max_output_tps"
)

var (
	secondsBuckets   = metrics.ExponentialBuckets(0.0005, 2, 18) // 0.5 ms … 65 s
	tokenBuckets     = metrics.ExponentialBuckets(16, 2, 14)     // 16 … 131 072 tokens
	admissionBuckets = metrics.ExponentialBuckets(0.001, 2, 18)  // 1 ms … 131 s
	msBuckets        = metrics.ExponentialBuckets(1, 2, 18)      // 1 ms … 131 s (reference names)
)

func escape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// pylonMetrics is one pylon's metric set.
type pylonMetrics struct {
	set    *metrics.Set
	prefix string
	id     string
	// reference also exports the reference router's _ms and _tps names.
	reference bool
	// outcomes caches the retry-signalling counters by outcomeKey (the series name is
	// formatted once per distinct outcome, not per request).
	outcomes sync.Map
	// firstOutputTimeouts and streamIdleTimeouts are upstream_timeouts_total by reason.
	firstOutputTimeouts *metrics.Counter
	streamIdleTimeouts  *metrics.Counter
	// engineUnresponsive is engine_unresponsive_total.
	engineUnresponsive *metrics.Counter
	// promptCached and promptTimeout are prompt_waits_total by outcome; promptWait is
	// prompt_wait_seconds.
	promptCached, promptTimeout *metrics.Counter
	promptWait                  *metrics.PrometheusHistogram
	// shareReleased, shareTimeout and shareClientGone are slot_share_holds_total by
	// outcome; shareHold is slot_share_hold_seconds.
	shareReleased, shareTimeout, shareClientGone *metrics.Counter
	shareHold                                    *metrics.PrometheusHistogram
}

type outcomeKey struct {
	retryable bool
	reason    string
	status    int
}

func newPylonMetrics(prefix, id, version string, reference bool) *pylonMetrics {
	m := &pylonMetrics{set: metrics.NewSet(), prefix: prefix, id: escape(id), reference: reference}
	m.set.GetOrCreateGauge(prefix+mTargetInfo+`{service_name="pylon",service_version="`+escape(version)+`",commit="`+escape(version)+`"}`, func() float64 { return 1 })
	m.firstOutputTimeouts = m.counter(mUpstreamTimeouts + `{reason="first_output"}`)
	m.streamIdleTimeouts = m.counter(mUpstreamTimeouts + `{reason="stream_idle"}`)
	m.engineUnresponsive = m.counter(mEngineUnresponsive)
	m.promptCached = m.counter(mPromptWaits + `{outcome="` + promptWaitCached + `"}`)
	m.promptTimeout = m.counter(mPromptWaits + `{outcome="` + promptWaitTimeout + `"}`)
	m.promptWait = m.set.GetOrCreatePrometheusHistogramExt(prefix+mPromptWaitSeconds, waitBuckets)
	m.shareReleased = m.counter(mShareHolds + `{outcome="released"}`)
	m.shareTimeout = m.counter(mShareHolds + `{outcome="timeout"}`)
	m.shareClientGone = m.counter(mShareHolds + `{outcome="client_gone"}`)
	m.shareHold = m.set.GetOrCreatePrometheusHistogramExt(prefix+mShareHoldSeconds, waitBuckets)
	m.zero()
	return m
}

// waitBuckets are the upper bounds of prompt_wait_seconds and slot_share_hold_seconds: a
// prefill, or a request's turn at the engine, takes milliseconds to tens of seconds.
var waitBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// promptWaited records one wait for a prompt in flight.
func (m *pylonMetrics) promptWaited(d time.Duration, cached bool) {
	if cached {
		m.promptCached.Inc()
	} else {
		m.promptTimeout.Inc()
	}
	m.promptWait.Update(d.Seconds())
}

// shareHeld records one request held back from the engine for its slot share.
func (m *pylonMetrics) shareHeld(d time.Duration, outcome holdOutcome) {
	switch outcome {
	case holdReleased:
		m.shareReleased.Inc()
	case holdTimeout:
		m.shareTimeout.Inc()
	default:
		m.shareClientGone.Inc()
	}
	m.shareHold.Update(d.Seconds())
}

// upstreamTimedOut counts an engine connection the watchdog closed.
func (m *pylonMetrics) upstreamTimedOut(why uint32) {
	if why == relay.AbortFirstOutput {
		m.firstOutputTimeouts.Inc()
	} else {
		m.streamIdleTimeouts.Inc()
	}
}

func (m *pylonMetrics) counter(name string) *metrics.Counter {
	return m.set.GetOrCreateCounter(m.prefix + name)
}

func (m *pylonMetrics) gauge(name string) *metrics.Gauge {
	return m.set.GetOrCreateGauge(m.prefix+name, nil)
}

func (m *pylonMetrics) retryable(reason string, status int) {
	m.outcome(outcomeKey{retryable: true, reason: reason, status: status}).Inc()
}

func (m *pylonMetrics) nonRetryable(reason string) {
	m.outcome(outcomeKey{reason: reason}).Inc()
}

func (m *pylonMetrics) outcome(k outcomeKey) *metrics.Counter {
	if c, ok := m.outcomes.Load(k); ok {
		return c.(*metrics.Counter)
	}
	var c *metrics.Counter
	if k.retryable {
		c = m.counter(mRetryable + `{inference_server_id="` + m.id + `",reason="` + k.reason + `",status="` + strconv.Itoa(k.status) + `"}`)
	} else {
		c = m.counter(mNonRetryable + `{inference_server_id="` + m.id + `",reason="` + k.reason + `"}`)
	}
	m.outcomes.Store(k, c)
	return c
}

// modelMetrics are the cached series of one model (all generations share them).
type modelMetrics struct {
	m         *pylonMetrics
	label     string
	decisions []*metrics.Counter
	noSlot    *metrics.Counter
	expected  *metrics.PrometheusHistogram
	actual    *metrics.PrometheusHistogram
	// expectedMs and actualMs are the reference names' histograms (nil unless exported).
	expectedMs *metrics.PrometheusHistogram
	actualMs   *metrics.PrometheusHistogram
	headers    *metrics.PrometheusHistogram
	first      *metrics.PrometheusHistogram
	duration   *metrics.PrometheusHistogram
	inTotal    *metrics.Counter
	outTotal   *metrics.Counter
	inHist     *metrics.PrometheusHistogram
	outHist    *metrics.PrometheusHistogram
	usage      *metrics.Counter
	chunks     *metrics.Counter

	// byStatus caches requests_total by HTTP status (100–599), created on first use.
	byStatus [500]atomic.Pointer[metrics.Counter]
}

func newModelMetrics(m *pylonMetrics, model string, snap func() *genSnapshot) *modelMetrics {
	l := escape(model)
	ml := `{model="` + l + `"}`
	mm := &modelMetrics{m: m, label: l, decisions: make([]*metrics.Counter, len(admission.Results))}
	for _, r := range admission.Results {
		mm.decisions[r] = m.counter(mAdmissionDecisions + `{inference_server_id="` + m.id + `",model_id="` + l + `",result="` + r.String() + `"}`)
	}
	il := `{inference_server_id="` + m.id + `",model_id="` + l + `"}`
	mm.noSlot = m.counter(mAdmissionNoSlot + il)
	s, p := m.set, m.prefix
	mm.expected = s.GetOrCreatePrometheusHistogramExt(p+mAdmissionExpected+il, admissionBuckets)
	mm.actual = s.GetOrCreatePrometheusHistogramExt(p+mAdmissionActual+il, admissionBuckets)
	if m.reference {
		mm.expectedMs = s.GetOrCreatePrometheusHistogramExt(p+refAdmissionExpectedMs+il, msBuckets)
		mm.actualMs = s.GetOrCreatePrometheusHistogramExt(p+refAdmissionActualMs+il, msBuckets)
	}
	mm.headers = s.GetOrCreatePrometheusHistogramExt(p+mTimeToHeaders+ml, secondsBuckets)
	mm.first = s.GetOrCreatePrometheusHistogramExt(p+mTimeToFirstOutput+ml, secondsBuckets)
	mm.duration = s.GetOrCreatePrometheusHistogramExt(p+mRequestDuration+ml, secondsBuckets)
	mm.inTotal = m.counter(mInputTokensTotal + ml)
	mm.outTotal = m.counter(mOutputTokensTotal + ml)
	mm.inHist = s.GetOrCreatePrometheusHistogramExt(p+mInputTokens+ml, tokenBuckets)
	mm.outHist = s.GetOrCreatePrometheusHistogramExt(p+mOutputTokens+ml, tokenBuckets)
	mm.usage = m.counter(mStatsSourcesTotal + `{model="` + l + `",source="usage"}`)
	mm.chunks = m.counter(mStatsSourcesTotal + `{model="` + l + `",source="chunks"}`)
	get := func(f func(g *genSnapshot) float64) func() float64 {
		return func() float64 {
			if g := snap(); g != nil {
				return f(g)
			}
			return 0
		}
	}
	s.GetOrCreateGauge(p+mRequestsInflight+ml, get(func(g *genSnapshot) float64 { return float64(g.load.RunningRequests) }))
	for _, ph := range stats.Phases {
		sl := `{model="` + l + `",state="` + ph.String() + `"}`
		s.GetOrCreateGauge(p+mRequestsState+sl, get(func(g *genSnapshot) float64 { return float64(g.phases[ph].requests) }))
		s.GetOrCreateGauge(p+mRequestsStateTokens+sl, get(func(g *genSnapshot) float64 { return float64(g.phases[ph].tokens) }))
	}
	for name, f := range map[string]func(g *genSnapshot) float64{
		mModelOutputTPS:      func(g *genSnapshot) float64 { return g.load.OutputTPS },
		mModelInputTPS:       func(g *genSnapshot) float64 { return g.load.InputTPS },
		mModelMaxOutputTPS:   func(g *genSnapshot) float64 { return g.load.MaxOutputTPS },
		mModelQueueSize:      func(g *genSnapshot) float64 { return float64(g.load.QueueSize) },
		mModelQueuedTokens:   func(g *genSnapshot) float64 { return float64(g.load.QueuedInputTokens) },
		mModelKVCapacity:     func(g *genSnapshot) float64 { return float64(g.load.KVCapacityTokens) },
		mModelKVUsed:         func(g *genSnapshot) float64 { return float64(g.load.KVUsedTokens) },
		mModelKVFree:         func(g *genSnapshot) float64 { return float64(g.load.KVFreeTokens) },
		mModelMaxConcurrency: func(g *genSnapshot) float64 { return float64(g.load.MaxEngineConcurrency) },
	} {
		s.GetOrCreateGauge(p+name+ml, get(f))
	}
	if m.reference {
		s.GetOrCreateGauge(p+refModelOutputTPS+ml, get(func(g *genSnapshot) float64 { return g.load.OutputTPS }))
		s.GetOrCreateGauge(p+refModelInputTPS+ml, get(func(g *genSnapshot) float64 { return g.load.InputTPS }))
		s.GetOrCreateGauge(p+refModelMaxOutputTPS+ml, get(func(g *genSnapshot) float64 { return g.load.MaxOutputTPS }))
	}
	s.GetOrCreateGauge(p+mModelAdvertised+`{model="`+l+`",status="ACTIVE"}`, func() float64 {
		if snap() != nil {
			return 1
		}
		return 0
	})
	return mm
}

func (mm *modelMetrics) status(code int) *metrics.Counter {
	slot := (*atomic.Pointer[metrics.Counter])(nil)
	if code >= 100 && code < 600 {
		slot = &mm.byStatus[code-100]
		if c := slot.Load(); c != nil {
			return c
		}
	}
	// GetOrCreate makes concurrent first uses agree on one counter.
	c := mm.m.counter(mRequestsTotal + `{model="` + mm.label + `",status="` + strconv.Itoa(code) + `"}`)
	if slot != nil {
		slot.Store(c)
	}
	return c
}

func (mm *modelMetrics) decision(d admission.Decision) {
	mm.decisions[d.Result].Inc()
	if d.NoFreeSlot {
		mm.noSlot.Inc()
	}
	if d.Result == admission.Accepted || d.Result == admission.Rejected {
		mm.expected.Update(float64(d.ExpectedMs) / 1000)
		mm.actual.Update(float64(d.ActualMs) / 1000)
		if mm.expectedMs != nil {
			mm.expectedMs.Update(float64(d.ExpectedMs))
			mm.actualMs.Update(float64(d.ActualMs))
		}
	}
}
