package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// pylonBody is a heartbeat as a pylon writes it: encoding/json of a full snapshot.
func pylonBody(tb testing.TB, r *Registration) []byte {
	tb.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func sampleRegistrations() []Registration {
	full := Stats{
		LastMeanInputTPS: 5012.25, OutputTPS: 812, QueueSize: 3, QueuedInputSize: 1536, MaxOutputTPS: 2000,
		KVCacheCapacityTokens: 1 << 20, KVCacheUsedTokens: 99_700, KVCacheFreeTokens: 948_876,
		NumRunningQueries: 31, MaxEngineConcurrency: 64, TotalQueryInputSize: 31 * 1024,
		QueueTimeEstimateMs:    map[string]uint64{"0": 12, "5": 340, "4294967295": 0},
		InputProcessingQueries: 2, OutputGenerationQueries: 28, StatsObservedAtUnixMs: 1_796_000_000_123,
		StatsCapabilities: []string{"queue_size", "kv_cache"}, StatsSources: []string{},
	}
	return []Registration{
		{ID: "p1", URL: "http://127.0.0.1:8100", Models: map[string]Model{}},
		{
			ID: "sim-17", URL: "http://10.0.0.7:8100/p17", ClusterID: "sim-17", RoutingKey: "tenant-a", HeartbeatMs: 1000, DispatchSeq: 12345, EngineSlotShare: 32,
			Models: map[string]Model{"dummy-model": {Status: StatusActive, Generation: 1, Build: 77, Stats: full}},
		},
		{
			ID: "pylön-ü", URL: "https://[::1]:443",
			Models: map[string]Model{
				"模型":  {Status: StatusInactive, Stats: Stats{LastMeanInputTPS: 1e-7, OutputTPS: 1.5e300, StatsObservedAtUnixMs: -3}},
				"m-2": {Status: StatusUnknown},
			},
		},
	}
}

// Bodies a pylon writes take the fast path and decode to what encoding/json decodes.
func TestFastRegistrationTakesPylonBodies(t *testing.T) {
	for _, want := range sampleRegistrations() {
		body := pylonBody(t, &want)
		var fast, strict Registration
		if !fastRegistration(body, &fast) {
			t.Fatalf("the fast path gave up on a pylon's body %s", body)
		}
		if err := decodeStrict(body, &strict); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Errorf("fast decode differs from encoding/json:\n%+v\n%+v", fast, strict)
		}
		// Indented, as a hand-written or other client's body may be.
		indented, err := json.MarshalIndent(&want, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		var fast2 Registration
		if !fastRegistration(indented, &fast2) || !reflect.DeepEqual(fast2, strict) {
			t.Errorf("indented body: fast path gave up or differs: %+v", fast2)
		}
	}
}

// Bodies outside the simple shape make the fast path give up, and the decode is then that
// of encoding/json, value and error alike.
func TestFastRegistrationGivesUp(t *testing.T) {
	ok := `{"inference_server_id":"p1","inference_server_url":"http://a:1","models":{"m":{"status":"ACTIVE","stats":{"queue_size":1}}}}`
	for name, body := range map[string]string{
		"escape in a string":        strings.Replace(ok, `"p1"`, `"p\u0031"`, 1),
		"null":                      strings.Replace(ok, `"http://a:1"`, `null`, 1),
		"key in another case":       strings.Replace(ok, `"inference_server_id"`, `"Inference_Server_ID"`, 1),
		"unknown field":             strings.Replace(ok, `"queue_size"`, `"queue_sizes"`, 1),
		"repeated field":            strings.Replace(ok, `"inference_server_id":"p1"`, `"inference_server_id":"p0","inference_server_id":"p1"`, 1),
		"repeated model":            strings.Replace(ok, `"models":{`, `"models":{"m":{"status":"INACTIVE"},`, 1),
		"fraction in an integer":    strings.Replace(ok, `"queue_size":1`, `"queue_size":1.0`, 1),
		"exponent in an integer":    strings.Replace(ok, `"queue_size":1`, `"queue_size":1e2`, 1),
		"negative unsigned":         strings.Replace(ok, `"queue_size":1`, `"queue_size":-1`, 1),
		"unsigned overflow":         strings.Replace(ok, `"queue_size":1`, `"queue_size":18446744073709551616`, 1),
		"float overflow":            strings.Replace(ok, `"queue_size":1`, `"output_tps":1e999`, 1),
		"leading zero":              strings.Replace(ok, `"queue_size":1`, `"queue_size":01`, 1),
		"string for a number":       strings.Replace(ok, `"queue_size":1`, `"queue_size":"1"`, 1),
		"trailing comma":            strings.Replace(ok, `"queue_size":1`, `"queue_size":1,`, 1),
		"trailing object":           ok + `{}`,
		"trailing bracket":          ok + `]`,
		"byte order mark":           "\ufeff" + ok,
		"invalid UTF-8":             strings.Replace(ok, `"p1"`, "\"p\xff\"", 1),
		"control character":         strings.Replace(ok, `"p1"`, "\"p\x01\"", 1),
		"array at the top":          `[` + ok + `]`,
		"empty":                     ``,
		"cut short":                 ok[:len(ok)-1],
		"list with null":            strings.Replace(ok, `"queue_size":1`, `"stats_sources":["a",null]`, 1),
		"repeated priority":         strings.Replace(ok, `"queue_size":1`, `"queue_time_estimate_ms_by_priority":{"1":2,"1":3}`, 1),
		"models not an object":      strings.Replace(ok, `"models":{"m":{"status":"ACTIVE","stats":{"queue_size":1}}}`, `"models":[]`, 1),
		"stats repeated in a model": strings.Replace(ok, `"stats":{`, `"stats":{},"stats":{`, 1),
	} {
		var fast Registration
		if fastRegistration([]byte(body), &fast) {
			t.Errorf("%s: the fast path took %q", name, body)
			continue
		}
		var got, want Registration
		gotErr, wantErr := decodeRegistration([]byte(body), &got), decodeStrict([]byte(body), &want)
		if errText(gotErr) != errText(wantErr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decodeRegistration = %+v, %v; encoding/json = %+v, %v", name, got, gotErr, want, wantErr)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzFastRegistration holds decodeRegistration to encoding/json's decode: the same value
// and the same error for any body.
func FuzzFastRegistration(f *testing.F) {
	for _, r := range sampleRegistrations() {
		f.Add(pylonBody(f, &r))
	}
	f.Add([]byte(`{"models":{"m":{"stats":{"queue_time_estimate_ms_by_priority":{},"stats_capabilities":[],"output_tps":-0.0e-0}}}}`))
	f.Add([]byte(` {"heartbeat_ms" : 100 , "dispatch_seq":0} `))
	f.Add([]byte(`{"inference_server_id":"b","inference_server_url":"http://b","engine_slot_share":8,"models":{}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var got, want Registration
		gotErr, wantErr := decodeRegistration(body, &got), decodeStrict(body, &want)
		if errText(gotErr) != errText(wantErr) {
			t.Fatalf("body %q: error %v, encoding/json's %v", body, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("body %q: decoded %+v, encoding/json %+v", body, got, want)
		}
	})
}

// BenchmarkDecodeRegistration compares the decode of a pylon's heartbeat by the fast path
// with encoding/json's.
func BenchmarkDecodeRegistration(b *testing.B) {
	regs := sampleRegistrations()
	body := pylonBody(b, &regs[1])
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var r Registration
			if err := decodeRegistration(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var r Registration
			if err := decodeStrict(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse-and-validate", func(b *testing.B) {
		b.ReportAllocs()
		l := DefaultLimits()
		for b.Loop() {
			if _, err := l.ParseRegistration("sim-17", body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
