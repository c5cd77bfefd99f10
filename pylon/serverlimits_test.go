package pylon_test

import (
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/httpserver/limitstest"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// Both pylon listeners close a connection that stalls in its headers at the read-header
// timeout, one whose body stalls at the body timeout and an idle keep-alive connection at
// the idle timeout; with the cap reached one more connection is refused; a chunked body
// over the limit gets 413 once the limit is crossed. Virtual time: the defaults.
func TestServerLimitsOnBothListeners(t *testing.T) {
	const limit = 1 << 20
	for _, l := range []struct {
		name, host, post, ping string
		bodyLimit              int
	}{
		{"data", "pylon", "/v1/chat/completions", wire.HealthPath, limit},
		{"admin", "pylon-admin", "/metrics", "/healthz", 1 << 10},
	} {
		t.Run(l.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := pylon.DefaultConfig()
				cfg.ModelNames, cfg.EngineStatsStream, cfg.MaxRequestBodyBytes = []string{"dummy-model"}, "off", limit
				cfg.ServerLimits = httpserver.Limits{MaxConnections: 3}
				h := newHermetic(t, cfg, mock.Config{})
				defer h.close()
				synctest.Wait()
				dial := func() (net.Conn, error) { return h.lns[l.host].Dial() }
				limitstest.HeaderStall(t, dial, httpserver.DefaultReadHeaderTimeout)
				limitstest.BodyStall(t, dial, l.post, httpserver.DefaultBodyReadTimeout)
				limitstest.Idle(t, dial, limitstest.Get(l.ping), 200, httpserver.DefaultIdleTimeout)
				synctest.Wait() // earlier tests' connections are closed: they do not count against the cap
				limitstest.ConnCap(t, dial, limitstest.Get(l.ping), 200, 3)
				synctest.Wait() // the server has seen the cap test's connections close
				limitstest.ChunkedOverLimit(t, dial, l.post, l.bodyLimit, 16<<20, 256<<10)
			})
		})
	}
}

// A relayed stream with a token every 25 s for 200 s, longer than the header, body and
// idle timeouts together, arrives whole: no write or idle timeout cuts it.
func TestLongStreamOutlivesTheServerTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		h := newHermetic(t, cfg, mock.Config{TokenDelay: 25 * time.Second, NumTokens: 9})
		defer h.close()
		synctest.Wait()
		req := chatRequest("http://pylon", "long-1", 10, nil)
		defer fasthttp.ReleaseRequest(req)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		start := time.Now()
		if err := h.client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("long stream: %v %d", err, resp.StatusCode())
		}
		body := string(resp.Body())
		if !strings.HasSuffix(body, "data: [DONE]\n\n") || strings.Count(body, `"content":`) < 9 {
			t.Fatalf("long stream cut: %q", body)
		}
		if got := time.Since(start); got < 200*time.Second {
			t.Errorf("the stream took %v, want at least 200s", got)
		}
	})
}
