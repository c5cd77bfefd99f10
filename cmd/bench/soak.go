package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard/switchyard/bench/chaos"
	"github.com/switchyard/switchyard/bench/fleet"
)

// soakCmd runs a long mixed load with a fault injected at a steady pace and checks the
// outcome accounting, the gateway's heap and everyone's goroutines at the end.
type soakCmd struct {
	Duration    time.Duration `default:"10m" help:"How long the load runs."`
	FaultEvery  time.Duration `name:"fault-every" default:"30s" help:"Time between two injected faults (rotating: kill -9 and restart a pylon, the same for an engine, SIGSTOP/SIGCONT a pylon, engine fault injection)."`
	SampleEvery time.Duration `name:"sample-every" default:"30s" help:"Time between two lines of heap and goroutines."`
	WarmUp      time.Duration `name:"warm-up" default:"1m" help:"Left out of the heap growth budget."`
	Clients     int           `default:"4" help:"Concurrent clients, each sending one request at a time."`
	Out         string        `placeholder:"FILE" help:"Also write the report as markdown to FILE."`
	BinDir      string        `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon and gateway binaries."`
	Logs        string        `placeholder:"DIR" help:"Keep the children's logs in DIR (default: a temporary folder, removed)."`
}

func (c *soakCmd) Validate() error {
	if c.Duration <= 0 || c.FaultEvery <= 0 || c.SampleEvery <= 0 || c.WarmUp < 0 || c.Clients <= 0 {
		return errors.New("--duration, --fault-every, --sample-every and --clients must be > 0 and --warm-up >= 0")
	}
	return nil
}

func (c *soakCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	if c.Logs != "" {
		if err := os.MkdirAll(c.Logs, 0o750); err != nil {
			return err
		}
	}
	rep, err := chaos.Soak(ctx, chaos.SoakOptions{
		Bin: fleet.BinariesIn(c.BinDir), Duration: c.Duration, FaultEvery: c.FaultEvery, SampleEvery: c.SampleEvery,
		WarmUp: c.WarmUp, Clients: c.Clients, LogDir: c.Logs, Out: os.Stdout,
	})
	if err != nil {
		return err
	}
	if err := chaos.WriteSoak(os.Stdout, rep, false); err != nil {
		return err
	}
	if c.Out != "" {
		if dir := filepath.Dir(c.Out); dir != "." {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return err
			}
		}
		f, err := os.Create(c.Out)
		if err != nil {
			return err
		}
		if err := chaos.WriteSoak(f, rep, true); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Printf("markdown: %s\n", c.Out)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; every fleet process was stopped")
	}
	if !rep.Passed() {
		return errors.New("the soak missed a budget")
	}
	return nil
}
