package gateway_test

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	startDateRefresher()
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir) // binaries built for the end-to-end tests
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startDateRefresher serves one request outside any synctest bubble so fasthttp's
// process-wide Date refresher starts here, not inside a bubble.
func startDateRefresher() {
	pc := fasthttputil.NewPipeConns()
	s := &fasthttp.Server{Handler: func(*fasthttp.RequestCtx) {}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.ServeConn(pc.Conn1())
	}()
	c := pc.Conn2()
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	var resp fasthttp.Response
	_ = resp.Read(bufio.NewReader(c))
	_ = c.Close()
	<-done
}
