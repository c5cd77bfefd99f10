package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/httpserver/limitstest"
)

// Both gateway listeners close a connection that stalls in its headers at the read-header
// timeout, one whose body stalls at the body timeout and an idle keep-alive connection at
// the idle timeout; with the cap reached one more connection is refused; a chunked body
// over the limit gets 413 once the limit is crossed. Virtual time: the defaults.
func TestServerLimitsOnBothListeners(t *testing.T) {
	const limit = 1 << 20
	for _, l := range []struct {
		name       string
		admin      bool
		post, ping string
	}{
		{"public", false, "/v1/chat/completions", "/healthz"},
		{"admin", true, "/control/v1/backends/b1", "/metrics"},
	} {
		t.Run(l.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, gateway.Config{MaxReplayBodyBytes: limit, MaxAdminBodyBytes: limit, ServerLimits: httpserver.Limits{MaxConnections: 3}}, "")
				dial := func() (net.Conn, error) { return h.gwLn.Dial() }
				if l.admin {
					dial = func() (net.Conn, error) { return h.adminLn.Dial() }
				}
				limitstest.HeaderStall(t, dial, httpserver.DefaultReadHeaderTimeout)
				limitstest.BodyStall(t, dial, l.post, httpserver.DefaultBodyReadTimeout)
				limitstest.Idle(t, dial, limitstest.Get(l.ping), 200, httpserver.DefaultIdleTimeout)
				synctest.Wait() // earlier tests' connections are closed: they do not count against the cap
				limitstest.ConnCap(t, dial, limitstest.Get(l.ping), 200, 3)
				synctest.Wait() // the server has seen the cap test's connections close
				limitstest.ChunkedOverLimit(t, dial, l.post, limit, 16<<20, 256<<10)
			})
		})
	}
}

// A stream that sends an event every 25 s for 200 s, longer than the header, body and
// idle timeouts together, is relayed whole: no write or idle timeout cuts it.
func TestLongStreamOutlivesTheServerTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, "")
		h.register(h.pylon("s", "s", idleLoad(), func(_ int, ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for i := range 8 {
					fmt.Fprintf(w, "data: {\"chunk\":%d}\n\n", i)
					_ = w.Flush()
					time.Sleep(25 * time.Second)
				}
				fmt.Fprint(w, "data: [DONE]\n\n")
			})
		}))
		start := time.Now()
		r := h.do("POST", "/v1/chat/completions", []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil)
		if r.status != 200 || strings.Count(r.body, "data: ") != 9 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
			t.Fatalf("long stream: %d %q", r.status, r.body)
		}
		if got := time.Since(start); got != 200*time.Second {
			t.Errorf("the stream took %v, want 200s", got)
		}
	})
}
