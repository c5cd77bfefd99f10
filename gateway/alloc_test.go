package gateway_test

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
	"github.com/switchyard/switchyard/internal/wire"
)

// A routed, proxied non-streaming request allocates nothing in the gateway once warm: the
// header parsing, the scheduler's round trip through its actor (the inline mailbox), the
// upstream call, the load report's application and the metrics reuse their memory. The
// client and the upstream allocate nothing either (the direct path is the control), so
// any allocation counted on the gateway path is the gateway's. One allocation is allowed
// on the gateway path: the server reads request bodies as a stream (so a chunked body is
// cut at the limit and large bodies share a memory budget, see internal/httpserver), and
// fasthttp drains a streamed body after each response through io.CopyN, whose
// io.LimitedReader escapes.
func TestGatewayRequestPathAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback sockets")
	}
	if mocktest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (make test runs this test in one)")
	}
	upstream := serve(t, pylonLike())
	_, gw := benchFleet(t, upstream, false)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for _, path := range []struct{ name, addr string }{{"direct", upstream}, {"gateway", gw}} {
		c := &fasthttp.HostClient{Addr: path.addr}
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/v1/chat/completions")
		req.SetHost(path.addr)
		req.Header.Set(wire.HeaderModel, benchModel)
		req.Header.Set(wire.HeaderInputTokens, "3")
		req.Header.Set(wire.HeaderRequestID, benchRequestID)
		req.SetBodyString(`{"model":"` + benchModel + `","messages":[{"role":"user","content":"hi"}]}`)
		do := func() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("%s: %v %d %s", path.name, err, resp.StatusCode(), resp.Body())
			}
		}
		for range 200 { // warm the pools, buffers and metric series
			do()
		}
		want := 0.0
		if path.name == "gateway" {
			want = 1 // fasthttp's drain of the streamed request body
		}
		if n := testing.AllocsPerRun(2000, do); n > want {
			t.Errorf("%s path: %.2f allocations per request, want at most %.0f", path.name, n, want)
		}
		c.CloseIdleConnections()
	}
}
