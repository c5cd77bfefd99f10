package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/switchyard/switchyard/gateway"
)

// chatBody is a plain OpenAI chat body of a session's turn: the session's conversation
// text, cut into one user message per turn (the first turn's first bytes, then turn more
// of step bytes each), as a chat client resends the earlier turns and appends one.
func chatBody(session string, first, step, turn int) []byte {
	n := first + step*turn
	text := strings.Repeat(session+" keeps talking. ", n/len(session)+1)[:n]
	msgs := make([]string, 0, turn+1)
	msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, text[:first]))
	for i := range turn {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, text[first+step*i:first+step*(i+1)]))
	}
	return fmt.Appendf(nil, `{"model":"m","stream":false,"messages":[%s]}`, strings.Join(msgs, ","))
}

// With prefix_affinity, plain clients (no routing headers at all) stay where their
// conversation's prefix was sent: every turn of a session reaches the backend of its first
// turn, and the pylon is told the conversation (x-switchyard-conversation: one value per
// session, the same in every turn). Without it the equal backends share each session's
// turns at random and no conversation is named.
func TestPrefixAffinityPlainClientsThroughGateway(t *testing.T) {
	const sessions, turns = 6, 5
	run := func(t *testing.T, cfg string) (moved int, conversations map[string]map[string]bool) {
		t.Helper()
		h := newHarness(t, gateway.Config{}, cfg)
		pylons := map[string]*fakePylon{}
		for _, id := range []string{"a", "b"} {
			pylons[id] = h.pylon(id, id, idleLoad(), nil)
			h.register(pylons[id])
		}
		home := map[string]string{}
		conversations = map[string]map[string]bool{}
		for turn := range turns {
			for s := range sessions {
				session := fmt.Sprintf("session-%d", s)
				r := h.do("POST", "/v1/chat/completions", chatBody(session, 4000, 300, turn), nil)
				if r.status != 200 {
					t.Fatalf("%s turn %d: %d %s", session, turn, r.status, r.body)
				}
				got := r.headers["X-Inference-Server-Id"]
				if turn == 0 {
					home[session] = got
				} else if got != home[session] {
					moved++
				}
				p := pylons[got]
				p.mu.Lock()
				conv := p.lastHeaders["X-Switchyard-Conversation"]
				p.mu.Unlock()
				if conversations[session] == nil {
					conversations[session] = map[string]bool{}
				}
				conversations[session][conv] = true
			}
		}
		return moved, conversations
	}
	synctest.Test(t, func(t *testing.T) {
		moved, convs := run(t, `{"default":"wait-and-widen","models":{"m":{"algorithm":"wait-and-widen","prefix_affinity":true}}}`)
		if moved != 0 {
			t.Errorf("with prefix_affinity %d of %d later turns left their session's backend", moved, sessions*(turns-1))
		}
		seen := map[string]string{}
		for session, vs := range convs {
			for v := range vs {
				if len(vs) != 1 || v == "" {
					t.Errorf("%s: conversations %v, want one value in every turn", session, vs)
				}
				if other, dup := seen[v]; dup {
					t.Errorf("%s and %s share conversation %q", session, other, v)
				}
				seen[v] = session
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		moved, convs := run(t, `{"default":"wait-and-widen"}`)
		if moved == 0 {
			t.Error("without prefix_affinity no later turn moved: the test cannot tell the two apart")
		}
		for session, vs := range convs {
			if !vs[""] || len(vs) != 1 {
				t.Errorf("%s: conversations %v without prefix_affinity, want none", session, vs)
			}
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
