package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/simulate"
)

type simulateCmd struct {
	Scenario   string   `required:"" placeholder:"FILE" help:"Scenario YAML file, or the name of a bundled scenario."`
	Seed       *uint64  `help:"Manifest seed (default: the scenario's seed)."`
	Algorithms []string `sep:"," help:"Only these algorithms (labels from the scenario), comma-separated."`
	Grid       []string `sep:"none" placeholder:"FIELD=V1,V2,..." help:"Sweep a field of the algorithm's model entry over these values (repeatable: every combination); needs exactly one --algorithms."`
	Seeds      int      `default:"1" help:"Average each result over this many manifests (consecutive seeds from the scenario's or --seed)."`
}

func (c *simulateCmd) Run() error {
	s, err := loadScenario(c.Scenario)
	if err != nil {
		return err
	}
	if c.Seed != nil {
		s.Seed = *c.Seed
	}
	algs := s.Algorithms
	if len(c.Algorithms) > 0 {
		algs = nil
		for _, name := range c.Algorithms {
			i := slicesIndex(s.Algorithms, name)
			if i < 0 {
				return fmt.Errorf("--algorithms: the scenario has no algorithm %q", name)
			}
			algs = append(algs, s.Algorithms[i])
		}
	}
	start := time.Now()
	if len(c.Grid) == 0 {
		results := make([]simulate.Result, 0, len(algs))
		for i := range algs {
			r, err := simulate.RunSeeds(s, &algs[i], c.Seeds)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
		printResults(os.Stdout, nil, nil, results)
		fmt.Printf("\n%d algorithms simulated in %v (virtual time, no processes)\n", len(results), time.Since(start).Round(time.Millisecond))
		return nil
	}
	if len(algs) != 1 {
		return fmt.Errorf("--grid needs exactly one algorithm (--algorithms NAME); the scenario has %d", len(algs))
	}
	axes := make([]simulate.Axis, 0, len(c.Grid))
	for _, spec := range c.Grid {
		ax, err := simulate.ParseAxis(spec)
		if err != nil {
			return err
		}
		axes = append(axes, ax)
	}
	points, err := simulate.Grid(s, &algs[0], axes, c.Seeds)
	if err != nil {
		return err
	}
	results := make([]simulate.Result, len(points))
	settings := make([][]float64, len(points))
	for i, p := range points {
		results[i], settings[i] = p.Result, p.Settings
	}
	printResults(os.Stdout, axes, settings, results)
	best := 0
	for i, r := range results {
		if r.Failed < results[best].Failed || (r.Failed == results[best].Failed && r.TTFTMean < results[best].TTFTMean) {
			best = i
		}
	}
	fmt.Printf("\nbest (fewest failures, then lowest mean TTFT): %s\n%d points simulated in %v (virtual time, no processes)\n",
		pointName(axes, settings[best]), len(points), time.Since(start).Round(time.Millisecond))
	return nil
}

func slicesIndex(algs []scenario.Algorithm, name string) int {
	for i := range algs {
		if algs[i].Name == name {
			return i
		}
	}
	return -1
}

func pointName(axes []simulate.Axis, settings []float64) string {
	parts := make([]string, len(axes))
	for i, ax := range axes {
		parts[i] = ax.Field + "=" + strconv.FormatFloat(settings[i], 'g', -1, 64)
	}
	return strings.Join(parts, " ")
}

// printResults prints one row per result: the grid settings (when axes are given) or the
// algorithm, then the outcome.
func printResults(w io.Writer, axes []simulate.Axis, settings [][]float64, results []simulate.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	var head strings.Builder
	if axes == nil {
		head.WriteString("algorithm\t")
	}
	for _, ax := range axes {
		head.WriteString(ax.Field + "\t")
	}
	fmt.Fprintln(tw, head.String()+"served\tfailed\tttft mean ms\tttft p50 ms\tttft p95 ms\tcache hit\tmakespan s\t")
	for i, r := range results {
		var row strings.Builder
		if axes == nil {
			row.WriteString(r.Algorithm + "\t")
		} else {
			for _, v := range settings[i] {
				row.WriteString(strconv.FormatFloat(v, 'g', -1, 64) + "\t")
			}
		}
		fmt.Fprintf(tw, "%s%d\t%d\t%.1f\t%.1f\t%.1f\t%.3f\t%.1f\t\n", row.String(), r.Served, r.Failed, ms(r.TTFTMean), ms(r.TTFTP50), ms(r.TTFTP95), r.CacheHitRate, r.Makespan.Seconds())
	}
	_ = tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
