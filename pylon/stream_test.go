package pylon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon"
)

// streamErrors returns the error objects of body's error events.
func streamErrors(t *testing.T, body string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for ev := range strings.SplitSeq(body, "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || !strings.HasPrefix(data, `{"error"`) {
			continue
		}
		var e struct {
			Error map[string]string `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("error event %q: %v", data, err)
		}
		out = append(out, e.Error)
	}
	return out
}

// An engine that drops its connection after 3 tokens (the mock engine's fault injection):
// the pylon ends the relayed stream with one error event and a normal end of the body, at
// once, without [DONE]; the request is counted with status 502 and released.
func TestHermeticEngineDropEndsStreamWithErrorEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		h := newHermetic(t, cfg, mock.Config{TokenDelay: 100 * time.Millisecond, NumTokens: 10})
		defer h.close()
		h.await(time.Second, running(0))
		engineControl(t, h, `{"drop_after_tokens":3}`)
		o := h.send("/v1/chat/completions", "dropped", 1, streamBody, nil)
		if o.status != 200 || o.err != nil {
			t.Fatalf("status %d, err %v, body %q; want a 200 stream that ends normally", o.status, o.err, o.body)
		}
		if n := strings.Count(o.body, `"content":"`); n != 4 || strings.Contains(o.body, "[DONE]") { // the role event's empty content and 3 tokens
			t.Errorf("body %q, want the 3 tokens and no [DONE]", o.body)
		}
		errs := streamErrors(t, o.body)
		if len(errs) != 1 || errs[0]["code"] != "upstream_stream_error" || errs[0]["type"] != "server_error" ||
			!strings.Contains(errs[0]["message"], "inference engine") || !strings.HasSuffix(o.body, "}}\n\n") {
			t.Errorf("error events %v, body %q; want one, last", errs, o.body)
		}
		// The drop comes when the 4th token is due (300 ms); the stream ends right then.
		if o.end > 300*time.Millisecond+time.Second {
			t.Errorf("the stream ended after %v", o.end)
		}
		if n := pylon.Inflight(h.pylon); n != 0 {
			t.Errorf("in flight: %d, want 0", n)
		}
		for series, want := range map[string]float64{
			`pylon_requests_total{model="dummy-model",status="502"}`: 1,
			`pylon_requests_total{model="dummy-model",status="200"}`: -1,
		} {
			if got := h.scrapeMetric(series); got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
	})
}

// A client (the gateway) that goes away mid-stream: the pylon closes the engine stream and
// counts the request with status 499, not 200.
func TestHermeticClientCancelCountedAs499(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pylon.DefaultConfig()
		cfg.ModelNames, cfg.EngineStatsStream = []string{"dummy-model"}, "off"
		h := newHermetic(t, cfg, mock.Config{TokenDelay: 100 * time.Millisecond, NumTokens: 100})
		defer h.close()
		h.await(time.Second, running(0))
		conn, err := h.dial("pylon")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: pylon\r\n%s: gone-1\r\n%s: dummy-model\r\n%s: 1\r\nContent-Length: %d\r\n\r\n%s",
			wire.HeaderRequestID, wire.HeaderModel, wire.HeaderInputTokens, len(streamBody), streamBody)
		br := bufio.NewReader(conn)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			if strings.Contains(line, `"content":"The"`) {
				break
			}
		}
		_ = conn.Close()
		time.Sleep(time.Second) // the next token's write fails
		synctest.Wait()
		if n := pylon.Inflight(h.pylon); n != 0 {
			t.Errorf("in flight: %d, want 0", n)
		}
		for series, want := range map[string]float64{
			`pylon_requests_total{model="dummy-model",status="499"}`: 1,
			`pylon_requests_total{model="dummy-model",status="200"}`: -1,
		} {
			if got := h.scrapeMetric(series); got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
	})
}
