// Package fleet runs a scenario's local fleet: mock engines (one per cluster), pylons
// (one per backend, grouped clusters sharing their engine) and gateways, as child
// processes of bin/engine, bin/pylon and bin/gateway on free 127.0.0.1 ports. Every
// child runs in its own process group, which Close signals (SIGTERM, then SIGKILL), so
// nothing outlives the fleet; on Linux children also get SIGKILL if the bench dies.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
const StopGrace = 3 * time.Second

// Spec describes one child process.
type Spec struct {
	// Name identifies the process in logs and errors, e.g. "pylon-3".
	Name string
	Path string
	Args []string
	// URL is the process's base URL on loopback; AdminURL its admin listener's (gateways
	// and pylons: control, /metrics, /debug), "" for engines.
	URL      string
	AdminURL string
}

// String renders the command line.
func (s *Spec) String() string { return s.Path + " " + strings.Join(s.Args, " ") }

// Proc is one running child.
type Proc struct {
	Spec
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  io.WriteCloser
}

// Start starts spec in a new process group, with its output appended to log (nil
// discards it). The child is reaped by a goroutine; Done reports its exit.
func Start(spec Spec, log io.WriteCloser) (*Proc, error) {
	cmd := exec.Command(spec.Path, spec.Args...) //nolint:gosec // the bench launches its own binaries
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stdin = nil
	if log != nil {
		cmd.Stdout, cmd.Stderr = log, log
	}
	if err := cmd.Start(); err != nil {
		if log != nil {
			_ = log.Close()
		}
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Proc{Spec: spec, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		if p.log != nil {
			_ = p.log.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// PID returns the child's process id (and process group id).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited, with its wait error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL to the child's process group and waits for the child.
func (p *Proc) Kill() {
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group.
// The group is SIGKILLed in the end even when the leader exits, so grandchildren that
// ignore SIGTERM do not survive.
func (p *Proc) Stop(grace time.Duration) {
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.done
}

// Group is a set of children stopped together.
type Group struct {
	mu    sync.Mutex
	procs []*Proc
}

// Add registers p with the group.
func (g *Group) Add(p *Proc) {
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
}

// Replace swaps old for p (after a restart).
func (g *Group) Replace(old, p *Proc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.procs {
		if g.procs[i] == old {
			g.procs[i] = p
			return
		}
	}
	g.procs = append(g.procs, p)
}

// Stop stops every child concurrently, in reverse start order, and waits for all.
func (g *Group) Stop(grace time.Duration) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(procs) - 1; i >= 0; i-- {
		wg.Go(func() { procs[i].Stop(grace) })
	}
	wg.Wait()
}

// FreePorts reserves n distinct free TCP ports on 127.0.0.1. The ports are released
// before returning, so a race with another process is possible but unlikely.
func FreePorts(ctx context.Context, n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	var lc net.ListenConfig
	for range n {
		l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a loopback port: %w", err)
		}
		lns = append(lns, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("reserve a loopback port: not a TCP address")
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// openLog creates (truncating) a log file for a child under dir; "" discards output.
func openLog(dir, name string) (io.WriteCloser, error) {
	if dir == "" {
		return nil, nil //nolint:nilnil // no log wanted
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	return f, nil
}
