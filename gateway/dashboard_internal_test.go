package gateway

import (
	"slices"
	"testing"

	"github.com/switchyard/switchyard/deploy/deploytest"
)

// Every gateway metric the Grafana dashboard in deploy/ queries is one the gateway exports.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	known := []string{
		mRequests, mAttempts, mRetries, mRetryExhausted, mSelections, mKVFallback, mAdmission, mRoutingRejects,
		mProxyDuration, mRoutingDuration, mOverhead, mReplayBytes, mParked, mActiveBackends, mRegistrations,
		mLBConfigReloads, mLoadReports, mClientCancelled, mBackendsExpired, mInflightRequests,
	}
	for _, name := range deploytest.DashboardMetrics(t, DefaultMetricsPrefix) {
		if !slices.Contains(known, name) {
			t.Errorf("the dashboard queries %s%s, which the gateway does not export", DefaultMetricsPrefix, name)
		}
	}
}
