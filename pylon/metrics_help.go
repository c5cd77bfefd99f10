package pylon

import (
	"strconv"

	"github.com/switchyard/switchyard/internal/promtext"
	"github.com/switchyard/switchyard/internal/wire"
)

// metricsHelp is the # HELP text of every pylon family, without the prefix
// (docs/metrics.md lists them with their labels).
var metricsHelp = map[string]string{ //nolint:gosec // help texts that mention tokens, not credentials
	mTargetInfo:                        "The pylon's version (always 1).",
	mRegistrationConn:                  "1 while the registration with the gateway is current, 0 while it is failing.",
	mRequestsInflight:                  "Requests the pylon is relaying to the engine.",
	mRequestsState:                     "Requests in flight by phase (queued, prefill, decode).",
	mRequestsStateTokens:               "Input tokens of the requests in flight by phase.",
	mRequestsTotal:                     "Finished requests by HTTP status.",
	mTimeToHeaders:                     "Time from a request's arrival to the engine's response headers.",
	mTimeToFirstOutput:                 "Time from a request's arrival to the engine's first output byte (time to first token).",
	mRequestDuration:                   "Time from a request's arrival to the end of the engine's answer.",
	mInputTokensTotal:                  "Input (prompt) tokens of finished requests.",
	mOutputTokensTotal:                 "Output tokens of finished requests.",
	mStatsSourcesTotal:                 "Finished requests by where their token counts came from (usage: the engine's usage block; chunks: counted from the stream).",
	mInputTokens:                       "Input (prompt) tokens per request.",
	mOutputTokens:                      "Output tokens per request.",
	mStreamConnected:                   "1 while the engine's stats stream is connected.",
	mDiscoveryPolls:                    "Polls of the engine's model list by outcome.",
	mDiscoveryModels:                   "Models the engine's model list names.",
	mRetryable:                         "Answers the gateway may retry elsewhere, by reason and HTTP status.",
	mNonRetryable:                      "Failures the gateway must not retry, by reason.",
	mAdmissionDecisions:                "Local queue admission decisions by result.",
	mAdmissionNoSlot:                   "Requests rejected (result rejected) only because the gateway expected no queue and the engine had no free slot, or the pylon's own requests filled its --engine-slot-share (--queue-admission-require-free-slot).",
	mAdmissionExpected:                 "Queue wait the gateway expected (x-expected-queue-ms) for admission-checked requests.",
	mAdmissionActual:                   "Queue wait the pylon estimated locally for admission-checked requests.",
	mModelOutputTPS:                    "Output tokens per second the engine produces now.",
	mModelInputTPS:                     "Mean input (prefill) tokens per second of the engine, as published to gateways.",
	mModelMaxOutputTPS:                 "Highest output tokens per second observed.",
	mModelQueueSize:                    "Requests waiting in the engine's queue.",
	mModelQueuedTokens:                 "Input tokens of the requests waiting in the engine's queue.",
	mModelKVCapacity:                   "KV cache capacity of the engine, in tokens.",
	mModelKVUsed:                       "KV cache tokens in use.",
	mModelKVFree:                       "KV cache tokens free.",
	mModelMaxConcurrency:               "Requests the engine runs at once at most.",
	mModelAdvertised:                   "1 for each model the pylon advertises to gateways, by status.",
	mUpstreamTimeouts:                  "Engine connections closed because the engine sent nothing for too long, by reason (first_output, stream_idle).",
	mEngineUnresponsive:                "Times the engine answered no liveness check three times in a row (--engine-check-timeout): its waiting and new requests were answered 503 retryable until a check passed.",
	mEngineUnresponsiveNow:             "1 while the engine is marked unresponsive (no answer to three liveness checks in a row), else 0.",
	mStreamsRelayed:                    "Streams being relayed to gateways, handed off the server's goroutines (HTTP/1.0 and drain-time streams are not counted).",
	mCanaryChecks:                      "Canary requests to the engine by result.",
	mPromptWaits:                       "Requests that waited for the same cache-affinity key's prompt being prefilled on the engine for an earlier request, by outcome (cached: released when it was cached; timeout: --prompt-wait passed).",
	mPromptWaitSeconds:                 "How long requests waited for the same cache-affinity key's prompt in flight on the engine.",
	mPromptsInflight:                   "Cache-affinity keys whose prompt the engine is prefilling (requests with the key wait for it).",
	mShareHolds:                        "Admitted requests held back from the engine while this pylon's own requests there filled its --engine-slot-share, by outcome (released: one of them finished; timeout: --engine-slot-share-wait passed; client_gone: the gateway closed the connection, and the request never reached the engine).",
	mShareHoldSeconds:                  "How long requests were held back from the engine for this pylon's slot share.",
	mShareHeld:                         "Requests held back from the engine now, waiting for room in this pylon's slot share.",
	mCanaryFailures:                    "Failed canary requests by reason.",
	mCalibrationDuration:               "Time the startup calibration of a model took, by outcome.",
	mEngineModelServed:                 "1 when the engine's model list names the configured model, 0 when not.",
	mEngineMetricsMatched:              "1 when the last scrape of the engine's /metrics had figures for the model.",
	"engine_stats_stream_events_total": "Events read from the engine's stats stream by type.",
	"engine_stats_stream_invalid_events_total": "Events of the engine's stats stream that were rejected, by reason.",
	"engine_stats_stream_reconnects_total":     "Reconnections of the engine's stats stream by reason.",
	"engine_metrics_scrapes_total":             "Scrapes of the engine's /metrics by result.",
	"engine_metrics_rate_skips_total":          "Engine /metrics scrapes whose counters gave no rate, by reason.",
	refAdmissionExpectedMs:                     "The reference router's name of queue_admission_expected_seconds, in milliseconds.",
	refAdmissionActualMs:                       "The reference router's name of queue_admission_actual_seconds, in milliseconds.",
	refModelOutputTPS:                          "The reference router's name of model_output_tokens_per_second.",
	refModelInputTPS:                           "The reference router's name of model_last_mean_input_tokens_per_second.",
	refModelMaxOutputTPS:                       "The reference router's name of model_max_output_tokens_per_second.",
	refCalibrationDuration:                     "The reference router's name of model_calibration_duration_seconds, in milliseconds.",
}

// zero creates the pylon-wide counters of rare events at zero, so that a dashboard or an
// alert reads 0 (not "no data") before the first event.
func (m *pylonMetrics) zero() {
	for _, r := range []struct {
		reason string
		status int
	}{{wire.RetryQueueEstimateMismatch, 429}, {wire.RetryUpstreamAdmission, 429}, {wire.RetryUpstreamAdmission, 503}} {
		m.counter(mRetryable + `{inference_server_id="` + m.id + `",reason="` + r.reason + `",status="` + strconv.Itoa(r.status) + `"}`)
	}
	for _, r := range []string{"upstream_nonretryable_status", "missing_upstream_retry_header"} {
		m.counter(mNonRetryable + `{inference_server_id="` + m.id + `",reason="` + r + `"}`)
	}
}

// page is the pylon's /metrics exposition.
func (m *pylonMetrics) page() promtext.Page {
	return promtext.Page{Prefix: m.prefix, Help: metricsHelp}
}
