package pylon

import (
	"slices"
	"testing"

	"github.com/switchyard/switchyard/deploy/deploytest"
)

// Every pylon metric the Grafana dashboard in deploy/ queries is one the pylon exports.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	known := []string{
		mAdmissionActualMs, mAdmissionDecisions, mAdmissionExpectedMs, mDiscoveryModels, mDiscoveryPolls, mInputTokens,
		mInputTokensTotal, mModelAdvertised, mModelInputTPS, mModelKVCapacity, mModelKVFree, mModelKVUsed,
		mModelMaxConcurrency, mModelMaxOutputTPS, mModelOutputTPS, mModelQueueSize, mModelQueuedTokens, mNonRetryable,
		mOutputTokens, mOutputTokensTotal, mRegistrationConn, mRequestDuration, mRequestsInflight, mRequestsState,
		mRequestsStateTokens, mRequestsTotal, mRetryable, mStatsSourcesTotal, mStreamConnected, mTargetInfo,
		mTimeToFirstOutput, mTimeToHeaders, mUpstreamTimeouts,
	}
	for _, name := range deploytest.DashboardMetrics(t, DefaultMetricsPrefix) {
		if !slices.Contains(known, name) {
			t.Errorf("the dashboard queries %s%s, which the pylon does not export", DefaultMetricsPrefix, name)
		}
	}
}
