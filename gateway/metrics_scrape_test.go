package gateway_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/deploy/deploytest"
	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/pylon"
)

// scrapeAfterTraffic runs a gateway with two real pylons and mock engines (in process, on
// virtual time), sends a short mix of streamed and buffered requests, and returns the
// /metrics scrape of each binary.
func scrapeAfterTraffic(t *testing.T) (gatewayText, pylonText, engineText string) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		f := newFullStack(t, `{"default":"wait-and-widen"}`)
		for _, id := range []string{"b0", "b1"} {
			f.backend(t, id, mock.Config{MaxConcurrentRequests: 4, PrefillTokensPerSecond: 20_000, NumTokens: 5, TokenDelay: 5 * time.Millisecond}, 20_000)
		}
		time.Sleep(time.Second) // registrations, RTT probes and engine pings settle
		synctest.Wait()
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				stream := `false`
				if i%2 == 0 {
					stream = `true`
				}
				r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","stream":`+stream+`,"messages":[{"role":"user","content":"hello"}]}`), map[string]string{"x-input-tokens": "200"})
				if r.status != 200 {
					t.Errorf("request %d: %d %s", i, r.status, r.body)
				}
			})
			time.Sleep(20 * time.Millisecond)
		}
		wg.Wait()
		expr := map[string]string{"x-routing-method": "wait-and-widen;require_cache_affinity_key;n=3", "x-cache-affinity-key": "k"}
		if r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"dummy-model","messages":[{"role":"user","content":"hello"}]}`), expr); r.status != 200 {
			t.Errorf("request with a routing expression: %d %s", r.status, r.body)
		}
		if r := f.h.do("POST", "/v1/chat/completions", []byte(`{"model":"no-such-model","messages":[]}`), nil); r.status != 404 {
			t.Errorf("unknown model: %d %s", r.status, r.body)
		}
		time.Sleep(2 * time.Second) // load reports and engine stats
		synctest.Wait()
		gatewayText = f.h.do("GET", "/metrics", nil, nil).body
		pylonText = get(t, f.h, "b0-admin:80", "/metrics")
		engineText = get(t, f.h, "eb0:80", "/metrics")
	})
	return gatewayText, pylonText, engineText
}

func get(t *testing.T, h *harness, addr, path string) string {
	t.Helper()
	c := &fasthttp.HostClient{Addr: addr, Dial: func(string) (net.Conn, error) { return h.dial(addr) }}
	defer c.CloseIdleConnections()
	status, body, err := c.Get(nil, "http://"+addr+path)
	if err != nil || status != 200 {
		t.Fatalf("GET %s%s: %d %v", addr, path, status, err)
	}
	return string(body)
}

// Each binary's /metrics, after a short run of real traffic, passes `promtool check
// metrics` (a HELP text and a TYPE on every family, base units, counters ending in _total,
// ...), and has every series that the Grafana dashboard and the alert rules query, so no
// panel or alert waits for a first event to have data.
func TestMetricsPassPromtoolAndCoverDashboardAndAlerts(t *testing.T) {
	promtool := deploytest.Promtool(t)
	gw, py, eng := scrapeAfterTraffic(t)
	scrapes := map[string]string{"gateway": gw, "pylon": py, "engine": eng}
	for name, text := range scrapes {
		if problems := deploytest.CheckMetrics(t, promtool, text); len(problems) > 0 {
			t.Errorf("promtool check metrics on the %s's /metrics:\n%s", name, strings.Join(problems, "\n"))
		}
	}
	// docs/metrics.md describes every family (the runtime's go_* and process_* as a group)
	// in its binary's table, by its name without the binary's namespace.
	doc, err := os.ReadFile(filepath.Join(deploytest.Dir(), "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]string{"gateway": gateway.DefaultMetricsPrefix, "pylon": pylon.DefaultMetricsPrefix, "engine": mock.MetricsPrefix}
	families := map[string]bool{}
	for name, text := range scrapes {
		for f := range deploytest.Families(t, text) {
			families[f] = true
			short, ok := strings.CutPrefix(f, prefixes[name])
			if strings.HasPrefix(f, "go_") || strings.HasPrefix(f, "process_") {
				continue
			}
			if !ok {
				t.Errorf("the %s's %s is outside its namespace %s", name, f, prefixes[name])
			} else if !strings.Contains(string(doc), "| `"+short+"` |") {
				t.Errorf("docs/metrics.md has no row for %s", f)
			}
		}
	}
	queried := deploytest.QueriedMetrics(t, gateway.DefaultMetricsPrefix, pylon.DefaultMetricsPrefix, mock.MetricsPrefix)
	for _, name := range deploytest.Sorted(queried) {
		if !families[name] {
			t.Errorf("%s (queried by %s) is in no scrape", name, strings.Join(queried[name], ", "))
		}
	}
}
