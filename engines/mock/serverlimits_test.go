package mock_test

import (
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/httpserver/limitstest"
)

// The engine closes a connection that stalls in its headers at the read-header timeout,
// one whose body stalls at the body timeout and an idle keep-alive connection at the idle
// timeout; with the cap reached one more connection is refused; a chunked body over the
// hard cap gets 413 once the cap is crossed. Virtual time: the defaults.
func TestServerLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, mock.Config{MaxRequestBodyBytes: 4096, ServerLimits: httpserver.Limits{MaxConnections: 3}})
		defer h.stop()
		dial := func() (net.Conn, error) { return h.ln.Dial() }
		limitstest.HeaderStall(t, dial, httpserver.DefaultReadHeaderTimeout)
		limitstest.BodyStall(t, dial, "/v1/chat/completions", httpserver.DefaultBodyReadTimeout)
		limitstest.Idle(t, dial, limitstest.Get("/health"), 200, httpserver.DefaultIdleTimeout)
		synctest.Wait() // earlier tests' connections are closed: they do not count against the cap
		limitstest.ConnCap(t, dial, limitstest.Get("/health"), 200, 3)
		synctest.Wait()         // the server has seen the cap test's connections close
		hardCap := 4096 + 1<<20 // the handler answers 413 itself below it
		limitstest.ChunkedOverLimit(t, dial, "/v1/chat/completions", hardCap, 16<<20, 256<<10)
	})
}

// A stream with a token every 25 s for 200 s, longer than the header, body and idle
// timeouts together, arrives whole: no write or idle timeout cuts it.
func TestLongStreamOutlivesTheServerTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, mock.Config{TokenDelay: 25 * time.Second, NumTokens: 9})
		defer h.stop()
		start := time.Now()
		_, events, err := h.stream(call{method: "POST", path: "/v1/chat/completions", body: `{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
		if err != nil || len(events) == 0 || !strings.Contains(events[len(events)-1].data, "[DONE]") {
			t.Fatalf("long stream: %v, %d events", err, len(events))
		}
		if got := time.Since(start); got < 200*time.Second {
			t.Errorf("the stream took %v, want at least 200s", got)
		}
	})
}
