package gateway

import (
	"errors"
	"testing"

	"github.com/valyala/fasthttp"
)

// parseRouting reads every routing header in one pass: names match case-insensitively,
// the first of repeated headers wins, an empty value is present (and invalid where a
// number or a non-blank string is required), and the retry-budget header's name is
// configurable.
func TestParseRoutingSinglePass(t *testing.T) {
	newID := func() string { return "generated" }
	var h fasthttp.RequestHeader
	h.Set("X-Model", "m")
	h.Set("x-input-tokens", " 42 ")
	h.Add("X-PRIORITY", "4")
	h.Add("x-priority", "9")
	h.Set("X-Cache-Affinity-Key", "k")
	h.Set("x-routing-key", " tenant ")
	h.Set("X-Max-Wait-Ms", "90000")
	h.Set("My-Budget", "250")
	h.Set("Content-Type", "application/json")
	r, err := parseRouting(&h, nil, "my-budget", newID)
	if err != nil {
		t.Fatal(err)
	}
	want := routing{
		newRequestID: "generated", model: "m", inputTokens: 42, routingKey: "tenant",
		affinityKey: "k", priority: 4, maxWait: 60_000_000_000, hasMaxWait: true, budget: 250_000_000, hasBudget: true,
	}
	if r != want {
		t.Errorf("got %+v\nwant %+v", r, want)
	}

	for _, tc := range []struct{ name, value string }{
		{"x-request-id", " "},
		{"x-model", ""},
		{"x-input-tokens", ""},
		{"x-priority", "-1"},
		{"x-priority", "4294967296"},
		{"x-request-slo-ms", "x"},
		{"x-max-wait-ms", "1.5"},
		{"My-Budget", "soon"},
	} {
		var h fasthttp.RequestHeader
		h.Set("x-model", "m")
		h.Set("x-input-tokens", "1")
		h.Set(tc.name, tc.value)
		if _, err := parseRouting(&h, nil, "my-budget", newID); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %q: err %v, want a bad request", tc.name, tc.value, err)
		}
	}
}

// A load report parsed in place keeps nothing of the header buffer, which fasthttp reuses.
func TestParseLoadReportDoesNotAliasTheHeader(t *testing.T) {
	for _, model := range []string{"m", "other"} {
		v := []byte("v=1;m=m;q=2;tps=100;seq=7")
		r, err := parseLoadReport(v, model)
		if err != nil {
			t.Fatal(err)
		}
		copy(v, "XXXXXXXXXXXXXXXXXXXXXXXX")
		if r.Model != "m" || r.Load.QueueSize != 2 || r.DispatchSeq != 7 {
			t.Errorf("request model %q: report %+v after the buffer was reused", model, r)
		}
	}
	if _, err := parseLoadReport([]byte("q=1"), "m"); err == nil {
		t.Error("a report without a version parsed")
	}
}

// The model, routing key and method are parsed as views of the header bytes; a target
// resolved for the first time keeps copies, so reusing the header buffer (fasthttp does,
// request after request) cannot change what the gateway remembers.
func TestResolveKeepsCopiesOfHeaderViews(t *testing.T) {
	g, err := New(Config{GatewayID: "t"}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var h fasthttp.RequestHeader
	h.Set("X-Model", "model-a")
	h.Set("X-Routing-Key", "tenant-a")
	h.Set("X-Routing-Method", "power-of-n")
	h.Set("X-Request-Id", "req-1")
	h.Set("X-Input-Tokens", "10")
	rt, err := parseRouting(&h, nil, "", func() string { return "new" })
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.resolve(&rt)
	if err != nil {
		t.Fatal(err)
	}
	h.Set("X-Model", "MODEL-B") // same lengths: fasthttp overwrites the value in place
	h.Set("X-Routing-Key", "TENANT-B")
	h.Set("X-Routing-Method", "POWER-OF-N")
	if r.target.Model != "model-a" || r.target.RoutingKey != "tenant-a" || r.method != "power-of-n" {
		t.Errorf("resolved target %+v method %q changed with the header buffer", r.target, r.method)
	}
	if rt.newRequestID != "" {
		t.Errorf("a request with x-request-id got a new id %q", rt.newRequestID)
	}
}
