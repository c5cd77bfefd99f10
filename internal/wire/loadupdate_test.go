package wire_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
)

// sampleUpdate is a load update of two models, one with queue estimates and one without.
func sampleUpdate() wire.Registration {
	l := sampleLoad()
	other := load.Load{InputTPS: 0.5, QueueSize: 1, ObservedAtUnixMilli: 1}
	return wire.Registration{
		ID: "p1", URL: "http://p1:8100", HeartbeatMs: 1000, DispatchSeq: 4711,
		Models: map[string]wire.Model{
			"llama-3-8b": {Status: wire.StatusActive, Generation: 2, Build: 9312, Stats: wire.StatsFromLoad(&l)},
			"模型=x":       {Status: wire.StatusInactive, Generation: 1, Stats: wire.StatsFromLoad(&other)},
		},
	}
}

// A pylon's snapshot goes out as a load update and comes back as the snapshot's load,
// every stats field but the capabilities and sources, models in name order.
func TestLoadUpdateRoundTrip(t *testing.T) {
	t.Parallel()
	reg := sampleUpdate()
	u, ok := wire.LoadUpdateOf(&reg)
	if !ok {
		t.Fatal("LoadUpdateOf refused a sendable snapshot")
	}
	body := wire.AppendLoadUpdate(nil, &u)
	if !strings.HasPrefix(string(body), "v=1;seq=4711\nm=llama-3-8b;g=2;b=9312;at=1700000000000;q=3;qi=900;r=7;mc=8;tps=1234.5;pq=0:5,4:70;otps=20;") {
		t.Errorf("wire form:\n%s", body)
	}
	got, err := wire.DefaultLimits().ParseLoadUpdate(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	want := sampleLoad()
	want.Capabilities, want.Sources = nil, nil
	if diff := cmp.Diff(wire.LoadUpdate{DispatchSeq: 4711, Models: []wire.LoadReport{
		{Model: "llama-3-8b", Generation: 2, Build: 9312, DispatchSeq: 4711, Load: want},
		{Model: "模型=x", Generation: 1, DispatchSeq: 4711, Load: load.Load{InputTPS: 0.5, QueueSize: 1, ObservedAtUnixMilli: 1}},
	}}, got); diff != "" {
		t.Errorf("parsed update (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(u, got); diff != "" {
		t.Errorf("parse(append(u)) differs from u (-want +got):\n%s", diff)
	}
	// No models: a heartbeat only.
	empty, err := wire.DefaultLimits().ParseLoadUpdate([]byte("v=1;seq=0"))
	if err != nil || empty.DispatchSeq != 0 || len(empty.Models) != 0 {
		t.Errorf("an update without models: %+v %v", empty, err)
	}
}

func TestLoadUpdateOfRefusesWhatTheFormCannotCarry(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]map[string]wire.Model{
		"a ';' in a model name":   {"a;b": {}},
		"a newline in a name":     {"a\nb": {}},
		"a key that is not a u32": {"m": {Stats: wire.Stats{QueueTimeEstimateMs: map[string]uint64{"high": 1}}}},
	} {
		if _, ok := wire.LoadUpdateOf(&wire.Registration{Models: m}); ok {
			t.Errorf("%s: LoadUpdateOf accepted it", name)
		}
	}
}

// line is a valid model line with field f replaced by f=v (or removed when v is "-").
func line(f, v string) string {
	fields := []string{"m=m", "g=1", "b=2", "at=3", "q=0", "qi=0", "r=0", "mc=4", "tps=1.5", "pq=0:5", "otps=0", "motps=0", "ti=0", "ip=0", "og=0", "kvc=0", "kvu=0", "kvf=0"}
	out := fields[:0:0]
	for _, kv := range fields {
		if strings.HasPrefix(kv, f+"=") {
			if v != "-" {
				out = append(out, f+"="+v)
			}
			continue
		}
		out = append(out, kv)
	}
	return strings.Join(out, ";")
}

func TestParseLoadUpdateRefusals(t *testing.T) {
	t.Parallel()
	lim := wire.Limits{MaxModels: 2, MaxEstimates: 2, MaxBodyBytes: 8 << 10}
	const h = "v=1;seq=7\n"
	for name, tt := range map[string]struct{ body, want string }{
		"empty body":          {"", "line 1 must be the header"},
		"no header":           {line("", "") + "\n", "line 1 must be the header"},
		"version 2":           {"v=2;seq=1\n", "version must be 1"},
		"no seq":              {"v=1\n", "line 1 must be the header"},
		"bad seq":             {"v=1;seq=-1\n", "field seq"},
		"seq twice":           {"v=1;seq=1;seq=2\n", "given twice"},
		"tps not a number":    {h + line("tps", "x"), "line 2: field tps"},
		"missing kv":          {h + line("kvu", "-"), "line 2: missing kvu"},
		"missing name":        {h + line("m", "-"), "missing m"},
		"empty line":          {h + "\n" + line("", ""), "line 2: missing m, g, at"},
		"field twice":         {h + line("", "") + ";q=1", "line 2: field q is given twice"},
		"no value":            {h + line("", "") + ";x", "has no value"},
		"negative tps":        {h + line("tps", "-1"), "field tps: must be a finite number"},
		"NaN output tps":      {h + line("otps", "NaN"), "field otps: must be a finite number"},
		"infinite max tps":    {h + line("motps", "+Inf"), "field motps"},
		"a sign on a count":   {h + line("q", "+1"), "field q"},
		"fraction in a count": {h + line("kvc", "1.5"), "field kvc"},
		"negative time":       {h + line("at", "-3"), "field at: must not be negative"},
		"concurrency":         {h + line("mc", "100001"), "field mc: 100001 is over the limit"},
		"priorities down":     {h + line("pq", "5:1,0:1"), "priorities must ascend"},
		"too many estimates":  {h + line("pq", "0:1,1:1,2:1"), "3 entries, over the limit of 2"},
		"estimate too long":   {h + line("pq", "0:3600001"), "over the limit of 3600000 ms"},
		"empty name":          {h + line("m", ""), "the model name is empty"},
		"control character":   {h + line("m", "a\x01b"), "non-printable"},
		"name too long":       {h + line("m", strings.Repeat("x", 257)), "over the limit of 256"},
		"model twice":         {h + line("", "") + "\n" + line("", ""), `line 3: model "m" is listed twice`},
		"too many models":     {h + line("m", "a") + "\n" + line("m", "b") + "\n" + line("m", "c"), "3 models, over the limit of 2"},
		"line too long":       {h + line("", "") + ";x=" + strings.Repeat("y", wire.MaxLoadLineBytes), "over the limit of 4096"},
		"body too large":      {h + strings.Repeat(" ", 8<<10), "over the limit of 8192"},
	} {
		_, err := lim.ParseLoadUpdate([]byte(tt.body))
		if !errors.Is(err, wire.ErrBadLoadUpdate) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrBadLoadUpdate mentioning %q", name, err, tt.want)
		}
	}
	// Unknown fields are ignored, on either line; b and pq may be left out.
	u, err := lim.ParseLoadUpdate([]byte("v=1;seq=7;future=1\n" + line("b", "-") + ";later=x\n" + strings.Replace(line("pq", "-"), "m=m", "m=n", 1)))
	if err != nil || len(u.Models) != 2 || u.Models[0].Build != 0 || u.Models[1].Load.QueueEstimates != nil || u.Models[0].Load.QueueEstimates == nil {
		t.Errorf("optional and unknown fields: %+v %v", u, err)
	}
}

// FuzzParseLoadUpdate: any accepted body is within the limits, and writing it again
// gives a body that parses to the same update.
func FuzzParseLoadUpdate(f *testing.F) {
	reg := sampleUpdate()
	u, _ := wire.LoadUpdateOf(&reg)
	f.Add(wire.AppendLoadUpdate(nil, &u))
	f.Add([]byte("v=1;seq=0\n"))
	f.Add([]byte("v=1;seq=1\n" + line("pq", "") + "\n" + line("m", "n")))
	lim := wire.Limits{MaxModels: 4, MaxEstimates: 3}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := lim.ParseLoadUpdate(body)
		if err != nil {
			if !errors.Is(err, wire.ErrBadLoadUpdate) {
				t.Fatalf("error %v does not wrap ErrBadLoadUpdate", err)
			}
			return
		}
		if len(got.Models) > 4 {
			t.Fatalf("%d models accepted over the limit of 4", len(got.Models))
		}
		for i := range got.Models {
			r := &got.Models[i]
			l := &r.Load
			if r.Model == "" || strings.ContainsAny(r.Model, ";\n\r") || len(l.QueueEstimates) > 3 || r.DispatchSeq != got.DispatchSeq ||
				!finite(l.InputTPS) || !finite(l.OutputTPS) || !finite(l.MaxOutputTPS) || l.ObservedAtUnixMilli < 0 {
				t.Fatalf("accepted an invalid model line: %+v", r)
			}
		}
		again, err := lim.ParseLoadUpdate(wire.AppendLoadUpdate(nil, &got))
		if err != nil {
			t.Fatalf("re-encoding %q failed: %v", body, err)
		}
		if !reflect.DeepEqual(again, got) {
			t.Fatalf("re-encoding changed the update:\n%+v\n%+v", got, again)
		}
	})
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// Parsing a pylon's load update costs a fraction of a full registration's decode and
// validation (BenchmarkDecodeRegistration).
func BenchmarkParseLoadUpdate(b *testing.B) {
	l := load.Load{
		InputTPS: 5012.25, OutputTPS: 812, QueueSize: 3, QueuedInputTokens: 1536, MaxOutputTPS: 2000,
		KVCapacityTokens: 1 << 20, KVUsedTokens: 99_700, KVFreeTokens: 948_876, RunningRequests: 31, MaxEngineConcurrency: 64,
		TotalInputTokens: 31 * 1024, InputProcessingRequests: 2, OutputGenerationRequests: 28, ObservedAtUnixMilli: 1_796_000_000_123,
	}
	u := wire.LoadUpdate{DispatchSeq: 12345, Models: []wire.LoadReport{{Model: "dummy-model", Generation: 1, Build: 77, DispatchSeq: 12345, Load: l}}}
	body := wire.AppendLoadUpdate(nil, &u)
	lim := wire.DefaultLimits()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.ParseLoadUpdate(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(body)), "body-bytes")
}
