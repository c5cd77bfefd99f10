package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard/switchyard/bench/chaos"
	"github.com/switchyard/switchyard/bench/fleet"
)

// chaosCmd runs the fault suite on a local 2-backend fleet and checks its budgets.
type chaosCmd struct {
	Short     bool     `help:"Run the CI subset with smaller counts (about a minute)."`
	Scenarios []string `sep:"," placeholder:"NAME,..." help:"Run only these scenarios (see --list)."`
	List      bool     `help:"List the scenarios and exit."`
	Out       string   `placeholder:"FILE" help:"Also write the table as markdown to FILE."`
	BinDir    string   `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon and gateway binaries."`
	Logs      string   `placeholder:"DIR" help:"Keep the children's logs in DIR, one folder per scenario (default: a temporary folder, removed)."`
}

func (c *chaosCmd) Run() error {
	if c.List {
		for _, s := range chaos.Scenarios() {
			short := ""
			if s.Short {
				short = " (in --short)"
			}
			fmt.Printf("%-22s %s%s\n", s.Name, s.About, short)
		}
		return nil
	}
	ctx, stop := signalContext()
	defer stop()
	if c.Logs != "" {
		if err := os.MkdirAll(c.Logs, 0o750); err != nil {
			return err
		}
	}
	rep, err := chaos.Run(ctx, chaos.Options{Bin: fleet.BinariesIn(c.BinDir), Short: c.Short, Only: c.Scenarios, LogDir: c.Logs, Progress: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Println()
	if err := chaos.WriteTable(os.Stdout, rep.Results); err != nil {
		return err
	}
	if c.Out != "" {
		if err := writeMarkdown(c.Out, chaosTitle(rep), rep.Results); err != nil {
			return err
		}
		fmt.Printf("markdown: %s\n", c.Out)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; every fleet process was stopped")
	}
	if !rep.Passed() {
		return errors.New(chaos.Summary(rep.Results))
	}
	return nil
}

func chaosTitle(rep *chaos.Report) string {
	var b strings.Builder
	b.WriteString("bench chaos")
	if rep.Short {
		b.WriteString(" --short")
	}
	return b.String()
}

func writeMarkdown(path, title string, rs []chaos.ScenarioResult) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chaos.WriteMarkdown(f, title, rs); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
