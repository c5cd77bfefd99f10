// Package streams opens many concurrent long streaming requests against one
// OpenAI-compatible endpoint and reports how they went: errors by kind and the time to
// first byte of each. The bench's streams command uses it to hold N streams open through a
// gateway and a pylon at once while it reads their memory (see docs/bench.md).
//
// Each stream is one raw TCP connection with "Connection: close": the request is written
// once, the first byte of the answer is timed, and the body is read through a small buffer
// until the server closes the connection. A stream succeeds when its status is 200 and
// its body holds the event stream's "data: [DONE]" end. The client keeps about 1 KiB and
// one goroutine per stream, so it can hold tens of thousands on a small machine.
package streams

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Options say what to open.
type Options struct {
	// Addr is the endpoint's host:port.
	Addr string
	// Path is the request path (default /v1/chat/completions).
	Path string
	// Model is the body's model.
	Model string
	// N streams are opened.
	N int
	// Opening bounds the streams being opened at once (dialled, request written, first
	// byte not yet read); default 64.
	Opening int
	// Timeout bounds each stream from its dial to its end.
	Timeout time.Duration
}

// Result is what happened to the streams.
type Result struct {
	// TTFB holds the time from dialling to the first byte of the answer of every stream
	// that got one, sorted.
	TTFB []time.Duration
	// Errors counts failed streams by kind ("dial", "status 503", "cut", "timeout", …).
	Errors map[string]int
	// Samples holds, for each failure kind that had an answer, the start of the first such
	// answer (at most 300 bytes: the status line, headers and the error body).
	Samples map[string]string
	// OK counts the streams that ended with [DONE] after a 200.
	OK int
	// AllOpen is how long it took until every stream had its first byte or had failed.
	AllOpen time.Duration
}

// ErrorCount is the number of failed streams.
func (r *Result) ErrorCount() int {
	n := 0
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// Quantile returns the q-quantile of the times to first byte (0 without any).
func (r *Result) Quantile(q float64) time.Duration {
	if len(r.TTFB) == 0 {
		return 0
	}
	i := min(int(q*float64(len(r.TTFB))), len(r.TTFB)-1)
	return r.TTFB[i]
}

// readBuf is each stream's read buffer: an event of the mock engine fits.
const readBuf = 1024

var doneMarker = []byte("data: [DONE]")

// Run opens opts.N streams. Once every stream has its first byte or has failed, it calls
// allOpen, whose argument says how many streams are open at the moment it is called, and
// then waits until every stream has ended. Ending ctx ends every stream (they count as
// "cancelled").
func Run(ctx context.Context, opts Options, allOpen func(open func() int)) (*Result, error) {
	if opts.N <= 0 || opts.Addr == "" || opts.Timeout <= 0 {
		return nil, errors.New("streams: N > 0, a timeout and an address are needed")
	}
	if opts.Path == "" {
		opts.Path = "/v1/chat/completions"
	}
	if opts.Opening <= 0 {
		opts.Opening = 64
	}
	body := `{"model":"` + opts.Model + `","messages":[{"role":"user","content":"hello"}],"stream":true}`
	req := []byte("POST " + opts.Path + " HTTP/1.1\r\nHost: " + opts.Addr + "\r\nContent-Type: application/json\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		res    = &Result{Errors: map[string]int{}, Samples: map[string]string{}, TTFB: make([]time.Duration, 0, opts.N)}
		open   int
		wg     sync.WaitGroup
		opened sync.WaitGroup // done when a stream has its first byte or has failed
		slots  = make(chan struct{}, opts.Opening)
	)
	start := time.Now()
	opened.Add(opts.N)
	for range opts.N {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		wg.Go(func() {
			first := false
			markOpen := func(ttfb time.Duration) {
				first = true
				<-slots
				mu.Lock()
				res.TTFB = append(res.TTFB, ttfb)
				open++
				mu.Unlock()
				opened.Done()
			}
			kind, sample := stream(ctx, opts, req, markOpen)
			if !first {
				<-slots
				opened.Done()
			}
			mu.Lock()
			if first {
				open--
			}
			if kind == "" {
				res.OK++
			} else {
				res.Errors[kind]++
				if _, ok := res.Samples[kind]; !ok && sample != "" {
					res.Samples[kind] = sample
				}
			}
			mu.Unlock()
		})
	}
	opened.Wait()
	res.AllOpen = time.Since(start)
	if ctx.Err() == nil && allOpen != nil {
		allOpen(func() int {
			mu.Lock()
			defer mu.Unlock()
			return open
		})
	}
	wg.Wait()
	slices.Sort(res.TTFB)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("streams: %w", err)
	}
	return res, nil
}

// stream runs one stream; it calls first with the time to first byte when the answer
// starts and returns "" for a success, else the kind of failure and, for an answer that
// was not a 200, its first bytes.
func stream(ctx context.Context, opts Options, req []byte, first func(time.Duration)) (kind, sample string) {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	start := time.Now()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", opts.Addr)
	if err != nil {
		if ctx.Err() != nil {
			return ended(ctx), ""
		}
		return "dial", ""
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		return orEnded(ctx, "write"), ""
	}
	var buf [readBuf]byte
	n, err := c.Read(buf[:])
	if n == 0 {
		return orEnded(ctx, "no answer"), ""
	}
	first(time.Since(start))
	if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) {
		sample = string(buf[:min(n, 300)])
		if i := bytes.IndexByte(buf[:n], '\r'); i > len("HTTP/1.1 ") {
			return "status " + string(buf[len("HTTP/1.1 "):min(i, len("HTTP/1.1 ")+3)]), sample
		}
		return "bad answer", sample
	}
	// Find [DONE] across reads: keep the previous read's tail in front of the next one.
	keep := len(doneMarker) - 1
	done := bytes.Contains(buf[:n], doneMarker)
	tail := n
	for err == nil {
		if tail > keep {
			copy(buf[:keep], buf[tail-keep:tail])
			tail = keep
		}
		n, err = c.Read(buf[tail:])
		if !done && bytes.Contains(buf[:tail+n], doneMarker) {
			done = true
		}
		tail += n
	}
	if done {
		return "", ""
	}
	return orEnded(ctx, "cut"), ""
}

// orEnded is ctx's end as a failure kind when it has ended, else kind.
func orEnded(ctx context.Context, kind string) string {
	if ctx.Err() != nil {
		return ended(ctx)
	}
	return kind
}

func ended(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "timeout"
	}
	return "cancelled"
}
