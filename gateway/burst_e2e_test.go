package gateway_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// burst sends n concurrent chat requests through the gateway and returns how many of each
// status came back (with the error code of the failures).
func (f *fleetE2E) burst(n, inputTokens int, stream bool) map[string]int {
	f.t.Helper()
	var (
		mu  sync.Mutex
		got = map[string]int{}
		wg  sync.WaitGroup
	)
	body := fmt.Appendf(nil, `{"model":"dummy-model","stream":%t,"messages":[{"role":"user","content":"hello"}]}`, stream)
	for range n {
		wg.Go(func() {
			status, _, h := f.do("POST", "/v1/chat/completions", body, map[string]string{"x-input-tokens": strconv.Itoa(inputTokens)})
			key := strconv.Itoa(status)
			if status != 200 {
				key += " " + h["x-stargate-error-code"]
			}
			mu.Lock()
			got[key]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// Bursts of 40 concurrent requests on an idle two-backend fleet (no lb config: power-of-n)
// all succeed: the pylons' local admission agrees with the queue the gateway expected for
// each request even though a burst's requests reach a pylon in another order than the
// gateway dispatched them.
func TestLoopbackE2EBurstOnIdleFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("real binaries")
	}
	engine := []string{"--num-tokens", "4", "--token-delay-ms", "5", "--prefill-tokens-per-s", "20000"}
	f := startFleet(t, "", backendSpec{"b1", engine, 20000}, backendSpec{"b2", engine, 20000})
	f.client.MaxConns = 128
	total := map[string]int{}
	for range 10 {
		for k, v := range f.burst(40, 400, true) {
			total[k] += v
		}
		time.Sleep(300 * time.Millisecond) // idle again
	}
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var summary strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&summary, "%s: %d; ", k, total[k])
	}
	_, metrics, _ := f.do("GET", "/metrics", nil, nil)
	var lines []string
	for l := range strings.SplitSeq(metrics, "\n") {
		if strings.Contains(l, "proxy_retr") {
			lines = append(lines, l)
		}
	}
	t.Logf("statuses: %s\n%s", summary.String(), strings.Join(lines, "\n"))
	if total["200"] != 400 {
		t.Errorf("%d of 400 requests failed: %s", 400-total["200"], summary.String())
	}
}
