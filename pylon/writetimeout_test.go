package pylon_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/httpserver"
	"github.com/switchyard/switchyard/internal/testkit/rawhttp"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// A client (a gateway) that asks for a stream and then reads nothing has the stream ended
// once a write to it has waited --write-timeout without progress: the pylon stops relaying
// it, the engine's request ends, and the connection is closed.
func TestLoopbackWriteTimeoutEndsAStreamNobodyReads(t *testing.T) {
	t.Parallel()
	engineURL := startEngine(t, "--ttft-ms", "1", "--token-delay-ms", "0", "--num-tokens", "10000000", "--max-concurrent-requests", "4")
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL, cfg.ModelNames = engineURL, []string{"dummy-model"}
	cfg.MaxEngineConcurrency, cfg.InitialInputTPS, cfg.PinInputTPS = 4, 1000, true
	cfg.ServerLimits = httpserver.Limits{WriteTimeout: 300 * time.Millisecond}
	url, admin := startPylonAdmin(t, cfg)
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s: r1\r\n%s: dummy-model\r\n%s: 10\r\nContent-Length: %d\r\n\r\n%s",
		wire.HeaderRequestID, wire.HeaderModel, wire.HeaderInputTokens, len(body), body)
	// The stream starts, fills the socket buffers, then stalls: within a few hundred
	// milliseconds of that the pylon gives up and the engine's request ends.
	deadline := time.Now().Add(20 * time.Second)
	started := false
	for {
		m := scrape(t, admin)
		relayed := strings.Contains(m, "\npylon_streams_relayed 1\n")
		started = started || relayed
		if started && !relayed && engineLoad(t, engineURL) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream to a client that stopped reading still runs after 20 s (started %t, write timeout 300 ms)", started)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rawhttp.ExpectClosed(t, conn, "pylon")
}
