package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/deploy/deploytest"
	"github.com/switchyard/switchyard/engines/mock"
	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

func TestMain(m *testing.M) { mocktest.Main(m) }

// The real binary on loopback: stream a chat completion, parse every event, and see the
// request in the stats stream and /metrics.
func TestLoopbackRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := mocktest.Binary(t, "../engine")
	addr := mocktest.FreeAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := mocktest.Command(ctx, bin, "--http-listen-addr", addr, "--num-tokens", "4",
		"--token-delay-ms", "5", "--ttft-ms", "10", "--max-concurrent-requests", "3")
	cmd.Env = append(os.Environ(), "SWITCHYARD_ENGINE_MODEL_NAME=loop-model")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("engine exit: %v", err)
		}
	}()
	hc := &fasthttp.HostClient{Addr: addr, MaxIdleConnDuration: 100 * time.Millisecond}
	defer hc.CloseIdleConnections()
	for i := 0; ; i++ {
		status, _, err := hc.Get(nil, "http://"+addr+"/health")
		if err == nil && status == 200 {
			break
		}
		if i > 200 {
			t.Fatalf("engine not healthy: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}

	// Stats stream in the background.
	statsReq := fasthttp.AcquireRequest()
	statsReq.SetRequestURI("http://" + addr + "/pylon/v1/stats/stream")
	statsResp := fasthttp.AcquireResponse()
	statsResp.StreamBody = true
	if err := hc.Do(statsReq, statsResp); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(statsResp.BodyStream())
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()

	req := fasthttp.AcquireRequest()
	req.SetRequestURI("http://" + addr + "/v1/chat/completions")
	req.Header.SetMethod("POST")
	req.Header.Set("x-request-id", "loop-1")
	req.SetBodyString(`{"model":"loop-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello loop"}]}`)
	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	if err := hc.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	if ct := string(resp.Header.ContentType()); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var content []string
	var events int
	sawDone, sawUsage := false, false
	sc := bufio.NewScanner(resp.BodyStream())
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		events++
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Object != "chat.completion.chunk" {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		if len(chunk.Choices) == 1 && chunk.Choices[0].Delta.Content != "" {
			content = append(content, chunk.Choices[0].Delta.Content)
		}
		if chunk.Usage != nil {
			sawUsage = chunk.Usage.CompletionTokens == 4
		}
	}
	_ = resp.CloseBodyStream()
	if len(content) != 4 || !sawDone || !sawUsage || events != 8 {
		t.Fatalf("content %q, events %d, done %v, usage %v", content, events, sawDone, sawUsage)
	}

	// The stats stream saw the request finish, and pinged with the concurrency.
	var finished, pinged bool
	deadline := time.After(3 * time.Second)
	for !finished || !pinged {
		select {
		case m := <-lines:
			if m["type"] == "ping" && m["model"] == "loop-model" && m["max_engine_concurrency"] == 3.0 {
				pinged = true
			}
			if m["type"] == "stats" && m["request_id"] == "loop-1" && m["finished"] == true && m["tokens_generated"] == 4.0 {
				finished = true
			}
		case <-deadline:
			t.Fatalf("stats stream: finished %v, pinged %v", finished, pinged)
		}
	}

	status, body, err := hc.Get(nil, "http://"+addr+"/metrics")
	if err != nil || status != 200 {
		t.Fatalf("metrics: %d %v", status, err)
	}
	for _, want := range []string{
		`switchyard_engine_output_tokens_total{model="loop-model"} 4`,
		`switchyard_engine_input_tokens_total{model="loop-model"} ` + strconv.Itoa(len("hello loop")),
		`switchyard_engine_time_to_first_token_seconds_count{model="loop-model"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}

	// SIGTERM ends the stats stream and the process exits cleanly (checked in the defer).
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for range lines {
	}
	_ = statsResp.CloseBodyStream()
	fasthttp.ReleaseResponse(statsResp)
	fasthttp.ReleaseRequest(statsReq)
}

func TestBadFlagExitsNonZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "engine")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--engine-model", "quantum"}, {"--time-scale", "0"}, {"--num-tokens", "-3"}, {"--read-buffer-bytes", "100"}} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err == nil {
			t.Errorf("%v: exit 0", args)
		}
		if !strings.Contains(string(out), "error") {
			t.Errorf("%v: output %q", args, out)
		}
	}
	out, err := exec.CommandContext(t.Context(), bin, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "engine dev" {
		t.Errorf("--version: %q %v", out, err)
	}
}

// The arguments deploy/*.yaml gives the engine parse and validate.
func TestDeployManifestArgs(t *testing.T) {
	for _, args := range deploytest.Args(t, "engine") {
		var c cli
		k, err := kong.New(&c, append(options(), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Parse(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// The fault-injection endpoints are off unless --enable-test-control is given (also from
// the environment): off, GET /test-control answers 404 like any unknown path.
func TestEnableTestControlFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want int
	}{
		{nil, "false", fasthttp.StatusNotFound},
		{[]string{"--enable-test-control"}, "false", fasthttp.StatusOK},
		{nil, "true", fasthttp.StatusOK},
	} {
		t.Setenv("SWITCHYARD_ENGINE_ENABLE_TEST_CONTROL", tc.env)
		var c cli
		k, err := kong.New(&c, append(options(), kong.Exit(func(int) { t.Fatal("kong tried to exit") }))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		eng, err := mock.New(c.config(), mock.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/test-control")
		eng.Handler(&ctx)
		if got := ctx.Response.StatusCode(); got != tc.want || string(ctx.Response.Header.ContentType()) != "application/json" {
			t.Errorf("args %v, env %q: GET /test-control %d %s, want %d JSON", tc.args, tc.env, got, ctx.Response.Header.ContentType(), tc.want)
		}
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
	}
	var c cli
	k, err := kong.New(&c, options()...)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range k.Model.Flags {
		if f.Name == "enable-test-control" {
			found = true
			if !strings.Contains(f.Help, "tests and benchmarks only") {
				t.Errorf("--enable-test-control help %q does not say it is for tests and benchmarks only", f.Help)
			}
		}
	}
	if !found {
		t.Error("no --enable-test-control flag")
	}
}
