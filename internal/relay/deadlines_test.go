package relay

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// deadlineRig is a fasthttp server whose handler waits delay before answering (streaming
// for stream: one chunk a second, four in all), behind a HostClient whose connections a
// Conns with per-request deadlines watches.
type deadlineRig struct {
	w      *Conns
	client *fasthttp.HostClient
	stop   chan struct{}
	done   chan struct{}
}

func newDeadlineRig(t *testing.T, fixed time.Duration) *deadlineRig {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	s := &fasthttp.Server{Logger: quiet{}, Handler: func(ctx *fasthttp.RequestCtx) {
		d, _ := time.ParseDuration(string(ctx.Request.Header.Peek("delay")))
		time.Sleep(d)
		if len(ctx.Request.Header.Peek("stream")) == 0 {
			ctx.SetBodyString("ok")
			return
		}
		stall, _ := time.ParseDuration(string(ctx.Request.Header.Peek("stall")))
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for range 4 {
				_, _ = w.WriteString("chunk\n")
				_ = w.Flush()
				time.Sleep(time.Second + stall) // "stall": a stream the upstream stops feeding
			}
		})
	}}
	go func() { _ = s.Serve(ln) }()
	r := &deadlineRig{
		w:    NewConns(func(string) (net.Conn, error) { return ln.Dial() }, fixed, 0, func(uint32) {}).RequestDeadlines(fixed, 0, 400*time.Millisecond),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	r.client = &fasthttp.HostClient{Addr: "upstream", DialTimeout: r.w.DialTimeout}
	go func() {
		defer close(r.done)
		r.w.Watch(r.stop)
	}()
	t.Cleanup(func() {
		r.client.CloseIdleConnections()
		close(r.stop)
		<-r.done
		_ = s.Shutdown()
		time.Sleep(time.Minute) // idle cleaners exit (virtual time)
	})
	return r
}

// do sends one request with a deadline (0: none) and returns the error and the time to
// the response headers.
func (r *deadlineRig) do(deadline, delay time.Duration, stream bool) (time.Duration, *fasthttp.Response, error) {
	return r.doStalling(deadline, delay, 0, stream)
}

// doStalling is do for a stream whose upstream waits stall more between its chunks.
func (r *deadlineRig) doStalling(deadline, delay, stall time.Duration, stream bool) (time.Duration, *fasthttp.Response, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	req.SetRequestURI("http://upstream/")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set("delay", delay.String())
	req.Header.Set("stall", stall.String())
	if stream {
		req.Header.Set("stream", "1")
		resp.StreamBody = true
	}
	req.SetTimeout(deadline)
	start := time.Now()
	err := r.client.Do(req, resp)
	return time.Since(start), resp, err
}

// Each request's deadline bounds only its wait for the first response bytes: a request
// past its deadline fails with a timeout once the watchdog closes its connection (within
// two periods of 50 ms), one answered in time succeeds on the same pool, a stream runs on
// past its deadline, and a request without a deadline falls back to the fixed timeout.
func TestConnsPerRequestDeadlines(t *testing.T) {
	mocktest.StartDateRefresher() // outside the bubble
	synctest.Test(t, func(t *testing.T) {
		r := newDeadlineRig(t, 3*time.Second)
		if r.w.period != 50*time.Millisecond {
			t.Fatalf("period %v, want 50ms (an eighth of the shortest deadline)", r.w.period)
		}
		took, resp, err := r.do(500*time.Millisecond, 2*time.Second, false)
		fasthttp.ReleaseResponse(resp)
		if !errors.Is(err, fasthttp.ErrTimeout) || took < 500*time.Millisecond || took > 600*time.Millisecond {
			t.Errorf("late answer: %v after %v, want a timeout within [500ms, 600ms]", err, took)
		}
		time.Sleep(2 * time.Second) // the abandoned handler finishes
		took, resp, err = r.do(time.Second, 800*time.Millisecond, false)
		if err != nil || string(resp.Body()) != "ok" || took != 800*time.Millisecond {
			t.Errorf("answer in time: %v %q after %v", err, resp.Body(), took)
		}
		fasthttp.ReleaseResponse(resp)
		took, resp, err = r.do(500*time.Millisecond, 0, true)
		if err != nil || took != 0 {
			t.Fatalf("stream: %v after %v", err, took)
		}
		body := resp.BodyStream()
		n := 0
		buf := make([]byte, 64)
		for {
			m, err := body.Read(buf)
			n += m
			if err != nil {
				break
			}
		}
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		if n != 4*len("chunk\n") {
			t.Errorf("stream past its deadline: %d bytes relayed, want all 24", n)
		}
		took, resp, err = r.do(0, 4*time.Second, false)
		fasthttp.ReleaseResponse(resp)
		if !errors.Is(err, fasthttp.ErrTimeout) || took < 3*time.Second || took > 3100*time.Millisecond {
			t.Errorf("no deadline: %v after %v, want the fixed 3s timeout", err, took)
		}
		time.Sleep(2 * time.Second)
	})
}

// A connection's deadline tick: d from now, rounded up to whole periods plus one.
func TestConnDeadlineTicks(t *testing.T) {
	w := NewConns(nil, 0, 0, func(uint32) {}).RequestDeadlines(0, 0, 800*time.Millisecond)
	if w.period != 100*time.Millisecond {
		t.Fatalf("period %v", w.period)
	}
	c := &conn{w: w}
	w.tick.Store(10)
	_ = c.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
	if got := c.deadline.Load(); got != 10+3+1 {
		t.Errorf("deadline tick %d, want 14", got)
	}
	_ = c.SetReadDeadline(time.Time{})
	if got := c.deadline.Load(); got != 0 {
		t.Errorf("cleared deadline tick %d, want 0", got)
	}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// A connection that cannot be made fails with a DialError: the request never left.
func TestConnsDialErrors(t *testing.T) {
	refused := errors.New("connection refused")
	w := NewConns(func(string) (net.Conn, error) { return nil, refused }, 0, 0, func(uint32) {})
	_, err := w.DialTimeout("engine:80", time.Second)
	var de *DialError
	if !errors.As(err, &de) || !errors.Is(err, refused) || de.Timeout() || err.Error() != "connection refused" {
		t.Errorf("dial error %#v", err)
	}
	w = NewConns(func(string) (net.Conn, error) { return nil, os.ErrDeadlineExceeded }, 0, 0, func(uint32) {})
	if _, err := w.DialTimeout("engine:80", time.Second); !errors.As(err, &de) || !de.Timeout() {
		t.Errorf("dial timeout %#v, want a DialError that is a timeout", err)
	}
}

// Abandon fails at once the requests to one address still waiting for their first
// response byte, as a connection closed before answering (not a timeout), and leaves a stream
// already answering, other addresses and the pool's later requests alone.
func TestConnsAbandonUnanswered(t *testing.T) {
	mocktest.StartDateRefresher() // outside the bubble
	synctest.Test(t, func(t *testing.T) {
		r := newDeadlineRig(t, 10*time.Second)
		_, stream, err := r.do(0, 0, true)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		type result struct {
			took time.Duration
			err  error
		}
		waiting := make(chan result, 1)
		go func() {
			took, resp, err := r.do(0, 5*time.Second, false)
			fasthttp.ReleaseResponse(resp)
			waiting <- result{took, err}
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := r.w.Abandon("elsewhere", 0); n != 0 {
			t.Errorf("another address: %d connections closed, want 0", n)
		}
		if n := r.w.Abandon("upstream", 0); n != 1 {
			t.Errorf("%d connections closed, want 1 (the unanswered request only)", n)
		}
		got := <-waiting
		if !errors.Is(got.err, fasthttp.ErrConnectionClosed) || got.took != time.Second {
			t.Errorf("unanswered request: %v after %v, want ErrConnectionClosed after 1s", got.err, got.took)
		}
		n := bodyBytes(stream)
		_ = stream.CloseBodyStream()
		fasthttp.ReleaseResponse(stream)
		if n != 4*len("chunk\n") {
			t.Errorf("stream already answering: %d bytes relayed, want all 24", n)
		}
		time.Sleep(5 * time.Second) // the abandoned handler finishes
		took, resp, err := r.do(0, 100*time.Millisecond, false)
		if err != nil || string(resp.Body()) != "ok" || took != 100*time.Millisecond {
			t.Errorf("a later request: %v %q after %v", err, resp.Body(), took)
		}
		fasthttp.ReleaseResponse(resp)
	})
}

// Abandon with a stall bound also ends a stream whose upstream stopped feeding it (its pending read has
// waited at least the given time), and spares one still flowing (a chunk a second) and an
// idle pooled connection.
func TestConnsAbandonStalled(t *testing.T) {
	mocktest.StartDateRefresher() // outside the bubble
	synctest.Test(t, func(t *testing.T) {
		r := newDeadlineRig(t, 10*time.Second)
		_, idle, err := r.do(0, 0, false) // leaves an idle connection in the pool
		if err != nil {
			t.Fatal(err)
		}
		fasthttp.ReleaseResponse(idle)
		_, flowing, err := r.do(0, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		_, stalled, err := r.doStalling(0, 0, time.Minute, true)
		if err != nil {
			t.Fatal(err)
		}
		read := func(resp *fasthttp.Response, into chan<- int) { into <- bodyBytes(resp) }
		flowed, cut := make(chan int, 1), make(chan int, 1)
		go read(flowing, flowed)
		go read(stalled, cut)
		time.Sleep(2500 * time.Millisecond) // the stalled one has waited 2.5 s past its first chunk
		synctest.Wait()
		if n := r.w.Abandon("upstream", 2*time.Second); n != 1 {
			t.Errorf("%d connections closed, want 1 (the stalled stream only)", n)
		}
		start := time.Now()
		if n := <-cut; n != len("chunk\n") || time.Since(start) != 0 {
			t.Errorf("the stalled stream: %d bytes, ended %v after the abort; want its one chunk, then at once", n, time.Since(start))
		}
		if n := <-flowed; n != 4*len("chunk\n") {
			t.Errorf("the flowing stream: %d bytes relayed, want all 24", n)
		}
		for _, resp := range []*fasthttp.Response{flowing, stalled} {
			_ = resp.CloseBodyStream()
			fasthttp.ReleaseResponse(resp)
		}
		time.Sleep(5 * time.Minute) // the abandoned handler finishes (4 chunks, 61 s apart)
	})
}

// bodyBytes reads resp's body stream until it ends or fails and returns the bytes read.
func bodyBytes(resp *fasthttp.Response) int {
	n, buf := 0, make([]byte, 64)
	for body := resp.BodyStream(); ; {
		m, err := body.Read(buf)
		n += m
		if err != nil {
			return n
		}
	}
}
