package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard/switchyard/bench/microbench"
)

// maxMicrobenchCandidates bounds a microbenchmark fleet (its synthetic candidates and the
// balancers' state for them are built in memory).
const maxMicrobenchCandidates = 65536

type microbenchCmd struct {
	Candidates []int  `help:"Candidate counts to measure (1 to 65536 each)." default:"8,64" sep:","`
	Iterations int    `help:"Measured decisions per scenario." default:"100000"`
	Warmup     int    `help:"Unmeasured decisions before measuring." default:"10000"`
	Keys       int    `help:"Distinct affinity keys in the request mix." default:"1024"`
	Scenario   string `help:"Only scenarios whose name contains this text." default:""`
	Format     string `help:"Output format." enum:"table,csv" default:"table"`
	Seed       uint64 `help:"Seed of the balancers' randomness." default:"1"`
}

func (c *microbenchCmd) Validate() error {
	var errs []error
	if c.Iterations <= 0 {
		errs = append(errs, errors.New("--iterations must be > 0"))
	}
	if c.Warmup < 0 {
		errs = append(errs, errors.New("--warmup must be >= 0"))
	}
	if c.Keys <= 0 {
		errs = append(errs, errors.New("--keys must be > 0"))
	}
	for _, n := range c.Candidates {
		if n < 1 || n > maxMicrobenchCandidates {
			errs = append(errs, fmt.Errorf("--candidates %d must be between 1 and %d", n, maxMicrobenchCandidates))
		}
	}
	return errors.Join(errs...)
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

func (c *microbenchCmd) Run() error { return c.run(os.Stdout) }

func (c *microbenchCmd) run(out io.Writer) error {
	var results []microbench.Result
	for _, n := range c.Candidates {
		scenarios := microbench.Scenarios(n)
		for i := range scenarios {
			if !strings.Contains(scenarios[i].Name, c.Scenario) {
				continue
			}
			res, err := microbench.Run(scenarios[i], n, c.Keys, c.Iterations, c.Warmup, rand.New(rand.NewPCG(c.Seed, 0)), time.Now, mallocs)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
	}
	if len(results) == 0 {
		return fmt.Errorf("no scenario matches %q", c.Scenario)
	}
	if c.Format == "csv" {
		return microbench.WriteCSV(out, results)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tcandidates\tns/decision\tallocs/decision\tavg rank\tbackends\ttop backend share\t")
	for i := range results {
		r := &results[i]
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.2f\t%.2f\t%d\t%.1f%%\t\n", r.Scenario, r.Candidates, r.NsPerChoose(), r.AllocsPerOp, r.AvgRankDepth, r.Backends, 100*float64(r.TopBackendHit)/float64(max(r.Choices, 1)))
	}
	return w.Flush()
}
