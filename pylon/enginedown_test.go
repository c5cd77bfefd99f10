package pylon

import (
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/switchyard/switchyard/internal/relay"
)

// engineDown: an engine that answers lives; one that cannot be reached, or that accepts a
// connection but never answers on it (a process being torn down), is down.
func TestEngineDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ln *fasthttputil.InmemoryListener
		p := &Pylon{client: &fasthttp.HostClient{Addr: "engine:80"}}
		p.engine = relay.NewConns(func(string) (net.Conn, error) {
			if ln == nil {
				return nil, errors.New("connection refused")
			}
			return ln.Dial()
		}, 0, 0, func(uint32) {})
		if !p.engineDown() {
			t.Error("unreachable engine: want down")
		}
		ln = fasthttputil.NewInmemoryListener()
		answering := &fasthttp.Server{Logger: quietLogger{}, Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
		go func() { _ = answering.Serve(ln) }()
		if p.engineDown() {
			t.Error("answering engine: want up")
		}
		_ = answering.Shutdown()
		ln = fasthttputil.NewInmemoryListener()
		done := make(chan struct{})
		go func() { // accepts, never answers, closes
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			time.Sleep(time.Second)
			_ = c.Close()
		}()
		start := time.Now()
		if !p.engineDown() {
			t.Error("silent engine: want down")
		}
		if took := time.Since(start); took != engineCheckTimeout {
			t.Errorf("silent engine judged after %v, want %v", took, engineCheckTimeout)
		}
		<-done
		_ = ln.Close()
		time.Sleep(time.Minute) // fasthttp's worker-pool cleaner exits (virtual time)
	})
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
