package streams_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/streams"
)

// serve answers each connection by what its request's path says: /ok streams three events
// and [DONE], /busy answers 503, /cut sends the headers and one event, then closes.
func serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
				event := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
				switch {
				case strings.Contains(line, "/busy"):
					_, _ = c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"))
				case strings.Contains(line, "/cut"):
					_, _ = c.Write([]byte(head + event))
				default:
					_, _ = c.Write([]byte(head + event))
					for range 2 {
						time.Sleep(5 * time.Millisecond)
						_, _ = c.Write([]byte(event))
					}
					// [DONE] split over two writes: the client finds it across reads.
					_, _ = c.Write([]byte("data: [DO"))
					time.Sleep(5 * time.Millisecond)
					_, _ = c.Write([]byte("NE]\n\n"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestRunCountsSuccessesAndFailuresByKind(t *testing.T) {
	addr := serve(t)
	for _, tc := range []struct {
		path string
		ok   int
		kind string
	}{{"/ok", 20, ""}, {"/busy", 0, "status 503"}, {"/cut", 0, "cut"}} {
		called := 0
		res, err := streams.Run(context.Background(), streams.Options{Addr: addr, Path: tc.path, Model: "m", N: 20, Opening: 4, Timeout: 5 * time.Second},
			func(open func() int) {
				called++
				if n := open(); n < 0 || n > 20 {
					t.Errorf("%s: %d open", tc.path, n)
				}
			})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if called != 1 || res.OK != tc.ok || len(res.TTFB) != 20 {
			t.Errorf("%s: allOpen called %d times, %d ok, %d first bytes; want 1, %d, 20", tc.path, called, res.OK, len(res.TTFB), tc.ok)
		}
		if tc.kind != "" && res.Errors[tc.kind] != 20 {
			t.Errorf("%s: errors %v, want 20 %q", tc.path, res.Errors, tc.kind)
		}
		if res.Quantile(0.5) <= 0 || res.Quantile(0.99) < res.Quantile(0.5) {
			t.Errorf("%s: TTFB p50 %v p99 %v", tc.path, res.Quantile(0.5), res.Quantile(0.99))
		}
	}
}

func TestRunCountsRefusedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	res, err := streams.Run(context.Background(), streams.Options{Addr: addr, N: 3, Timeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors["dial"] != 3 || res.OK != 0 || len(res.TTFB) != 0 {
		t.Errorf("got %+v, want 3 dial errors", res)
	}
}
