package pylon

import (
	"time"

	"github.com/switchyard/switchyard/internal/relay"
)

// engineCheckTimeout bounds engineDown's check.
const engineCheckTimeout = 250 * time.Millisecond

// engineSilentChecks is the number of liveness checks in a row without an answer that
// mark the engine unresponsive: three, so an engine has to stay silent for three check
// timeouts (an event loop lagging a second or two under load is not frozen).
const engineSilentChecks = 3

// engineStallChecks is how many check timeouts a stream of an unresponsive engine must
// have got nothing for to be ended: less than the silence that marked the engine, so a
// frozen engine's streams end, and a stream still sending is spared.
const engineStallChecks = 2

// engineCheck is the request engineDown sends: any answer at all shows the engine lives
// (a TLS engine answers a plain request too, with an error).
var engineCheck = []byte("GET /health HTTP/1.1\r\nHost: engine\r\nConnection: close\r\n\r\n")

// engineDown reports whether the engine is down right now. It is asked only after an
// engine call failed without a response byte and without a timeout, to tell an engine
// that died (killed, crashed: the request died with it, and another backend should take
// it) from one that merely closed a connection. A connection alone proves nothing: the
// kernel still accepts connections for a process being torn down. So the check sends a
// request on a new connection and wants the first byte of an answer within
// engineCheckTimeout. An engine the liveness watch has marked unresponsive is down.
func (p *Pylon) engineDown() bool {
	if p.engineSilent.Load() {
		return true
	}
	answered, _ := p.checkEngine(engineCheckTimeout)
	return !answered
}

// checkEngine sends engineCheck on a new connection. answered says the first byte of an
// answer came within timeout; silent says nothing at all happened in that time: the
// connection or the read timed out. An engine that refuses the connection, or closes or
// resets it without a byte, is not silent (a process that is alive, or gone, did that; a
// frozen one cannot): a TLS engine given the plain request may close it so.
func (p *Pylon) checkEngine(timeout time.Duration) (answered, silent bool) {
	c, err := p.engine.DialTimeout(p.client.Addr, timeout)
	if err != nil {
		return false, relay.IsTimeout(err)
	}
	defer func() { _ = c.Close() }()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return false, true
	}
	if _, err := c.Write(engineCheck); err != nil {
		return false, relay.IsTimeout(err)
	}
	var b [1]byte
	n, err := c.Read(b[:])
	return n > 0, n == 0 && relay.IsTimeout(err)
}

// watchEngine is the engine liveness watch (Config.EngineCheckTimeout), until stop
// closes. A frozen or stuck engine still accepts connections at the kernel level and
// answers nothing (checkEngine finds it silent; one that refuses or closes connections is
// not, and its requests fail fast on their own), so without the watch a request would wait
// for --first-output-timeout (30 s), a buffered one with no first-byte deadline at the
// gateway either. Once engineSilentChecks checks in a row were silent, the engine is
// unresponsive: the requests it holds that have no response byte yet are abandoned (their
// connections closed: each is answered 503 local_connect_failure, retryable, and the
// gateway retries it on another backend), and so are the streams it has sent nothing for
// engineStallChecks check timeouts (they end with an error event), again after every further silent
// check; the handler refuses new requests the same way (engineSilent). A check that is not
// silent ends it.
func (p *Pylon) watchEngine(stop <-chan struct{}) {
	timeout := p.cfg.EngineCheckTimeout
	if timeout <= 0 {
		return
	}
	t := time.NewTicker(timeout / 2)
	defer t.Stop()
	silent := 0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if _, quiet := p.checkEngine(timeout); !quiet {
			silent = 0
			if p.engineSilent.Swap(false) {
				p.log.Info("engine_answering_again", "engine", p.client.Addr)
				p.kickCanaries() // a canary its freeze failed need not keep the models INACTIVE
			}
			continue
		}
		silent++
		if silent < engineSilentChecks {
			continue
		}
		if !p.engineSilent.Swap(true) {
			p.metrics.engineUnresponsive.Inc()
			p.log.Warn("engine_unresponsive", "engine", p.client.Addr, "silent_checks", silent,
				"detail", "the engine answered no liveness check; requests waiting for it, and new ones, are answered 503 retryable")
		}
		// Its streams that have got nothing for two check timeouts end too (with an error
		// event to the gateway) instead of waiting for --stream-idle-timeout: the engine
		// has been silent at least three, and one still sending is spared.
		p.engine.Abandon(p.client.Addr, engineStallChecks*timeout)
	}
}
