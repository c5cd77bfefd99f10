package pylon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/engines/load"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/pylon/calibrate"
)

// CalibrationRequestPrefix starts the request id of every calibration request.
const CalibrationRequestPrefix = "calibration-"

const (
	mCalibrationDuration = "model_calibration_duration_seconds"
	// refCalibrationDuration is the reference router's name (in ms), exported as well with
	// Config.MetricsReferenceNames.
	refCalibrationDuration = "model_calibration_duration_ms"
	// calibrationSettle bounds the wait, after the last step, for engine stats stream
	// events of the calibration requests still in flight to reach the aggregate.
	calibrationSettle = time.Second
	// discoveryRetry is the pause between first model discovery attempts.
	discoveryRetry = 500 * time.Millisecond
)

// ErrCalibration is the class of calibration failures (startup fails with it).
var ErrCalibration = errors.New("input-throughput calibration failed")

// calibrate runs the calibration ramp (package calibrate) for every served model before
// the pylon registers. The synthetic requests go through the pylon's own data path (over a
// private in-memory listener), so they are admitted, tracked and observed exactly like
// gateway traffic: the engine stats stream or the fallback samples feed each model's
// input-throughput distribution, and calibration installs nothing itself. It fails when a
// model ends without a publishable input TPS; a cancelled ctx ends it early with nil.
func (p *Pylon) calibrate(ctx context.Context) error {
	models := p.cfg.ModelNames
	if len(models) == 0 {
		var ok bool
		if models, ok = p.firstDiscovery(ctx); !ok {
			return nil
		}
	}
	ln := fasthttputil.NewInmemoryListener()
	srv := p.newServer("switchyard-pylon-calibration")
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	client := &fasthttp.HostClient{
		Addr: "pylon-calibration", Dial: func(string) (net.Conn, error) { return ln.Dial() },
		MaxConns: p.cfg.CalibrationMaxConcurrency, NoDefaultUserAgentHeader: true, MaxIdleConnDuration: time.Second,
	}
	defer func() {
		client.CloseIdleConnections()
		_ = srv.Shutdown()
		<-served
	}()
	var errs []error
	for _, m := range models {
		if ctx.Err() != nil {
			return nil
		}
		errs = append(errs, p.calibrateModel(ctx, client, m))
	}
	return errors.Join(errs...)
}

// firstDiscovery lists the engine's models until it gets a non-empty list (false when ctx
// ends first) and makes them served.
func (p *Pylon) firstDiscovery(ctx context.Context) ([]string, bool) {
	for {
		names, err := p.listModels()
		if err == nil && len(names) > 0 {
			p.setModels(names)
			return names, true
		}
		p.log.Info("calibration_waiting_for_models", "err", err)
		t := time.NewTimer(discoveryRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false
		case <-t.C:
		}
	}
}

// calibrateModel runs the ramp for one model and checks that its published input TPS is valid.
func (p *Pylon) calibrateModel(ctx context.Context, client *fasthttp.HostClient, model string) error {
	plan, err := calibrate.New(calibrate.Config{
		Requests: p.cfg.CalibrationRequests, MaxPromptUnits: p.cfg.CalibrationPromptUnits, MaxConcurrency: p.cfg.CalibrationMaxConcurrency,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCalibration, err)
	}
	start := p.now()
	var seq atomic.Uint64
	for {
		step, ok := plan.Next()
		if !ok || ctx.Err() != nil {
			break
		}
		o, st := p.calibrationStep(ctx, client, model, step, &seq)
		p.log.Info("calibration_step", "model", model, "step", step.Index, "prompt_tokens", step.PromptTokens,
			"requests", step.Requests, "concurrency", step.Concurrency, "ok", st.ok, "too_long", st.tooLong,
			"failed", st.failed, "saturated", o.Saturated, "elapsed", st.elapsed)
		plan.Report(o)
	}
	reason, _ := plan.Done()
	if ctx.Err() != nil {
		return nil //nolint:nilerr // a stop during calibration is a clean shutdown, not a failure
	}
	tps, valid := p.awaitInputTPS(model)
	outcome := string(reason)
	if !valid {
		outcome = "failed"
	}
	elapsed := p.now().Sub(start)
	labels := `{model="` + escape(model) + `",outcome="` + outcome + `"}`
	p.metrics.gauge(mCalibrationDuration + labels).Set(elapsed.Seconds())
	if p.metrics.reference {
		p.metrics.gauge(refCalibrationDuration + labels).Set(float64(elapsed.Milliseconds()))
	}
	if !valid {
		return fmt.Errorf("%w: model %q: no valid input TPS was observed (ramp ended: %s)", ErrCalibration, model, reason)
	}
	p.log.Info("calibration_done", "model", model, "reason", reason, "last_mean_input_tps", tps, "elapsed", elapsed)
	return nil
}

// awaitInputTPS waits up to calibrationSettle for the model's published input TPS.
func (p *Pylon) awaitInputTPS(model string) (float64, bool) {
	read := func() (float64, bool) {
		e := p.lookup([]byte(model))
		if e == nil {
			return 0, false
		}
		g := e.cur.Load()
		if g == nil {
			return 0, false
		}
		tps := g.snapshot(p.sys.Root).load.InputTPS
		return tps, load.ValidTPS(tps)
	}
	deadline := p.now().Add(calibrationSettle)
	for {
		if tps, ok := read(); ok || !p.now().Before(deadline) {
			return tps, ok
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type stepStats struct {
	ok, tooLong, failed int
	elapsed             time.Duration
}

// calibrationStep sends step.Requests requests with step.Concurrency in flight and reports
// saturation (the step exceeded the calibration timeout) and prompt-too-long answers (any
// 4xx but 429).
func (p *Pylon) calibrationStep(ctx context.Context, client *fasthttp.HostClient, model string, step calibrate.Step, seq *atomic.Uint64) (calibrate.Outcome, stepStats) {
	start := p.now()
	deadline := start.Add(p.cfg.CalibrationTimeout)
	var (
		next      atomic.Int64
		saturated atomic.Bool
		mu        sync.Mutex
		st        stepStats
		wg        sync.WaitGroup
	)
	prompt := calibrationPrompt(step.PromptTokens)
	for range step.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil && !saturated.Load() && next.Add(1) <= int64(step.Requests) {
				id := CalibrationRequestPrefix + strconv.Itoa(step.Index) + "-" + strconv.FormatUint(seq.Add(1), 10)
				status, err := p.calibrationRequest(client, model, id, step.PromptTokens, prompt, deadline)
				mu.Lock()
				switch {
				case errors.Is(err, fasthttp.ErrTimeout):
					saturated.Store(true)
				case err != nil:
					st.failed++
					p.log.Debug("calibration_request_failed", "model", model, "id", id, "err", err)
				case status >= 200 && status < 300:
					st.ok++
				case status >= 400 && status < 500 && status != fasthttp.StatusTooManyRequests:
					st.tooLong++
				default:
					st.failed++
					p.log.Debug("calibration_request_failed", "model", model, "id", id, "status", status)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st.elapsed = p.now().Sub(start)
	return calibrate.Outcome{
		Saturated:     saturated.Load() || st.elapsed > p.cfg.CalibrationTimeout,
		PromptTooLong: st.tooLong > 0,
	}, st
}

// calibrationPrompt is a prompt of n characters (the request also says n input tokens).
func calibrationPrompt(n int) string {
	const unit = "calibrate "
	return strings.Repeat(unit, n/len(unit)+1)[:n]
}

type calibrationMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type calibrationBody struct {
	Model     string               `json:"model"`
	Stream    bool                 `json:"stream"`
	MaxTokens int                  `json:"max_tokens"`
	Messages  []calibrationMessage `json:"messages"`
}

// calibrationRequest sends one streaming chat completion through the data path and reads
// it to the end; the request's own id makes every prompt distinct (no prefix-cache hits).
func (p *Pylon) calibrationRequest(client *fasthttp.HostClient, model, id string, tokens int, prompt string, deadline time.Time) (int, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://pylon-calibration/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set(wire.HeaderRequestID, id)
	req.Header.Set(wire.HeaderModel, model)
	req.Header.Set(wire.HeaderInputTokens, strconv.Itoa(tokens))
	content := (id + " " + prompt)[:len(prompt)]
	body, err := json.Marshal(calibrationBody{
		Model: model, Stream: true, MaxTokens: 1, Messages: []calibrationMessage{{Role: "user", Content: content}},
	})
	if err != nil {
		return 0, err
	}
	req.SetBodyRaw(body)
	if err := client.DoDeadline(req, resp, deadline); err != nil {
		return 0, err
	}
	return resp.StatusCode(), nil
}
