package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/gateway"
	"github.com/switchyard/switchyard/internal/wire"
)

// external matches what would make the page load anything from elsewhere: an absolute or
// protocol-relative URL, a src/href/action attribute, a stylesheet import or url().
var external = regexp.MustCompile(`(?i)https?://|["'(=]\s*//[a-z0-9]|\b(src|href|action)\s*=|@import|url\(`)

// The status page is one self-contained HTML document (nothing loaded from elsewhere,
// which its Content-Security-Policy also forbids), served without the token; the state it
// polls needs the token like /debug/state.
func TestStatusPageSelfContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{ControlToken: "s3cret"}, "")
		r := h.do("GET", "/ui", nil, nil)
		if r.status != 200 || !strings.HasPrefix(r.headers["Content-Type"], "text/html") {
			t.Fatalf("GET /ui: %d %s", r.status, r.headers["Content-Type"])
		}
		if !strings.Contains(r.body, "<script>") || !strings.Contains(r.body, "/ui/state") {
			t.Errorf("the page has no inline script polling /ui/state:\n%s", r.body)
		}
		if m := external.FindAllString(r.body, -1); len(m) > 0 {
			t.Errorf("the page refers to something outside it: %q", m)
		}
		if csp := r.headers["Content-Security-Policy"]; !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("Content-Security-Policy %q, want default-src 'none' and connect-src 'self'", csp)
		}
		if r := h.do("GET", "/ui/state", nil, nil); r.status != 401 {
			t.Errorf("GET /ui/state without the token: %d, want 401", r.status)
		}
		if r := h.do("GET", "/ui/state", nil, map[string]string{"Authorization": "Bearer s3cret"}); r.status != 200 {
			t.Errorf("GET /ui/state with the token: %d %s", r.status, r.body)
		}
	})
}

// /ui/state lists each target's backends with their load, TTFT estimate, health and the
// 200s they served, the parked requests and the lb-config in force: the target's settings
// under the lb-config file's keys, with readable units and the defaults marked.
func TestStatusPageState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{}, `{"default":"round-robin","models":{"m":{"algorithm":"wait-and-widen","cache_affinity_wait_ms":300,"capacity_wait_ms":2000}}}`)
		h.register(h.pylon("p1", "c1", load.Load{InputTPS: 2000, RunningRequests: 3, MaxEngineConcurrency: 8}, nil))
		h.register(h.pylon("p2", "c2", load.Load{InputTPS: 1000, MaxEngineConcurrency: 8}, nil))
		for range 4 {
			if r := h.chat(nil); r.status != 200 {
				t.Fatalf("chat: %d %s", r.status, r.body)
			}
		}
		synctest.Wait()
		r := h.do("GET", "/ui/state", nil, nil)
		var st struct {
			LBConfig struct {
				Default string
				Models  map[string]string
			} `json:"lb_config"`
			Targets []struct {
				Model, Algorithm string
				Scheduler        bool
				Parked           int
				Settings         []struct {
					Key, Text string
					Value     any
					Default   bool
				}
				Backends []struct {
					ID, Cluster, Status string
					Routable            bool
					Running             uint64
					MaxConcurrency      uint64  `json:"max_concurrency"`
					TTFT                float64 `json:"ttft_estimate_ms"`
					Served              uint64
					Health              struct{ Ejected bool }
				}
			}
		}
		if err := json.Unmarshal([]byte(r.body), &st); err != nil || r.status != 200 {
			t.Fatalf("GET /ui/state: %d %v\n%s", r.status, err, r.body)
		}
		if st.LBConfig.Default != "round-robin" || st.LBConfig.Models["m"] != "wait-and-widen" {
			t.Errorf("lb_config %+v, want default round-robin, m wait-and-widen", st.LBConfig)
		}
		if len(st.Targets) != 1 || st.Targets[0].Model != "m" || st.Targets[0].Algorithm != "wait-and-widen" || !st.Targets[0].Scheduler || len(st.Targets[0].Backends) != 2 {
			t.Fatalf("targets %+v, want m (wait-and-widen) with p1 and p2", st.Targets)
		}
		settings := map[string]string{}
		for _, s := range st.Targets[0].Settings {
			if strings.ToLower(s.Key) != s.Key || strings.ContainsAny(s.Key, " -") {
				t.Errorf("setting %q is not an lb-config key", s.Key)
			}
			settings[s.Key] = fmt.Sprintf("%v %q default=%v", s.Value, s.Text, s.Default)
		}
		for key, want := range map[string]string{
			"cache_affinity_wait_ms":  `300 "300 ms" default=false`,
			"capacity_wait_ms":        `2000 "2 s" default=false`,
			"ttft_bucket_size_ms":     `20 "20 ms" default=true`,
			"session_affinity_ttl_ms": `300000 "5 min" default=true`,
			"prefill_wait":            `true "true" default=true`,
			"max_input_work_seconds":  `<nil> "no limit" default=true`,
		} {
			if got := settings[key]; got != want {
				t.Errorf("setting %s: %s, want %s", key, got, want)
			}
		}
		if _, ok := settings["sample_count"]; ok {
			t.Errorf("wait-and-widen shows power-of-n's sample_count: %v", settings)
		}
		var served uint64
		for i, want := range []string{"p1", "p2"} {
			b := st.Targets[0].Backends[i]
			if b.ID != want || !b.Routable || b.Status != wire.StatusActive || b.MaxConcurrency != 8 || b.TTFT <= 0 || b.Health.Ejected {
				t.Errorf("backend %d: %+v, want %s routable, active, max 8, a TTFT estimate, not ejected", i, b, want)
			}
			served += b.Served
		}
		if b := st.Targets[0].Backends[0]; b.Running != 3 {
			t.Errorf("p1 running %d, want its reported 3", b.Running)
		}
		if served != 4 {
			t.Errorf("served %d in all, want the 4 requests", served)
		}
	})
}

// registerAs registers upstreamURL as backend id of cluster for benchModel, reporting l.
func registerAs(t *testing.T, admin, id, cluster, upstreamURL string, l load.Load) {
	t.Helper()
	reg := wire.Registration{
		ID: id, URL: upstreamURL, ClusterID: cluster, HeartbeatMs: 60_000,
		Models: map[string]wire.Model{benchModel: {Status: wire.StatusActive, Generation: 1, Stats: wire.StatsFromLoad(&l)}},
	}
	body, _ := json.Marshal(reg)
	c := &fasthttp.HostClient{Addr: admin}
	defer c.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("PUT")
	req.SetRequestURI("http://" + admin + wire.RegistrationPath + id)
	req.SetBody(body)
	if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("register %s: %v %d %s", id, err, resp.StatusCode(), resp.Body())
	}
}

// The status page renders a test gateway's fleet in headless Chromium (Debian's chromium
// package) without console errors. SWITCHYARD_UI_SCREENSHOT=path also saves a screenshot
// (docs/img/status-page.png is made so).
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("SKIPPED: chromium is not on PATH (apt-get install chromium; .ci/run installs it): the status page is not rendered")
	}
	fast := load.Load{InputTPS: 4000, RunningRequests: 5, MaxEngineConcurrency: 8, QueueSize: 1, QueuedInputTokens: 900}
	slow := load.Load{InputTPS: 1500, RunningRequests: 2, MaxEngineConcurrency: 8}
	up1, up2 := serve(t, reportingPylon(fast)), serve(t, reportingPylon(slow))
	lbConfig := filepath.Join(t.TempDir(), "lb-config.json")
	entry := `{"algorithm":"power-of-n","tie_tolerance_ms":10,"max_input_work_seconds":30}`
	if err := os.WriteFile(lbConfig, []byte(`{"default":"power-of-n","models":{"`+benchModel+`":`+entry+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{GatewayID: "gw-ui-test", LBConfigPath: lbConfig}, gateway.Deps{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	gln, aln := listenLoopback(t), listenLoopback(t)
	done := make(chan struct{}, 2)
	go func() { _ = g.Serve(gln); done <- struct{}{} }()
	go func() { _ = g.ServeAdmin(aln); done <- struct{}{} }()
	t.Cleanup(func() {
		g.Shutdown()
		<-done
		<-done
	})
	admin := aln.Addr().String()
	registerAs(t, admin, "pylon-fast-0", "east", "http://"+up1, fast)
	registerAs(t, admin, "pylon-slow-1", "west", "http://"+up2, slow)
	// Wait until both are routable (their first RTT probe), then serve some traffic.
	c := &fasthttp.HostClient{Addr: gln.Addr().String()}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(getBody(t, admin, "/ui/state"), `"routable":true`) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("backends never routable:\n%s", getBody(t, admin, "/ui/state"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Traffic while the browser polls, so the page has shares to show. The page is what is
	// tested: a request that fails is logged (the first one) and traffic goes on; only no
	// answered request at all fails the test.
	stop, trafficDone := make(chan struct{}), make(chan error, 1)
	go func() {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		ok, failed := 0, 0
		for {
			select {
			case <-stop:
				if ok == 0 {
					trafficDone <- fmt.Errorf("no chat request answered 200 (%d failed)", failed)
				} else {
					trafficDone <- nil
				}
				return
			case <-time.After(5 * time.Millisecond):
			}
			req.Reset()
			req.Header.SetMethod("POST")
			req.SetRequestURI("http://" + c.Addr + "/v1/chat/completions")
			req.Header.Set(wire.HeaderModel, benchModel)
			req.SetBodyString(`{"model":"` + benchModel + `","messages":[{"role":"user","content":"hi"}]}`)
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				failed++
				if failed == 1 {
					t.Logf("chat: %v (status %d): %s", err, resp.StatusCode(), resp.Body())
				}
				continue
			}
			ok++
		}
	}()
	defer func() {
		close(stop)
		if err := <-trafficDone; err != nil {
			t.Error(err)
		}
	}()

	url := "http://" + admin + "/ui"
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
		"--enable-logging=stderr", "--v=0", "--virtual-time-budget=1000",
	}
	// A render is checked whole; a browser that started too slowly for its virtual-time
	// budget or crashed (a loaded machine) gets two more tries, and the last try's problems
	// fail the test (the earlier ones are logged).
	var problems []string
	for try := range 3 {
		if try > 0 {
			t.Logf("render %d: %s", try, strings.Join(problems, "\n"))
		}
		problems = problems[:0]
		dom, logs, err := runChromium(browser, t.TempDir(), append(args, "--user-data-dir="+t.TempDir(), "--dump-dom", url)...)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		// The target's settings read as the lb-config file writes them, with their units.
		for _, want := range []string{
			"pylon-fast-0", "pylon-slow-1", "gw-ui-test", "power-of-n", "healthy", "5 / 8", "%",
			"<code>tie_tolerance_ms</code> = 10 ms", "<code>max_input_work_seconds</code> = 30 s",
			`<tr data-setting="sample_count" class="muted"><td><code>sample_count</code></td><td>2</td><td>default</td></tr>`,
		} {
			if !strings.Contains(dom, want) {
				problems = append(problems, fmt.Sprintf("the rendered page lacks %q:\n%s", want, dom))
			}
		}
		if m := regexp.MustCompile(`TieTolerance|MaxInputWork|SampleCount`).FindString(dom); m != "" {
			problems = append(problems, fmt.Sprintf("the rendered page shows the Go field %s:\n%s", m, dom))
		}
		if strings.Contains(dom, `id="error" style="display: block`) {
			problems = append(problems, fmt.Sprintf("the page shows an error:\n%q", dom))
		}
		for line := range strings.Lines(logs) {
			if strings.Contains(line, ":CONSOLE") {
				problems = append(problems, "console message: "+line)
			}
		}
		if len(problems) == 0 {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if shot := os.Getenv("SWITCHYARD_UI_SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := runChromium(browser, t.TempDir(), append(args, "--user-data-dir="+t.TempDir(), "--hide-scrollbars", "--window-size=1280,400", "--screenshot="+abs, url)...); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", abs)
	}
}

// reportingPylon answers every chat request like a pylon whose engine has load l.
func reportingPylon(l load.Load) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == wire.HealthPath {
			return
		}
		report := wire.LoadReport{Model: benchModel, Load: l}
		ctx.Response.Header.SetBytesV(wire.HeaderPylonLoad, wire.AppendLoadReport(nil, &report))
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}
}

// runChromium runs the browser with args and home as its HOME, and returns its output and
// its log.
func runChromium(browser, home string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, args...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("chromium %v: %w\n%s", args, err, errb.String())
	}
	return out.String(), errb.String(), nil
}

// getBody returns the body of GET path on addr.
func getBody(t *testing.T, addr, path string) string {
	t.Helper()
	status, body, err := fasthttp.Get(nil, "http://"+addr+path)
	if err != nil || status != 200 {
		t.Fatalf("GET %s: %v %d %s", path, err, status, body)
	}
	return string(body)
}
