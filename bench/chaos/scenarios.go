package chaos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
)

// suite is every scenario, in run order.
var suite = []scenario{
	{name: "pylon-kill", short: true, about: "kill -9 a pylon under load; the other backend must serve every new request", run: runPylonKill},
	{name: "engine-kill", about: "kill -9 an engine under load; the other backend must serve every new request", run: runEngineKill},
	{name: "pylon-freeze", about: "SIGSTOP a pylon under load, SIGCONT it later; no new request may fail or hang", run: runPylonFreeze},
	{name: "engine-freeze", about: "SIGSTOP an engine under load, SIGCONT it later; no new request may fail or hang", run: runEngineFreeze},
	{name: "gateway-restart", about: "kill -9 the gateway and start it again on the same ports; pylons re-register", run: runGatewayRestart},
	{name: "slowloris", short: true, gatewayArgs: slowlorisArgs, about: "stalled connections with partial headers; the read-header timeout must close them", run: runSlowloris},
	{name: "oversized-bodies", about: "concurrent huge chunked bodies to the gateway, a pylon and an engine; 413 with bounded memory", run: runOversized},
	{name: "registration-junk", short: true, about: "invalid registrations on the admin listener; all refused, no state kept", run: runJunk},
	{name: "client-cancel", short: true, about: "clients cancel streams mid-way; the gateway counts them under status 499", run: runClientCancel},
	{name: "stalled-readers", gatewayArgs: stalledArgs, about: "clients open long streams and stop reading; the write timeout must end each (499) while other requests go on", run: runStalledReaders},
	{name: "dying-streams-pylon", short: true, about: "kill -9 the pylon under open streams; each must end with an SSE error event", run: dyingStreams(false)},
	{name: "dying-streams-engine", about: "kill -9 the engine under open streams; each must end with an SSE error event", run: dyingStreams(true)},
	{name: "pylon-rejoin", short: true, about: "a killed pylon restarts; it must take its share of serial requests quickly", run: runPylonRejoin},
	{name: "idle-bursts", short: true, about: "bursts of concurrent requests to an idle fleet; none may fail", run: runIdleBursts},
}

// underLoad runs e's steady load on c, applies fault after the warm-up (fault does its own
// waiting and returns the fault's instant), stops the load and summarises around the
// fault.
func underLoad(ctx context.Context, e *env, c *Client, fault func(ctx context.Context) (time.Time, error)) (LoadStats, error) {
	load := StartLoad(ctx, c, e.sz.workers, e.sz.pause, HangBound, MixedRequest)
	err := fleet.Sleep(ctx, e.sz.pre)
	var at time.Time
	if err == nil {
		at, err = fault(ctx)
	}
	return Summarize(load.Stop(), at), err
}

// watchRoutable polls the gateway until backend id is not routable, for at most limit,
// and reports how long after from that took (< 0: it stayed routable).
func watchRoutable(ctx context.Context, f *Fleet, id string, from time.Time, limit time.Duration) <-chan time.Duration {
	return watchRoutableIs(ctx, f, id, false, from, limit)
}

// watchRoutableIs polls the gateway until backend id's routability is want, for at most
// limit, and reports how long after from that took (< 0: never).
func watchRoutableIs(ctx context.Context, f *Fleet, id string, want bool, from time.Time, limit time.Duration) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		deadline := from.Add(limit)
		for time.Now().Before(deadline) {
			if r, err := f.Routable(ctx); err == nil && r[id] == want {
				out <- time.Since(from)
				return
			}
			if fleet.Sleep(ctx, 50*time.Millisecond) != nil {
				break
			}
		}
		out <- -1
	}()
	return out
}

func droppedLine(id string, d time.Duration) string {
	if d < 0 {
		return "the gateway still listed " + id + " as routable at the end"
	}
	return "the gateway stopped routing to " + id + " " + ms(d) + " after the fault"
}

// backendFault runs a fault on the first backend under load: inject starts it, then the
// gateway is watched for watch to see when it stops routing to that backend, while rest
// runs the remainder of the fault and the load after it. The run is judged as a fault on
// one backend among healthy ones.
func backendFault(ctx context.Context, e *env, f *Fleet, c *Client, watch time.Duration, inject func() error, rest func(ctx context.Context) error, measured string) ScenarioResult {
	var dropped <-chan time.Duration
	stats, err := underLoad(ctx, e, c, func(ctx context.Context) (time.Time, error) {
		at := time.Now()
		if err := inject(); err != nil {
			return at, err
		}
		dropped = watchRoutable(ctx, f, BackendID(0), at, watch)
		return at, rest(ctx)
	})
	r := ScenarioResult{Load: stats, Err: err, Measured: []string{measured}}
	if dropped != nil {
		r.Measured = append(r.Measured, droppedLine(BackendID(0), <-dropped))
	}
	r.Checks = []Check{FailureCheck(stats, MaxFailedWithHealthyBackend), WindowCheck(stats, MaxErrorWindow)}
	return r
}

// killUnderLoad is the pylon-kill and engine-kill scenarios: kill -9 victim under load.
func killUnderLoad(ctx context.Context, e *env, f *Fleet, c *Client, victim string) ScenarioResult {
	return backendFault(ctx, e, f, c, e.sz.post,
		func() error { return f.Kill(victim) },
		func(ctx context.Context) error { return fleet.Sleep(ctx, e.sz.post) },
		fmt.Sprintf("kill -9 %s after %v of load from %d workers; the load went on %v", victim, e.sz.pre, e.sz.workers, e.sz.post))
}

func runPylonKill(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	return killUnderLoad(ctx, e, f, c, PylonName(0))
}

func runEngineKill(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	return killUnderLoad(ctx, e, f, c, EngineName(0))
}

func runPylonFreeze(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	return freezeUnderLoad(ctx, e, f, c, PylonName(0))
}

func runEngineFreeze(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	return freezeUnderLoad(ctx, e, f, c, EngineName(0))
}

// freezeUnderLoad is the pylon-freeze and engine-freeze scenarios: SIGSTOP victim under
// load, SIGCONT it later.
func freezeUnderLoad(ctx context.Context, e *env, f *Fleet, c *Client, victim string) ScenarioResult {
	return backendFault(ctx, e, f, c, e.sz.freeze,
		func() error { return f.Signal(victim, syscall.SIGSTOP) },
		func(ctx context.Context) error {
			err := fleet.Sleep(ctx, e.sz.freeze)
			if cerr := f.Signal(victim, syscall.SIGCONT); err == nil {
				err = cerr
			}
			if err == nil {
				err = fleet.Sleep(ctx, e.sz.post)
			}
			return err
		},
		fmt.Sprintf("SIGSTOP %s for %v after %v of load, SIGCONT, then %v more load", victim, e.sz.freeze, e.sz.pre, e.sz.post))
}

func runGatewayRestart(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	var r ScenarioResult
	recovered := time.Duration(-1)
	stats, err := underLoad(ctx, e, c, func(ctx context.Context) (time.Time, error) {
		at := time.Now()
		if err := f.Kill(GatewayName); err != nil {
			return at, err
		}
		if err := f.Restart(GatewayName); err != nil {
			return at, err
		}
		if f.WaitRoutable(ctx, Backends, e.sz.post) == nil {
			recovered = time.Since(at)
		}
		return at, fleet.Sleep(ctx, e.sz.post-time.Since(at))
	})
	r.Load, r.Err = stats, err
	r.Measured = append(r.Measured, fmt.Sprintf("kill -9 the gateway after %v of load and start it again at once on the same ports", e.sz.pre))
	if recovered >= 0 {
		r.Measured = append(r.Measured, "the new gateway routed to both backends "+ms(recovered)+" after the kill")
	} else {
		r.Measured = append(r.Measured, "the new gateway did not route to both backends within "+e.sz.post.String())
	}
	if stats.Failed+stats.Hung > 0 {
		r.Measured = append(r.Measured, "new requests failed: "+stats.FailuresByKind()+" (connections refused while no gateway listened count too)")
	}
	r.Checks = []Check{WindowCheck(stats, MaxErrorWindow)}
	return r
}

// slowlorisArgs gives the gateway the suite's read-header timeout when it has the flag.
func slowlorisArgs(e *env) []string {
	if a := e.features.ReadHeaderTimeoutArg(SlowlorisHeaderTimeout); a != "" {
		return []string{a}
	}
	return nil
}

func runSlowloris(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	var r ScenarioResult
	limit, wait := SlowlorisHeaderTimeout+SlowlorisSlack, SlowlorisHeaderTimeout+SlowlorisSlack
	flag := slowlorisArgs(e)
	if flag == nil {
		limit, wait = SlowlorisWaitWithoutFlag, SlowlorisWaitWithoutFlag
		r.Measured = append(r.Measured, "the gateway has no --read-header-timeout flag: waited "+wait.String()+" for a built-in timeout")
	} else {
		r.Measured = append(r.Measured, "gateway started with "+flag[0])
	}
	load := StartLoad(ctx, c, 2, e.sz.pause, HangBound, MixedRequest)
	sr := slowloris(ctx, f.GatewayAddr, e.sz.slowConns, wait)
	r.Load = Summarize(load.Stop(), time.Time{})
	r.Measured = append(r.Measured, fmt.Sprintf("%d connections sent partial headers and one more byte a second (%d could not connect); %d closed by the gateway",
		sr.Opened, sr.DialErrors, sr.Closed))
	if r.Load.Failed+r.Load.Hung > 0 {
		r.Measured = append(r.Measured, "load requests failed meanwhile: "+r.Load.FailuresByKind())
	}
	r.Checks = []Check{ClosedCheck(sr.Closed, e.sz.slowConns, sr.Last, limit)}
	return r
}

// hostPort returns the host:port of a base URL.
func hostPort(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	return u.Host
}

// bodyDeadline bounds each oversized body's exchange.
const bodyDeadline = 60 * time.Second

// oversizedWarmUp is the load before the baselines of the oversized-bodies scenario: the
// processes' memory grows a little with their first requests.
const oversizedWarmUp = 2 * time.Second

func runOversized(ctx context.Context, e *env, f *Fleet, c *Client) (r ScenarioResult) {
	load := StartLoad(ctx, c, 2, e.sz.pause, HangBound, MixedRequest)
	defer func() { r.Load = Summarize(load.Stop(), time.Time{}) }()
	if err := fleet.Sleep(ctx, oversizedWarmUp); err != nil {
		r.Err = err
		return r
	}
	base := f.RSSAll()
	sampler := sampleRSS(f, 25*time.Millisecond)
	targets := []struct{ name, addr string }{
		{GatewayName, f.GatewayAddr}, {PylonName(0), hostPort(f.PylonURLs[0])}, {EngineName(0), hostPort(f.EngineURLs[0])},
	}
	answers := make([][]bodyResult, len(targets))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for ti, t := range targets {
		for range e.sz.bodies {
			wg.Go(func() {
				br := sendOversized(ctx, t.addr, e.sz.bodyBytes, bodyDeadline)
				mu.Lock()
				answers[ti] = append(answers[ti], br)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	peaks := sampler.Stop()
	r.Measured = append(r.Measured, fmt.Sprintf("%d concurrent chunked bodies of %s to each of the gateway, %s and %s",
		e.sz.bodies, mib(e.sz.bodyBytes), PylonName(0), EngineName(0)))
	for ti, t := range targets {
		list := make([]string, 0, len(answers[ti]))
		var sent int64
		for _, a := range answers[ti] {
			list = append(list, a.Answer)
			sent += a.Sent
		}
		mean := int64(0)
		if len(answers[ti]) > 0 {
			mean = sent / int64(len(answers[ti]))
		}
		r.Measured = append(r.Measured, fmt.Sprintf("%s answered %s after %s of body on average", t.name, Tally(list), mib(mean)))
		r.Checks = append(r.Checks, AnswersCheck(t.name+" answers to the oversized bodies", list, []string{strconv.Itoa(OversizedBodyStatus)}))
	}
	for i, n := range ProcNames {
		r.Checks = append(r.Checks, GrowthCheck(n, base[i], peaks[i], MaxRSSGrowth))
	}
	if err := fleet.Sleep(ctx, e.sz.settle); err != nil {
		r.Err = err
		return r
	}
	settled := f.RSSAll()
	for i, n := range ProcNames {
		if slices.ContainsFunc(targets, func(t struct{ name, addr string }) bool { return t.name == n }) {
			drift := int64(0)
			if j := slices.Index(ProcNames, twinOf(n)); j >= 0 && base[j] >= 0 && settled[j] >= 0 {
				drift = settled[j] - base[j]
			}
			r.Checks = append(r.Checks, SettleCheck(n, base[i], settled[i], drift, MaxRSSSettleFraction, e.sz.settle))
		}
	}
	return r
}

// twinOf is the process of the same role as proc that gets no oversized bodies (pylon-1
// for pylon-0, engine-1 for engine-0; "" for the gateway, which has none).
func twinOf(proc string) string {
	switch proc {
	case PylonName(0):
		return PylonName(1)
	case EngineName(0):
		return EngineName(1)
	default:
		return ""
	}
}

func runJunk(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	var r ScenarioResult
	load := StartLoad(ctx, c, 2, e.sz.pause, HangBound, MixedRequest)
	st0, err := f.State(ctx)
	if err != nil {
		r.Load, r.Err = Summarize(load.Stop(), time.Time{}), err
		return r
	}
	gw := f.RSS(GatewayName)
	sampler := sampleRSS(f, 25*time.Millisecond)
	answers := sendJunk(ctx, f, e.sz.junkRounds)
	peak := sampler.Stop()[0]
	st1, err := f.State(ctx)
	r.Load, r.Err = Summarize(load.Stop(), time.Time{}), err
	r.Measured = append(r.Measured, fmt.Sprintf("%d invalid registrations (%d kinds × %d rounds, each under a new backend id), 4 at a time",
		len(answers), len(junkCases())+1, e.sz.junkRounds))
	r.Checks = []Check{
		AnswersCheck("invalid registrations refused", answers, []string{strconv.Itoa(JunkStatus), strconv.Itoa(JunkOversizeStatus)}),
		EqualCheck("backends the gateway knows", len(st1.Backends), len(st0.Backends)),
		EqualCheck("routing targets at the gateway", len(st1.Targets), len(st0.Targets)),
		GrowthCheck(GatewayName, gw, peak, MaxJunkRSSGrowth),
	}
	return r
}

// metric reads one summed series from the gateway's /metrics (-1 when unreadable).
func gatewayMetric(ctx context.Context, f *Fleet, name string, match map[string]string) float64 {
	ss, err := f.Metrics(ctx, f.AdminURL)
	if err != nil {
		return -1
	}
	v, _ := Sum(ss, name, match)
	return v
}

const metricPrefix = "switchyard_"

func runClientCancel(ctx context.Context, e *env, f *Fleet, c *Client) (r ScenarioResult) {
	load := StartLoad(ctx, c, 2, e.sz.pause, HangBound, MixedRequest)
	defer func() { r.Load = Summarize(load.Stop(), time.Time{}) }()
	status499 := map[string]string{"status": CancelledStatus}
	base499 := gatewayMetric(ctx, f, metricPrefix+"requests_total", status499)
	baseCancelled := gatewayMetric(ctx, f, metricPrefix+"client_cancelled_total", nil)
	streams := make([]*Stream, e.sz.cancels)
	for i := range streams {
		streams[i] = c.Open(ctx, Request{PromptBytes: 64, OutputTokens: 2000}, 30*time.Second)
	}
	cancelled := 0
	firstBy := time.Now().Add(5 * time.Second)
	for _, s := range streams {
		started := waitBy(ctx, s.First(), firstBy)
		select {
		case <-s.Done(): // ended before the cancel: not cancelled mid-way
		default:
			if started && s.Status == 200 {
				cancelled++
			}
		}
		s.Cancel()
	}
	for _, s := range streams {
		<-s.Done()
	}
	// The gateway notices a closed client connection when it next writes: poll its
	// counter for a bounded time.
	var got float64
	deadline := time.Now().Add(5 * time.Second)
	for {
		got = gatewayMetric(ctx, f, metricPrefix+"requests_total", status499) - base499
		if int(got) >= cancelled || time.Now().After(deadline) || fleet.Sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	cc := gatewayMetric(ctx, f, metricPrefix+"client_cancelled_total", nil) - baseCancelled
	inflight := gatewayMetric(ctx, f, metricPrefix+"inflight_requests", nil)
	r.Measured = append(r.Measured,
		fmt.Sprintf("%d streams cancelled by the client after their first event (of %d opened)", cancelled, len(streams)),
		fmt.Sprintf("gateway: requests_total{status=\"499\"} +%.0f, client_cancelled_total +%.0f, inflight_requests %.0f afterwards", got, cc, inflight))
	r.Checks = []Check{EqualCheck("cancelled streams counted under status 499", int(got), cancelled)}
	return r
}

// stalledArgs gives the gateway the suite's write timeout when it has the flag.
func stalledArgs(e *env) []string {
	if e.features.GatewayWriteTimeout {
		return []string{"--write-timeout=" + StalledWriteTimeout.String()}
	}
	return nil
}

// runStalledReaders opens long streams on connections that send their request and then
// read nothing, under the usual load: each must be ended by the gateway (its write to
// the client waited past the write timeout once the socket buffers were full) and
// counted 499, within StalledWait.
func runStalledReaders(ctx context.Context, e *env, f *Fleet, c *Client) (r ScenarioResult) {
	load := StartLoad(ctx, c, 2, e.sz.pause, HangBound, MixedRequest)
	defer func() { r.Load = Summarize(load.Stop(), time.Time{}) }()
	if a := stalledArgs(e); a != nil {
		r.Measured = append(r.Measured, "gateway started with "+a[0])
	} else {
		r.Measured = append(r.Measured, "the gateway has no --write-timeout flag: waited "+StalledWait.String()+" for it to give up by itself")
	}
	status499 := map[string]string{"status": CancelledStatus}
	base := gatewayMetric(ctx, f, metricPrefix+"requests_total", status499)
	body := Request{Stream: true, PromptBytes: 64}.Body()
	// Loopback's 64 KiB segments let the gateway's send buffer grow to megabytes, which a
	// 5 ms-per-token stream takes minutes to fill. The clients announce an Ethernet-sized
	// segment and a small receive buffer, as a client across a network would: the buffers
	// between the two then hold a few hundred kilobytes.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1460)
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
	}}
	opened := 0
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range e.sz.cancels {
		conn, err := d.DialContext(ctx, "tcp", f.GatewayAddr)
		if err != nil {
			continue
		}
		conns = append(conns, conn)
		if _, err := fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"+
			"X-Output-Tokens: %d\r\nContent-Length: %d\r\n\r\n%s", StalledTokens, len(body), body); err == nil {
			opened++
		}
	}
	start := time.Now()
	var got float64
	for {
		got = gatewayMetric(ctx, f, metricPrefix+"requests_total", status499) - base
		if int(got) >= opened || time.Since(start) > StalledWait || fleet.Sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	took := time.Since(start)
	r.Measured = append(r.Measured,
		fmt.Sprintf("%d of %d clients sent a stream request of %d tokens and read nothing", opened, e.sz.cancels, StalledTokens),
		fmt.Sprintf("gateway: requests_total{status=\"499\"} +%.0f after %s", got, took.Round(100*time.Millisecond)))
	r.Checks = []Check{EqualCheck("stalled streams ended by the gateway and counted under status 499", int(got), e.sz.cancels)}
	return r
}

// dyingStreams is the dying-streams scenarios: streams open on both backends, the
// busier backend's pylon (or engine) killed; each of its streams must end with an error
// event soon after.
func dyingStreams(engine bool) func(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	return func(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
		var r ScenarioResult
		load := StartLoad(ctx, c, 2, e.sz.pause, HangBound, MixedRequest)
		streams := make([]*Stream, e.sz.dyingStreams)
		for i := range streams {
			// 4000 tokens at 5 ms: 20 s, far longer than the scenario needs.
			streams[i] = c.Open(ctx, Request{PromptBytes: 64 + 97*i, OutputTokens: 4000}, 30*time.Second)
		}
		firstBy := time.Now().Add(5 * time.Second)
		perBackend := map[string]int{}
		backends := make([]string, len(streams)) // read only after First: written before it closes
		for i, s := range streams {
			if waitBy(ctx, s.First(), firstBy) {
				backends[i] = s.Backend
			}
			perBackend[backends[i]]++
		}
		victim := 0
		if perBackend[BackendID(1)] > perBackend[BackendID(0)] {
			victim = 1
		}
		name := PylonName(victim)
		if engine {
			name = EngineName(victim)
		}
		at := time.Now()
		err := f.Kill(name)
		endBy := at.Add(3 * time.Second)
		var ends []StreamEnd
		survivors, survivorsOK := 0, 0
		for i, s := range streams {
			if backends[i] != BackendID(victim) {
				continue
			}
			if waitBy(ctx, s.Done(), endBy) {
				ends = append(ends, StreamEnd{Kind: s.Kind, After: s.EndAt.Sub(at)})
			} else {
				ends = append(ends, StreamEnd{Kind: KindHung, After: time.Since(at)})
			}
		}
		for i, s := range streams {
			if backends[i] != BackendID(victim) {
				survivors++
				select {
				case <-s.Done():
				default:
					survivorsOK++ // still streaming after the victim's streams ended
				}
			}
			s.Cancel()
			<-s.Done()
		}
		r.Load = Summarize(load.Stop(), at)
		r.Err = err
		r.Measured = append(r.Measured,
			fmt.Sprintf("%d streams open (%s %d, %s %d, none %d); kill -9 %s under %d of them",
				len(streams), BackendID(0), perBackend[BackendID(0)], BackendID(1), perBackend[BackendID(1)], perBackend[""], name, len(ends)),
			fmt.Sprintf("streams on the other backend: %d of %d still streaming after the victim's ended", survivorsOK, survivors))
		r.Checks = []Check{StreamEndsCheck(ends, MaxStreamErrorDelay)}
		return r
	}
}

func runPylonRejoin(ctx context.Context, e *env, f *Fleet, c *Client) ScenarioResult {
	var r ScenarioResult
	victim, id := PylonName(0), BackendID(0)
	var restartAt time.Time
	stats, err := func() (LoadStats, error) {
		load := StartLoad(ctx, c, 1, 0, HangBound, MixedRequest) // serial, back to back
		defer load.Stop()
		if err := fleet.Sleep(ctx, e.sz.pre); err != nil {
			return LoadStats{}, err
		}
		at := time.Now()
		if err := f.Kill(victim); err != nil {
			return LoadStats{}, err
		}
		dropped := <-watchRoutable(ctx, f, id, at, 15*time.Second)
		r.Measured = append(r.Measured, droppedLine(id, dropped))
		restartAt = time.Now()
		if err := f.Restart(victim); err != nil {
			return LoadStats{}, err
		}
		back := watchRoutableIs(ctx, f, id, true, restartAt, RejoinWindow)
		if err := fleet.Sleep(ctx, RejoinWindow); err != nil {
			return LoadStats{}, err
		}
		if d := <-back; d >= 0 {
			r.Measured = append(r.Measured, "the gateway listed the restarted pylon as routable "+ms(d)+" after its restart")
		} else {
			r.Measured = append(r.Measured, "the gateway did not list the restarted pylon as routable within "+RejoinWindow.String())
		}
		results := load.Stop()
		served, total := 0, 0
		first := time.Duration(-1)
		for _, res := range results {
			if res.Start.Before(restartAt) || !res.Start.Before(restartAt.Add(RejoinWindow)) {
				continue
			}
			total++
			if res.Kind == KindOK && res.Backend == id {
				served++
				if first < 0 {
					first = res.End.Sub(restartAt)
				}
			}
		}
		if first >= 0 {
			r.Measured = append(r.Measured, "the restarted pylon answered its first request "+ms(first)+" after its restart")
		}
		r.Checks = []Check{ShareCheck("serial requests served by the restarted pylon within "+RejoinWindow.String(), served, total, MinRejoinShare)}
		return Summarize(results, at), nil
	}()
	r.Load, r.Err = stats, err
	if r.Checks == nil {
		r.Checks = []Check{ShareCheck("serial requests served by the restarted pylon within "+RejoinWindow.String(), 0, 0, MinRejoinShare)}
	}
	return r
}

func runIdleBursts(ctx context.Context, e *env, _ *Fleet, c *Client) ScenarioResult {
	var r ScenarioResult
	if err := fleet.Sleep(ctx, e.sz.idle); err != nil {
		r.Err = err
		return r
	}
	ledger := NewLedger()
	var n uint64
	for b := range e.sz.bursts {
		var wg sync.WaitGroup
		for range e.sz.burstSize {
			n++
			req := MixedRequest(n)
			id := ledger.Begin(time.Now())
			wg.Go(func() { ledger.Finish(id, c.Do(ctx, req, HangBound)) })
		}
		wg.Wait()
		if b < e.sz.bursts-1 && fleet.Sleep(ctx, e.sz.burstGap) != nil {
			break
		}
	}
	r.Load = Summarize(ledger.Results(), time.Time{})
	r.Measured = append(r.Measured, fmt.Sprintf("%d bursts of %d concurrent requests, %v apart, after %v idle; %s",
		e.sz.bursts, e.sz.burstSize, e.sz.burstGap, e.sz.idle, ledger.Accounting()))
	r.Checks = []Check{
		MaxCheck("burst requests failed or hung (of "+strconv.Itoa(r.Load.Sent)+")", r.Load.Failed+r.Load.Hung, MaxBurstFailures),
		BalancedCheck(ledger.Accounting()),
	}
	if ctx.Err() != nil {
		r.Err = ctx.Err()
	}
	return r
}

// waitBy waits for ch until deadline or ctx's end and reports whether ch was closed.
func waitBy(ctx context.Context, ch <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
