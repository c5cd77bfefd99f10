package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/switchyard/switchyard/bench/score"
)

// newProgress returns a progress bar on a terminal and plain lines otherwise.
func newProgress(w *os.File) progress {
	if term.IsTerminal(int(w.Fd())) {
		return &barProgress{w: w}
	}
	return &lineProgress{w: w}
}

type progress interface {
	Begin(label string, total int)
	Done(r *score.Record, done int)
	End()
}

// barProgress draws a progress bar per drive.
type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *barProgress) Begin(label string, total int) {
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
	)
}

func (p *barProgress) Done(*score.Record, int) { _ = p.bar.Add(1) }

func (p *barProgress) End() { _ = p.bar.Finish() }

// lineProgress prints a line at every tenth of the drive and for every failure.
type lineProgress struct {
	w      io.Writer
	mu     sync.Mutex
	label  string
	total  int
	failed int
}

func (p *lineProgress) Begin(label string, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.total, p.failed = label, total, 0
	fmt.Fprintf(p.w, "%s: driving %d requests\n", label, total)
}

func (p *lineProgress) Done(r *score.Record, done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !r.OK() {
		p.failed++
		fmt.Fprintf(p.w, "%s: request %s failed: status %d %s\n", p.label, r.ID, r.Status, r.Error)
	}
	step := max(p.total/10, 1)
	if done%step == 0 || done == p.total {
		fmt.Fprintf(p.w, "%s: %d/%d done, %d failed\n", p.label, done, p.total, p.failed)
	}
}

func (p *lineProgress) End() {}
