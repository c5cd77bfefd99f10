package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/gateway"
)

// chatBody is a plain OpenAI chat body whose one user message is the first n bytes of a
// session's conversation, so a session's later turns extend its earlier ones.
func chatBody(session string, n int) []byte {
	text := strings.Repeat(session+" keeps talking. ", n/len(session)+1)[:n]
	return fmt.Appendf(nil, `{"model":"m","stream":false,"messages":[{"role":"user","content":%q}]}`, text)
}

// With prefix_affinity, plain clients (no routing headers at all) stay where their
// conversation's prefix was sent: every turn of a session reaches the backend of its first
// turn. Without it the equal backends share each session's turns at random.
func TestPrefixAffinityPlainClientsThroughGateway(t *testing.T) {
	const sessions, turns = 6, 5
	run := func(t *testing.T, cfg string) (moved int) {
		t.Helper()
		h := newHarness(t, gateway.Config{}, cfg)
		for _, id := range []string{"a", "b"} {
			h.register(h.pylon(id, id, idleLoad(), nil))
		}
		home := map[string]string{}
		for turn := range turns {
			for s := range sessions {
				session := fmt.Sprintf("session-%d", s)
				r := h.do("POST", "/v1/chat/completions", chatBody(session, 4000+300*turn), nil)
				if r.status != 200 {
					t.Fatalf("%s turn %d: %d %s", session, turn, r.status, r.body)
				}
				got := r.headers["X-Inference-Server-Id"]
				if turn == 0 {
					home[session] = got
				} else if got != home[session] {
					moved++
				}
			}
		}
		return moved
	}
	synctest.Test(t, func(t *testing.T) {
		if moved := run(t, `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen","prefix_affinity":true}}}`); moved != 0 {
			t.Errorf("with prefix_affinity %d of %d later turns left their session's backend", moved, sessions*(turns-1))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		if moved := run(t, `{"default":"wait-and-widen"}`); moved == 0 {
			t.Error("without prefix_affinity no later turn moved: the test cannot tell the two apart")
		}
	})
}

// last_cluster_affinity through the gateway: a session that overflowed from its full
// primary names the overflow cluster on its follow-ups (x-stargate-last-cluster-id, the
// x-stargate-cluster-id it was answered with) and stays there after the primary drained;
// the session metric counts 1 new/fallback and 10 returning/primary. Without the option
// the follow-ups return to the primary and no session series exists.
func TestLastClusterAffinityThroughGateway(t *testing.T) {
	const key = "session-thrash"
	run := func(t *testing.T, option string) (h *harness, primary string, followUps map[string]int) {
		t.Helper()
		h = newHarness(t, gateway.Config{}, `{"default":"power-of-n","models":{"m":{"algorithm":"wait-and-widen",`+
			`"cache_affinity_backend_selection_count":1,"cache_affinity_wait_ms":100`+option+`}}}`)
		ps := map[string]*fakePylon{}
		for _, id := range []string{"p1", "p2", "p3"} {
			ps[id] = h.pylon(id, id, idleLoad(), nil)
			h.register(ps[id])
		}
		headers := map[string]string{"x-cache-affinity-key": key, "x-input-tokens": "100"}
		primary = h.chat(headers).headers["X-Inference-Server-Id"]
		synctest.Wait()
		full := idleLoad()
		full.RunningRequests = full.MaxEngineConcurrency
		ps[primary].mu.Lock()
		ps[primary].load = full
		ps[primary].mu.Unlock()
		h.register(ps[primary])

		first := h.chat(headers)
		overflow := first.headers["X-Stargate-Cluster-Id"]
		if first.status != 200 || overflow == primary || overflow == "" {
			t.Fatalf("full primary %s: %d from cluster %q", primary, first.status, overflow)
		}
		synctest.Wait()
		ps[primary].mu.Lock()
		ps[primary].load = idleLoad()
		ps[primary].mu.Unlock()
		h.register(ps[primary])

		followUps = map[string]int{}
		headers["x-stargate-last-cluster-id"] = overflow
		for range 10 {
			r := h.chat(headers)
			if r.status != 200 {
				t.Fatalf("follow-up: %d %s", r.status, r.body)
			}
			followUps[r.headers["X-Stargate-Cluster-Id"]]++
		}
		return h, primary, followUps
	}
	series := func(state, selection string) string {
		return `switchyard_routing_session_selections_total{routing_key="",model="m",algorithm="wait-and-widen",session_state="` +
			state + `",selection="` + selection + `"}`
	}
	synctest.Test(t, func(t *testing.T) {
		h, primary, got := run(t, `,"last_cluster_affinity":true`)
		if len(got) != 1 || got[primary] != 0 {
			t.Errorf("follow-ups went to %v, want all 10 on the overflow cluster (primary %s)", got, primary)
		}
		synctest.Wait() // the last follow-up's handler may still be recording after its answer
		for s, want := range map[string]string{
			series("new", "fallback"): "1", series("returning", "primary"): "10", series("returning", "fallback"): "",
		} {
			if v := h.scrapeMetric(s); v != want {
				t.Errorf("%s = %q, want %q", s, v, want)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h, primary, got := run(t, "")
		if got[primary] != 10 {
			t.Errorf("without the option follow-ups went to %v, want all 10 on the primary %s", got, primary)
		}
		if m := h.do("GET", "/metrics", nil, nil).body; strings.Contains(m, "routing_session_selections_total") {
			t.Error("session series recorded without last_cluster_affinity")
		}
	})
}
