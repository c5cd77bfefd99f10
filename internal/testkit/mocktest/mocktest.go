// Package mocktest is the test kit that ships with the mock engine: what every package
// testing fasthttp servers (inside testing/synctest bubbles or on loopback) needs — the
// process-wide fasthttp date refresher started outside any bubble, the goroutine-leak
// allowances for fasthttp's and protoactor's process-wide helpers, and the repository's
// binaries built once per test binary for loopback tests.
package mocktest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/goleak"
)

// StartDateRefresher serves one request outside any synctest bubble so that fasthttp's
// process-wide Date refresher goroutine starts here, not inside a bubble. Call it from
// TestMain before m.Run.
func StartDateRefresher() {
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

// LeakOptions are the goleak allowances for process-wide helpers that outlive a test:
// fasthttp's date refresher, dialer cache, worker-pool and client idle cleaners, and
// protoactor's dead-letter throttle.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	}
}

// Main is a TestMain body: it starts the date refresher, runs the tests, removes the
// binaries built by Binary and checks for leaked goroutines.
func Main(m *testing.M) {
	StartDateRefresher()
	code := m.Run()
	removeBinaries()
	if code == 0 {
		if err := goleak.Find(LeakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	binMu   sync.Mutex
	binDir  string
	binDone = map[string]error{}
)

// Binary builds the main package at pkgDir (relative to the test's package, e.g.
// "../cmd/engine") once per test binary and returns the executable's path. It skips the
// test with -short. Main removes the binaries at the end.
func Binary(t *testing.T, pkgDir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("loopback test: skipped with -short")
	}
	binMu.Lock()
	defer binMu.Unlock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "switchyard-bin-") //nolint:usetesting // shared by every test of the binary; Main removes it
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
	}
	path := filepath.Join(binDir, filepath.Base(pkgDir))
	err, built := binDone[pkgDir]
	if !built {
		if out, berr := exec.Command("go", "build", "-o", path, pkgDir).CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build %s: %w\n%s", pkgDir, berr, out)
		}
		binDone[pkgDir] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func removeBinaries() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// handedOut holds every address FreeAddr returned in this process: the kernel may offer a
// port again once its probe listener is closed, before the child that was given it has
// bound it (two pylons of one fleet were once given the same port).
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// FreeAddr returns a 127.0.0.1:port that was free a moment ago (for a child process to
// listen on) and that no earlier call in this process returned; a race with another
// process is possible but unlikely.
func FreeAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	for range 1000 {
		ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		handedOut.Lock()
		fresh := !handedOut.addrs[addr]
		handedOut.addrs[addr] = true
		handedOut.Unlock()
		if fresh {
			return addr
		}
	}
	t.Fatal("no loopback port that was not handed out before")
	return ""
}

// Loopback returns a listener on 127.0.0.1 and a client connection to it; the connection
// completes in the listen backlog, so the caller's Accept returns at once. Both close at
// the end of the test.
func Loopback(t *testing.T) (net.Listener, net.Conn) {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return ln, c
}

// Command is exec.CommandContext for a long-running binary under test: when ctx ends
// first, the process gets SIGQUIT instead of SIGKILL, so a hung binary prints every
// goroutine's stack to its stderr (which the test shows) before it exits.
func Command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}
