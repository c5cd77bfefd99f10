// Package scoretest builds deterministic run inputs for golden tests of the scorer and
// the report.
package scoretest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/bench/score"
)

// Fleet is a two-cluster, four-backend fleet with unequal capacities.
func Fleet() []score.BackendInfo {
	return []score.BackendInfo{
		{ID: "backend-0", Cluster: "cluster-0", CapacityTPS: 300},
		{ID: "backend-1", Cluster: "cluster-0", CapacityTPS: 300},
		{ID: "backend-2", Cluster: "cluster-1", CapacityTPS: 100},
		{ID: "backend-3", Cluster: "cluster-1", CapacityTPS: 100},
	}
}

// MetricsBefore and MetricsAfter are one gateway's and one pylon's scrapes.
const (
	GatewayBefore = `# HELP switchyard_proxy_retries_total retries
switchyard_proxy_retries_total{routing_key="",model="dummy-model",reason="queue_estimate_mismatch"} 2
switchyard_routing_selections_total{routing_key="",model="dummy-model",algorithm="wait-and-widen",selection="primary"} 10
`
	GatewayAfter = `switchyard_proxy_retries_total{routing_key="",model="dummy-model",reason="queue_estimate_mismatch"} 5
switchyard_proxy_retries_total{routing_key="",model="dummy-model",reason="connect_failover"} 1
switchyard_proxy_retry_exhausted_total{routing_key="",model="dummy-model",reason="retry_budget_exhausted"} 1
switchyard_routing_selections_total{routing_key="",model="dummy-model",algorithm="wait-and-widen",selection="primary"} 26
switchyard_routing_selections_total{routing_key="",model="dummy-model",algorithm="wait-and-widen",selection="fallback"} 3
switchyard_routing_kv_free_token_fallback_selections_total{routing_key="",model="dummy-model",algorithm="wait-and-widen"} 1
`
	PylonBefore = ``
	PylonAfter  = `pylon_queue_admission_decisions_total{inference_server_id="backend-0",model_id="dummy-model",result="accepted"} 15
pylon_queue_admission_decisions_total{inference_server_id="backend-0",model_id="dummy-model",result="rejected"} 3
`
)

// Input returns a deterministic run of 20 requests for algorithm name; skew moves
// traffic towards backend-0 (0 = round-robin-like spread).
func Input(name string, skew int) score.Input {
	in := score.Input{Algorithm: name, AdmissionMode: "enabled", Backends: Fleet(), Length: 4 * time.Second}
	ms := time.Millisecond
	for i := range 20 {
		b := i % 4
		if i < skew {
			b = 0
		}
		r := score.Record{
			Index: i, ID: fmt.Sprintf("fixture-1-%06d", i), Class: "prefix_reuse",
			AffinityKey: fmt.Sprintf("key-%d", i%5), InputTokens: uint64(1000 + 100*i), WantedOutput: 10,
			Sent: time.Duration(i) * 150 * ms, Status: 200, Completed: true, OutputTokens: 10,
			TTFT: time.Duration(20+7*i+10*b) * ms, TTLT: time.Duration(120+9*i+20*b) * ms,
			Backend: fmt.Sprintf("backend-%d", b), Cluster: fmt.Sprintf("cluster-%d", b/2),
			KV:           &score.KV{Hit: i >= 5 && b == i%4, ReusedInput: uint64(50 * i), UncachedInput: 1000, EvictedEntries: uint64(i % 7 / 6), EvictedTokens: uint64(i%7/6) * 900},
			EngineQueued: b == 0 && i%3 == 0,
		}
		switch i {
		case 17:
			r.Status, r.Error, r.Completed, r.OutputTokens, r.TTFT, r.KV = 503, "no eligible candidates", false, 0, 0, nil
			r.Backend, r.Cluster = "", ""
		case 18:
			r.Error, r.Completed, r.OutputTokens = "stream ended before [DONE]", false, 4
		}
		in.Records = append(in.Records, r)
	}
	in.MetricDeltas = score.MetricDeltas([][2]string{{GatewayBefore, GatewayAfter}, {PylonBefore, PylonAfter}})
	return in
}

// Golden compares got with testdata/<name>; with update it rewrites the file first.
func Golden(tb testing.TB, update bool, name string, got []byte) {
	tb.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.MkdirAll("testdata", 0o750); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		tb.Errorf("%s (-want +got):\n%s", name, diff)
	}
}
