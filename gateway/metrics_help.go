package gateway

import (
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/gateway/retry"
	"github.com/switchyard/switchyard/internal/promtext"
	"github.com/switchyard/switchyard/internal/wire"
)

// mRoutableBackends is the number of backends routable for at least one model (the
// readiness condition; 0 means every request fails).
const mRoutableBackends = "routable_backends"

// metricsHelp is the # HELP text of every gateway family, without the prefix
// (docs/metrics.md lists them with their labels).
var metricsHelp = map[string]string{
	mRequests:          "Finished requests by the backend that answered (empty when none was selected) and HTTP status; a stream counts once ended (499: client went away, 502: broken).",
	mAttempts:          "Upstream attempts by backend and result (upstream_<status> or proxy_502).",
	mRetries:           "Retries of a request on another attempt, by reason.",
	mUncheckedRetries:  "Last retries after a pylon refused the request for its queue, sent without an expected queue so that no pylon refuses them again.",
	mRetryExhausted:    "Requests that failed with no retry left, by reason.",
	mSelections:        "Routing grants by algorithm; selection is primary (first-ranked backend) or fallback.",
	mKVFallback:        "Grants reached after a higher-ranked backend failed the KV free-token check.",
	mSessions:          "Grants under last_cluster_affinity by session state (new, returning, stale).",
	mAdmission:         "Requests refused by input-work or capacity admission, by reason.",
	mRoutingRejects:    "Requests not routed, by reason (every rejection, admission included).",
	mProxyDuration:     "Time from sending an attempt to the backend's response headers.",
	mRoutingDuration:   "Time from a request's arrival to its first routing grant, waits included.",
	mOverhead:          "Gateway CPU-side time per request outside routing waits and the upstream.",
	mReplayBytes:       "Bytes of request body kept for replay on a retry.",
	mParked:            "Requests waiting in a scheduler for a backend (parked).",
	mActiveBackends:    "Backends routable for the target (routing key × model): active and with a measured RTT.",
	mRoutableBackends:  "Backends routable for at least one model; 0 means every request fails.",
	mRegistrations:     "Pylon registrations and heartbeats by result (accepted, invalid, conflict, unauthorized).",
	mLoadUpdates:       "Pylon load updates (heartbeats between full registrations) by result (accepted, invalid, unknown_backend, registration_required, unauthorized).",
	mLBConfigReloads:   "Reloads of the lb-config file by result (applied, rejected).",
	mLoadReports:       "Load reports (x-pylon-load) from pylons by result (applied, invalid).",
	mClientCancelled:   "Requests whose client went away before the answer ended.",
	mBackendsExpired:   "Backends dropped after missing their heartbeats.",
	mAbandoned:         "Attempts given up with no answer yet because their pylon answered no health probe (they fail over).",
	mInflightRequests:  "Requests being handled (routing, waiting or proxying), streams until their last event.",
	mStreamsRelayed:    "Event streams being relayed to clients, handed off the server's goroutines (HTTP/1.0 and drain-time streams are not counted).",
	mRoutingTargets:    "Routing targets (routing key × model) with a scheduler.",
	mAdminUnauthorized: "Admin-listener requests refused for a missing or wrong token.",
	mTTFTErrorRatio:    "Streamed attempts' |observed − estimated| time to first byte, relative to the estimate.",
	mTTFTErrorSeconds:  "Streamed attempts' |observed − estimated| time to first byte.",
	mTTFTExceeded:      "Streamed attempts whose first byte came later than the routing estimate.",
	mEjections:         "Backend ejections by the failure that triggered them.",
	mEjected:           "Backends ejected right now.",
	mExpressions:       "Requests routed by a routing expression (x-routing-method with settings), by algorithm and cache (hit, miss).",
	mExpressionEntries: "Routing targets whose parsed routing expressions are cached.",
}

// Label values the counters are created with at zero, so that a dashboard or an alert
// reads 0 (not "no data") before the first event.
var (
	retryReasons = []string{
		retry.ReasonConnectFailover, retry.ReasonFirstByteTimeout, retry.ReasonPylonUnresponsive, retry.ReasonEngineUnreachable,
		wire.RetryQueueEstimateMismatch, wire.RetryUpstreamAdmission, wire.RetryModelGenerationUnavail,
		wire.RetryLocalConnectFailure, wire.RetryDefaultRetryableResponse,
	}
	exhaustedReasons = []string{retry.ReasonBudgetExhausted, retry.ReasonConnectRetriesExhaust, retry.ReasonNoEligibleBackend}
)

// zeroTarget creates a routing target's counters of rare events at zero.
func (m *gatewayMetrics) zeroTarget(t dispatch.Target) {
	for _, r := range retryReasons {
		m.set.GetOrCreateCounter(m.series(mRetries, "routing_key", t.RoutingKey, "model", t.Model, "reason", r))
	}
	for _, r := range exhaustedReasons {
		m.set.GetOrCreateCounter(m.series(mRetryExhausted, "routing_key", t.RoutingKey, "model", t.Model, "reason", r))
	}
	// Every rejection reason of the error table (gateway/errors.go); admission ones in
	// admission_rejections_total too.
	for r := dispatch.ReasonNone + 1; r < dispatch.NumReasons; r++ {
		reason := r.String()
		m.set.GetOrCreateCounter(m.series(mRoutingRejects, "routing_key", t.RoutingKey, "model", t.Model, "reason", reason))
		if rejectionOf(r).admission {
			m.set.GetOrCreateCounter(m.series(mAdmission, "routing_key", t.RoutingKey, "model", t.Model, "reason", reason))
		}
	}
	m.set.GetOrCreateCounter(m.series(mClientCancelled, "routing_key", t.RoutingKey, "model", t.Model))
}

// zeroGateway creates the gateway-wide counters at zero.
func (m *gatewayMetrics) zeroGateway() {
	for _, r := range []string{"accepted", "invalid", "conflict", "unauthorized"} {
		m.set.GetOrCreateCounter(m.series(mRegistrations, "result", r))
	}
	for _, r := range []string{"accepted", "invalid", "unknown_backend", "registration_required", "unauthorized"} {
		m.set.GetOrCreateCounter(m.series(mLoadUpdates, "result", r))
	}
	for _, r := range []string{"applied", "rejected"} {
		m.set.GetOrCreateCounter(m.series(mLBConfigReloads, "result", r))
	}
	m.set.GetOrCreateCounter(m.series(mLoadReports, "result", "invalid"))
	m.set.GetOrCreateCounter(m.series(mBackendsExpired))
	m.set.GetOrCreateCounter(m.series(mAbandoned))
	m.set.GetOrCreateCounter(m.series(mAdminUnauthorized))
}

// page is the gateway's /metrics exposition.
func (m *gatewayMetrics) page() promtext.Page {
	return promtext.Page{Prefix: m.prefix, Help: metricsHelp}
}

// fleetGauges writes the gauges computed at scrape time from the fleet.
type fleetGauges struct {
	m         *gatewayMetrics
	perTarget map[dispatch.Target]int
	routable  int
	targets   int
}

func (f fleetGauges) write(w io.Writer) {
	s := metrics.NewSet()
	for t, n := range f.perTarget {
		s.NewGauge(f.m.series(mActiveBackends, "routing_key", t.RoutingKey, "model", t.Model), nil).Set(float64(n))
	}
	s.NewGauge(f.m.series(mRoutableBackends), nil).Set(float64(f.routable))
	s.NewGauge(f.m.series(mRoutingTargets), nil).Set(float64(f.targets))
	s.WritePrometheus(w)
}
