package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
)

func sampleLoad() load.Load {
	return load.Load{
		InputTPS: 1234.5, OutputTPS: 20, MaxOutputTPS: 40, QueueSize: 3, QueuedInputTokens: 900, RunningRequests: 7,
		MaxEngineConcurrency: 8, TotalInputTokens: 1200, InputProcessingRequests: 1, OutputGenerationRequests: 4,
		KVCapacityTokens: 100, KVUsedTokens: 40, KVFreeTokens: 60, ObservedAtUnixMilli: 1_700_000_000_000,
		QueueEstimates: []load.PriorityEstimate{{Priority: 0, QueueMs: 5}, {Priority: 4, QueueMs: 70}},
		Capabilities:   []string{"machine.kv_cache.http"}, Sources: []string{"kv_cache_stats"},
	}
}

func TestStatsRoundTrip(t *testing.T) {
	t.Parallel()
	l := sampleLoad()
	s := wire.StatsFromLoad(&l)
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back wire.Stats
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	got, err := back.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(l, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	empty := load.Load{QueueEstimates: []load.PriorityEstimate{}}
	data, _ = json.Marshal(wire.StatsFromLoad(&empty))
	if !strings.Contains(string(data), `"queue_time_estimate_ms_by_priority":{}`) {
		t.Errorf("an explicit empty map must be sent: %s", data)
	}
	data, _ = json.Marshal(wire.StatsFromLoad(&load.Load{}))
	if strings.Contains(string(data), "queue_time_estimate") {
		t.Errorf("an absent map must be omitted: %s", data)
	}
}

func TestLoadReportRoundTrip(t *testing.T) {
	t.Parallel()
	l := sampleLoad()
	r := wire.LoadReport{Model: "m-1", Generation: 3, Load: l, DispatchSeq: 42, Build: 11}
	enc := string(wire.AppendLoadReport(nil, &r))
	got, err := wire.ParseLoadReport(enc)
	if err != nil {
		t.Fatalf("ParseLoadReport(%q): %v", enc, err)
	}
	want := wire.LoadReport{Model: "m-1", Generation: 3, DispatchSeq: 42, Build: 11, Load: load.Load{
		InputTPS: l.InputTPS, QueueSize: l.QueueSize, QueuedInputTokens: l.QueuedInputTokens, RunningRequests: l.RunningRequests,
		MaxEngineConcurrency: l.MaxEngineConcurrency, ObservedAtUnixMilli: l.ObservedAtUnixMilli, QueueEstimates: l.QueueEstimates,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip of %q (-want +got):\n%s", enc, diff)
	}
	noMap, err := wire.ParseLoadReport("v=1;m=x;future=1")
	if err != nil || noMap.Load.QueueEstimates != nil || noMap.Model != "x" {
		t.Errorf("unknown fields ignored, absent map nil: %+v %v", noMap, err)
	}
	emptyMap, err := wire.ParseLoadReport("v=1;pq=")
	if err != nil || emptyMap.Load.QueueEstimates == nil || len(emptyMap.Load.QueueEstimates) != 0 {
		t.Errorf("explicit empty map: %+v %v", emptyMap, err)
	}
	for _, bad := range []string{"", "m=x", "v=2", "v=1;q=-1", "v=1;pq=1", "v=1;pq=4:1,2:1", "v=1;tps=x", "v=1;novalue"} {
		if _, err := wire.ParseLoadReport(bad); !errors.Is(err, wire.ErrBadLoadReport) {
			t.Errorf("ParseLoadReport(%q) = %v, want ErrBadLoadReport", bad, err)
		}
	}
}

func TestDispatchSeq(t *testing.T) {
	t.Parallel()
	gw, seq, err := wire.ParseDispatchSeq(wire.FormatDispatchSeq("gw/a", 17))
	if err != nil || gw != "gw/a" || seq != 17 {
		t.Errorf("got %q %d %v", gw, seq, err)
	}
	for _, bad := range []string{"", "/1", "gw", "gw/x"} {
		if _, _, err := wire.ParseDispatchSeq(bad); err == nil {
			t.Errorf("ParseDispatchSeq(%q) accepted", bad)
		}
	}
}

func TestParseRegistration(t *testing.T) {
	t.Parallel()
	ok := `{"inference_server_id":"p1","inference_server_url":"http://127.0.0.1:8100","models":{"m":{"status":"ACTIVE","generation":1,"stats":{"last_mean_input_tps":100}}}}`
	r, err := wire.ParseRegistration("p1", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if r.ClusterID != "p1" || r.Models["m"].Stats.LastMeanInputTPS != 100 {
		t.Errorf("cluster id defaults to the id: %+v", r)
	}
	for name, tt := range map[string]struct{ path, body, want string }{
		"bad json":      {"p1", `{`, "unexpected EOF"},
		"unknown field": {"p1", `{"inference_server_id":"p1","bogus":1}`, "bogus"},
		"id mismatch":   {"p2", ok, "does not match"},
		"missing id":    {"p1", `{"inference_server_url":"http://a:1"}`, "inference_server_id is required"},
		"bad url":       {"p1", `{"inference_server_id":"p1","inference_server_url":"quic://a"}`, "inference_server_url"},
		"bad status":    {"p1", `{"inference_server_id":"p1","inference_server_url":"http://a:1","models":{"m":{"status":"up","stats":{}}}}`, "status"},
		"bad priority":  {"p1", `{"inference_server_id":"p1","inference_server_url":"http://a:1","models":{"m":{"status":"ACTIVE","stats":{"queue_time_estimate_ms_by_priority":{"x":1}}}}}`, "priority"},
		"trailing":      {"p1", ok + `{}`, "trailing"},
	} {
		_, err := wire.ParseRegistration(tt.path, []byte(tt.body))
		if !errors.Is(err, wire.ErrBadRegistration) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrBadRegistration mentioning %q", name, err, tt.want)
		}
	}
}

func FuzzParseLoadReport(f *testing.F) {
	l := sampleLoad()
	f.Add(string(wire.AppendLoadReport(nil, &wire.LoadReport{Model: "m", Load: l, DispatchSeq: 1, Build: 9})))
	f.Add("v=1;pq=")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := wire.ParseLoadReport(s)
		if err != nil || strings.ContainsAny(r.Model, ";") {
			return
		}
		again, err := wire.ParseLoadReport(string(wire.AppendLoadReport(nil, &r)))
		if err != nil {
			t.Fatalf("re-encoding %q failed: %v", s, err)
		}
		if again.DispatchSeq != r.DispatchSeq || again.Build != r.Build || again.Load.QueueSize != r.Load.QueueSize {
			t.Fatalf("re-encoding changed the report: %+v vs %+v", r, again)
		}
	})
}

func FuzzParseRegistration(f *testing.F) {
	f.Add("p1", `{"inference_server_id":"p1","inference_server_url":"http://127.0.0.1:8100","models":{"m":{"status":"ACTIVE","stats":{}}}}`)
	f.Fuzz(func(t *testing.T, id, body string) {
		r, err := wire.ParseRegistration(id, []byte(body))
		if err == nil && (r.ID != id || r.ClusterID == "") {
			t.Fatalf("accepted an inconsistent registration: %+v", r)
		}
	})
}

func TestLoadReportMergeAndOrder(t *testing.T) {
	t.Parallel()
	l := sampleLoad()
	r := wire.LoadReport{Load: load.Load{QueueSize: 9, RunningRequests: 1, MaxEngineConcurrency: 4, InputTPS: 10, ObservedAtUnixMilli: l.ObservedAtUnixMilli + 1}, DispatchSeq: 7}
	if !r.Supersedes(7, l.ObservedAtUnixMilli, 0) || r.Supersedes(8, 0, 0) || r.Supersedes(0, l.ObservedAtUnixMilli+2, 0) {
		t.Error("Supersedes must accept newer-or-equal sequence and time only")
	}
	// With both builds known the build decides, even within one millisecond; an equal
	// build needs a newer-or-equal sequence.
	same := r
	same.Build = 5
	for _, c := range []struct {
		seq        uint64
		observedMs int64
		build      uint64
		want       bool
	}{
		{7, same.Load.ObservedAtUnixMilli, 4, true},
		{7, same.Load.ObservedAtUnixMilli, 6, false},
		{7, same.Load.ObservedAtUnixMilli, 5, true},
		{8, same.Load.ObservedAtUnixMilli, 5, false},
		{7, same.Load.ObservedAtUnixMilli + 9, 4, true}, // the clock does not order builds
		{7, same.Load.ObservedAtUnixMilli + 9, 0, false},
	} {
		if got := same.Supersedes(c.seq, c.observedMs, c.build); got != c.want {
			t.Errorf("build 5 over seq %d, at %d, build %d: %v, want %v", c.seq, c.observedMs, c.build, got, c.want)
		}
	}
	want := l
	want.QueueSize, want.QueuedInputTokens, want.RunningRequests, want.MaxEngineConcurrency = 9, 0, 1, 4
	want.InputTPS, want.ObservedAtUnixMilli, want.QueueEstimates = 10, l.ObservedAtUnixMilli+1, nil
	r.MergeInto(&l)
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("MergeInto keeps registration-only fields (-want +got):\n%s", diff)
	}
}

// A registration replaces a view only when it is not older than the report the view
// holds; an older one brings just the fields a report does not carry. A pending report
// gives way to a newer generation's whatever its build.
func TestRegisteredAndReplaces(t *testing.T) {
	t.Parallel()
	view := wire.LoadReport{Generation: 2, Build: 6, DispatchSeq: 9, Load: load.Load{QueuedInputTokens: 7, ObservedAtUnixMilli: 3000}}
	reg := func(gen, build, seq uint64) wire.LoadReport {
		return wire.LoadReport{Generation: gen, Build: build, DispatchSeq: seq, Load: load.Load{QueuedInputTokens: 500, KVCapacityTokens: 999, ObservedAtUnixMilli: 3000}}
	}
	for _, c := range []struct {
		name               string
		reg                wire.LoadReport
		queued, build, seq uint64
	}{
		{"earlier build", reg(2, 5, 9), 7, 6, 9},
		{"later build", reg(2, 7, 9), 500, 7, 9},
		{"no seq, later build", reg(2, 7, 0), 500, 7, 9},
		{"another generation", reg(3, 1, 2), 500, 1, 9},
	} {
		got := c.reg.Registered(&view)
		if got.Load.QueuedInputTokens != c.queued || got.Build != c.build || got.DispatchSeq != c.seq || got.Load.KVCapacityTokens != 999 {
			t.Errorf("%s: queued %d build %d seq %d kv %d, want %d %d %d 999", c.name, got.Load.QueuedInputTokens, got.Build, got.DispatchSeq, got.Load.KVCapacityTokens, c.queued, c.build, c.seq)
		}
	}
	older, newer := reg(2, 9, 9), reg(3, 1, 1)
	if !newer.Replaces(&older) || older.Replaces(&newer) {
		t.Error("a newer generation must replace an older one's report, never the reverse")
	}
}
