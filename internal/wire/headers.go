package wire

// Request headers of the routing contract (the reference router's, listed in docs/gateway.md).
const (
	HeaderRequestID         = "x-request-id"
	HeaderModel             = "x-model"
	HeaderInputTokens       = "x-input-tokens" //nolint:gosec // a header name, not a credential
	HeaderRoutingKey        = "x-routing-key"
	HeaderRoutingMethod     = "x-routing-method"
	HeaderCacheAffinityKey  = "x-cache-affinity-key"
	HeaderPriority          = "x-priority"
	HeaderRequestSLOMs      = "x-request-slo-ms"
	HeaderMaxWaitMs         = "x-max-wait-ms"
	HeaderStargateMaxWaitMs = "x-stargate-max-wait-ms"
	HeaderOutputTokens      = "x-output-tokens" //nolint:gosec // a header name, not a credential
	HeaderExpectedQueueMs   = "x-stargate-expected-queue-ms"
	HeaderDispatchSeq       = "x-switchyard-dispatch-seq"
	// HeaderPrefillTokens is the gateway's expectation of how many of the request's input
	// tokens the engine will prefill (the rest being in its prompt cache); the pylon counts
	// that much queued work for the request instead of x-input-tokens. Absent: all of them.
	HeaderPrefillTokens = "x-switchyard-prefill-tokens" //nolint:gosec // a header name, not a credential
	// HeaderConversation names a plain client's chat conversation (a hash of its opening
	// messages) for a request without x-cache-affinity-key: the pylon holds it behind the
	// conversation's prompt in flight as it does a keyed request (--prompt-wait).
	HeaderConversation       = "x-switchyard-conversation"
	HeaderRetryable          = "x-stargate-retryable"
	HeaderRetryReason        = "x-stargate-retry-reason"
	HeaderRetryAfterMs       = "x-stargate-retry-after-ms"
	HeaderUpstreamRetryable  = "x-stargate-upstream-retryable"
	HeaderErrorCode          = "x-stargate-error-code"
	HeaderClusterID          = "x-stargate-cluster-id"
	HeaderLastClusterID      = "x-stargate-last-cluster-id"
	HeaderInferenceServerID  = "x-inference-server-id"
	HeaderInferenceServerURL = "x-inference-server-url"
	HeaderPylonLoad          = "x-pylon-load"
	HeaderDynamoPriority     = "x-dynamo-request-priority"
	HeaderDynamoStrict       = "x-dynamo-request-strict-priority"
)

// Retry reasons a pylon puts in x-stargate-retry-reason.
const (
	RetryQueueEstimateMismatch    = "queue_estimate_mismatch"
	RetryUpstreamAdmission        = "upstream_admission_rejected"
	RetryModelGenerationUnavail   = "model_generation_unavailable"
	RetryLocalConnectFailure      = "local_connect_failure"
	RetryDefaultRetryableResponse = "retryable_upstream_response"
)

// Health probe identity: the gateway's RTT probe is GET /health with these headers.
const (
	HealthProbeModel = "stargate-health"
	HealthPath       = "/health"
)

// MaxWaitMs caps x-max-wait-ms (and the wait without any header).
const MaxWaitMs = 60_000
