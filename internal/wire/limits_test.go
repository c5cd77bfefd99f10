package wire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/wire"
)

// validRegistration is a registration every limit accepts, of backend "p1" with model "m".
func validRegistration() wire.Registration {
	return wire.Registration{
		ID: "p1", URL: "http://127.0.0.1:8100", HeartbeatMs: 1000,
		Models: map[string]wire.Model{"m": {Status: wire.StatusActive, Generation: 1, Stats: wire.Stats{
			LastMeanInputTPS: 1000, OutputTPS: 50, MaxOutputTPS: 80, MaxEngineConcurrency: 8,
			QueueTimeEstimateMs: map[string]uint64{"0": 5}, StatsCapabilities: []string{"machine.kv_cache.http"},
		}}},
	}
}

// stats changes model "m"'s stats.
func stats(f func(*wire.Stats)) func(*wire.Registration) {
	return func(r *wire.Registration) {
		m := r.Models["m"]
		f(&m.Stats)
		r.Models["m"] = m
	}
}

// models replaces the models with n copies of "m" named by name(i).
func models(n int, name func(int) string) func(*wire.Registration) {
	return func(r *wire.Registration) {
		m := r.Models["m"]
		r.Models = make(map[string]wire.Model, n)
		for i := range n {
			r.Models[name(i)] = m
		}
	}
}

func numbered(i int) string { return "model-" + strconv.Itoa(i) }

func estimates(n int, ms uint64) map[string]uint64 {
	m := make(map[string]uint64, n)
	for i := range n {
		m[strconv.Itoa(i)] = ms
	}
	return m
}

func entries(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "source-" + strconv.Itoa(i)
	}
	return out
}

// parse marshals r and parses it for path id r.ID with the default limits.
func parse(t *testing.T, r *wire.Registration) (wire.Registration, error) {
	t.Helper()
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return wire.ParseRegistration(r.ID, body)
}

// Every value over a limit is refused with an error naming its field.
func TestRegistrationLimitsRefuse(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		name   string
		change func(*wire.Registration)
		want   string
	}{
		{"heartbeat below 100 ms", func(r *wire.Registration) { r.HeartbeatMs = 99 }, "heartbeat_ms 99"},
		{"heartbeat over 60 s", func(r *wire.Registration) { r.HeartbeatMs = 60_001 }, "heartbeat_ms 60001"},
		{"heartbeat of the largest integer", func(r *wire.Registration) { r.HeartbeatMs = math.MaxUint64 }, "heartbeat_ms"},
		{"negative input tps", stats(func(s *wire.Stats) { s.LastMeanInputTPS = -1 }), "last_mean_input_tps -1"},
		{"input tps -1e308", stats(func(s *wire.Stats) { s.LastMeanInputTPS = -1e308 }), "last_mean_input_tps"},
		{"negative output tps", stats(func(s *wire.Stats) { s.OutputTPS = -0.5 }), "output_tps"},
		{"tiny negative max output tps", stats(func(s *wire.Stats) { s.MaxOutputTPS = -1e-300 }), "max_output_tps"},
		{"engine concurrency over 100 000", stats(func(s *wire.Stats) { s.MaxEngineConcurrency = 100_001 }), "max_engine_concurrency 100001"},
		{"engine concurrency of the largest integer", stats(func(s *wire.Stats) { s.MaxEngineConcurrency = math.MaxUint64 }), "max_engine_concurrency"},
		{"queue estimate over an hour", stats(func(s *wire.Stats) { s.QueueTimeEstimateMs = map[string]uint64{"0": 3_600_001} }), "queue_time_estimate_ms_by_priority[\"0\"] 3600001"},
		{"queue estimate of the largest integer", stats(func(s *wire.Stats) { s.QueueTimeEstimateMs = map[string]uint64{"7": math.MaxUint64} }), "queue_time_estimate_ms_by_priority"},
		{"65 queue estimates", stats(func(s *wire.Stats) { s.QueueTimeEstimateMs = estimates(65, 1) }), "queue_time_estimate_ms_by_priority: 65 entries"},
		{"queue estimate key not a priority", stats(func(s *wire.Stats) { s.QueueTimeEstimateMs = map[string]uint64{"-1": 1} }), "not a priority"},
		{"negative observation time", stats(func(s *wire.Stats) { s.StatsObservedAtUnixMs = -1 }), "stats_observed_at_unix_ms"},
		{"empty id", func(r *wire.Registration) { r.ID = "" }, "inference_server_id is required"},
		{"id of 129 bytes", func(r *wire.Registration) { r.ID = long(129) }, "inference_server_id"},
		{"id with a slash", func(r *wire.Registration) { r.ID = "a/b" }, "inference_server_id \"a/b\" must not contain '/'"},
		{"id with a newline", func(r *wire.Registration) { r.ID = "p1\nx" }, "inference_server_id"},
		{"id with a NUL", func(r *wire.Registration) { r.ID = "p\x001" }, "inference_server_id"},
		{"cluster id of 129 bytes", func(r *wire.Registration) { r.ClusterID = long(129) }, "cluster_id"},
		{"cluster id with a slash", func(r *wire.Registration) { r.ClusterID = "c/1" }, "cluster_id"},
		{"cluster id with an escape", func(r *wire.Registration) { r.ClusterID = "c\x1b[31m" }, "cluster_id"},
		{"routing key of 129 bytes", func(r *wire.Registration) { r.RoutingKey = long(129) }, "routing_key"},
		{"routing key with a tab", func(r *wire.Registration) { r.RoutingKey = "a\tb" }, "routing_key"},
		{"model name of 257 bytes", models(1, func(int) string { return long(257) }), "model name"},
		{"model name with a zero-width space", models(1, func(int) string { return "m\u200b" }), "model name"},
		{"model name with a carriage return", models(1, func(int) string { return "m\r" }), "model name"},
		{"empty model name", models(1, func(int) string { return "" }), "model name is empty"},
		{"257 models", models(257, numbered), "models: 257 models, over the limit of 256"},
		{"1 000 models", models(1000, numbered), "models: 1000 models"},
		{"URL of 2049 bytes", func(r *wire.Registration) { r.URL = "http://a:1/" + long(2049-len("http://a:1/")) }, "inference_server_url"},
		{"URL with user info", func(r *wire.Registration) { r.URL = "http://u:p@a:1" }, "user info"},
		{"URL with a query", func(r *wire.Registration) { r.URL = "http://a:1/?x=1" }, "query"},
		{"URL with an empty query", func(r *wire.Registration) { r.URL = "http://a:1/?" }, "query"},
		{"URL with a fragment", func(r *wire.Registration) { r.URL = "http://a:1/#f" }, "fragment"},
		{"URL with port 0", func(r *wire.Registration) { r.URL = "http://a:0" }, "port"},
		{"URL with port 70000", func(r *wire.Registration) { r.URL = "http://a:70000" }, "port"},
		{"URL without a port", func(r *wire.Registration) { r.URL = "http://a" }, "inference_server_url"},
		{"URL with a control character", func(r *wire.Registration) { r.URL = "http://a:1/\x7f" }, "inference_server_url"},
		{"65 capabilities", stats(func(s *wire.Stats) { s.StatsCapabilities = entries(65) }), "stats_capabilities: 65 entries"},
		{"a capability of 129 bytes", stats(func(s *wire.Stats) { s.StatsCapabilities = []string{long(129)} }), "stats_capabilities entry"},
		{"a source with a control character", stats(func(s *wire.Stats) { s.StatsSources = []string{"kv\x01"} }), "stats_sources entry"},
		{"unknown status", func(r *wire.Registration) { m := r.Models["m"]; m.Status = "up"; r.Models["m"] = m }, "status \"up\""},
	} {
		r := validRegistration()
		c.change(&r)
		_, err := parse(t, &r)
		if !errors.Is(err, wire.ErrBadRegistration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadRegistration mentioning %q", c.name, err, c.want)
		}
	}
}

// Values on the limits are accepted.
func TestRegistrationLimitsAcceptBoundaries(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		name   string
		change func(*wire.Registration)
	}{
		{"heartbeat omitted (gateway default)", func(r *wire.Registration) { r.HeartbeatMs = 0 }},
		{"heartbeat 100 ms", func(r *wire.Registration) { r.HeartbeatMs = 100 }},
		{"heartbeat 60 s", func(r *wire.Registration) { r.HeartbeatMs = 60_000 }},
		{"zero throughputs", stats(func(s *wire.Stats) { s.LastMeanInputTPS, s.OutputTPS, s.MaxOutputTPS = 0, 0, 0 })},
		{"huge finite throughput", stats(func(s *wire.Stats) { s.LastMeanInputTPS = 1e308 })},
		{"engine concurrency 100 000", stats(func(s *wire.Stats) { s.MaxEngineConcurrency = 100_000 })},
		{"engine concurrency 0 (unknown)", stats(func(s *wire.Stats) { s.MaxEngineConcurrency = 0 })},
		{"64 queue estimates of an hour", stats(func(s *wire.Stats) { s.QueueTimeEstimateMs = estimates(64, 3_600_000) })},
		{"id of 128 bytes", func(r *wire.Registration) { r.ID = long(128) }},
		{"cluster id of 128 bytes", func(r *wire.Registration) { r.ClusterID = long(128) }},
		{"routing key of 128 bytes with slashes", func(r *wire.Registration) { r.RoutingKey = "team/" + long(123) }},
		{"model name of 256 bytes with a slash", models(1, func(int) string { return "org/" + long(252) })},
		{"model name in UTF-8 with a space", models(1, func(int) string { return "modèle 日本" })},
		{"256 models", models(256, numbered)},
		{"no models", func(r *wire.Registration) { r.Models = nil }},
		{"URL of 2048 bytes", func(r *wire.Registration) { r.URL = "http://a:1/" + long(2048-len("http://a:1/")) }},
		{"https URL with a path", func(r *wire.Registration) { r.URL = "https://pylon.example:443/v1" }},
		{"URL with port 65535", func(r *wire.Registration) { r.URL = "http://[::1]:65535" }},
		{"64 capabilities of 128 bytes", stats(func(s *wire.Stats) {
			s.StatsCapabilities = entries(64)
			s.StatsCapabilities[0] = long(128)
		})},
	} {
		r := validRegistration()
		c.change(&r)
		got, err := parse(t, &r)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.ID != r.ID || len(got.Models) != len(r.Models) {
			t.Errorf("%s: parsed %q with %d models, want %q with %d", c.name, got.ID, len(got.Models), r.ID, len(r.Models))
		}
	}
}

// Values JSON cannot carry (NaN, infinities, invalid UTF-8) are refused by Validate, for
// registrations built in code.
func TestRegistrationLimitsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(*wire.Registration)
		want   string
	}{
		{"NaN input tps", stats(func(s *wire.Stats) { s.LastMeanInputTPS = math.NaN() }), "last_mean_input_tps NaN"},
		{"+Inf output tps", stats(func(s *wire.Stats) { s.OutputTPS = math.Inf(1) }), "output_tps +Inf"},
		{"-Inf max output tps", stats(func(s *wire.Stats) { s.MaxOutputTPS = math.Inf(-1) }), "max_output_tps -Inf"},
		{"id in invalid UTF-8", func(r *wire.Registration) { r.ID = "p\xff" }, "inference_server_id \"p\\xff\" is not valid UTF-8"},
		{"model name in invalid UTF-8", models(1, func(int) string { return "m\xc3" }), "model name"},
		{"50 000 models", models(50_000, numbered), "models: 50000 models, over the limit of 256"},
	} {
		r := validRegistration()
		c.change(&r)
		err := wire.DefaultLimits().Validate(&r)
		if !errors.Is(err, wire.ErrBadRegistration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadRegistration mentioning %q", c.name, err, c.want)
		}
	}
	r := validRegistration()
	if err := wire.DefaultLimits().Validate(&r); err != nil {
		t.Errorf("a valid registration: %v", err)
	}
}

// Errors never repeat a huge input: quoted values are cut, at most 10 problems are listed,
// and a decoding error about a huge unknown field is cut too.
func TestRegistrationErrorsStayShort(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 500_000)
	check := func(name string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, want)
			return
		}
		if n := len(err.Error()); n > 2000 {
			t.Errorf("%s: the error is %d bytes long", name, n)
		}
	}
	r := validRegistration()
	r.ID = huge
	_, err := parse(t, &r)
	check("huge id", err, "(500000 bytes)")

	r = validRegistration()
	models(1, func(int) string { return huge })(&r)
	_, err = parse(t, &r)
	check("huge model name", err, "model name")

	r = validRegistration()
	r.URL = "http://a:1/" + huge
	_, err = parse(t, &r)
	check("huge URL", err, "inference_server_url")

	_, err = wire.ParseRegistration("p1", []byte(`{"inference_server_id":"p1","`+huge+`":1}`))
	check("huge unknown field", err, "unknown field")
	if !errors.Is(err, wire.ErrBadRegistration) {
		t.Errorf("huge unknown field: %v does not wrap ErrBadRegistration", err)
	}

	r = validRegistration()
	models(200, numbered)(&r)
	for name, m := range r.Models {
		m.Status = "bogus"
		r.Models[name] = m
	}
	_, err = parse(t, &r)
	check("200 bad models", err, "and 190 more problems")
	if n := strings.Count(err.Error(), "must be ACTIVE"); n != 10 {
		t.Errorf("200 bad models: %d problems listed, want 10", n)
	}
}

// Limits given by the caller apply; a zero field takes its default; a body over
// MaxBodyBytes is refused without decoding.
func TestCustomLimits(t *testing.T) {
	t.Parallel()
	r := validRegistration()
	models(3, numbered)(&r)
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (wire.Limits{MaxModels: 2}).ParseRegistration("p1", body); err == nil || !strings.Contains(err.Error(), "3 models, over the limit of 2") {
		t.Errorf("MaxModels 2 with 3 models: %v", err)
	}
	if _, err := (wire.Limits{}).ParseRegistration("p1", body); err != nil {
		t.Errorf("zero limits are the defaults: %v", err)
	}
	if _, err := (wire.Limits{MaxBodyBytes: len(body) - 1}).ParseRegistration("p1", body); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes, over the limit", len(body))) {
		t.Errorf("body over MaxBodyBytes: %v", err)
	}
	r = validRegistration()
	r.HeartbeatMs = 5
	body, _ = json.Marshal(r)
	if _, err := (wire.Limits{MinHeartbeatMs: 1}).ParseRegistration("p1", body); err != nil {
		t.Errorf("MinHeartbeatMs 1 with a 5 ms heartbeat: %v", err)
	}
}

// A load report's throughput must be a finite number, 0 or more.
func TestLoadReportRefusesBadThroughput(t *testing.T) {
	t.Parallel()
	for _, tps := range []string{"NaN", "+Inf", "-Inf", "-1", "-1e308"} {
		if _, err := wire.ParseLoadReport("v=1;m=m;tps=" + tps); !errors.Is(err, wire.ErrBadLoadReport) || !strings.Contains(err.Error(), "tps") {
			t.Errorf("tps=%s: %v, want ErrBadLoadReport naming tps", tps, err)
		}
	}
	if r, err := wire.ParseLoadReport("v=1;m=m;tps=0"); err != nil || r.Load.InputTPS != 0 {
		t.Errorf("tps=0: %+v %v", r, err)
	}
}
