// Package runner orchestrates bench runs: for each algorithm of a scenario it launches
// the local fleet, drives the manifest through the gateways, scrapes Prometheus deltas,
// tears the fleet down and scores the run; it also drives external endpoints and writes
// the report files.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/switchyard/switchyard/bench/drive"
	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/report"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/score"
)

// Progress receives per-request progress for one drive.
type Progress interface {
	// Begin starts a drive of total requests labelled label.
	Begin(label string, total int)
	// Done reports one finished request.
	Done(r *score.Record, done int)
	// End closes the drive's progress display.
	End()
}

// Options configure a run.
type Options struct {
	Scenario   *scenario.Scenario
	Seed       uint64
	TimeScale  float64
	Algorithms []string // empty = all
	OutDir     string
	Bin        fleet.Binaries
	// ReadyTimeout bounds each fleet's start-up.
	ReadyTimeout time.Duration
	Progress     Progress
	Logger       *slog.Logger
	// Replicas, when set, runs every selected algorithm once per gateway replica count
	// (stargates.count overridden), an algorithm's counts one after another, so that each
	// count's run is compared with a run taken just before it. The runs are labelled
	// NAME@N and the scenario's expect checks, which name the plain algorithms, are not
	// evaluated.
	Replicas []int
}

// planned is one fleet run: an algorithm (relabelled in a replica comparison) on a
// scenario (a copy with its own stargates.count in one).
type planned struct {
	s        *scenario.Scenario
	a        scenario.Algorithm
	base     string
	gateways int
}

// plan lists the runs of algs on s: one per algorithm, or one per algorithm and replica
// count, an algorithm's counts in a row.
func plan(s *scenario.Scenario, algs []scenario.Algorithm, replicas []int) []planned {
	if len(replicas) == 0 {
		out := make([]planned, 0, len(algs))
		for _, a := range algs {
			out = append(out, planned{s: s, a: a})
		}
		return out
	}
	scens := make([]*scenario.Scenario, 0, len(replicas))
	for _, n := range replicas {
		c := *s
		c.Stargates.Count = &n
		scens = append(scens, &c)
	}
	out := make([]planned, 0, len(algs)*len(replicas))
	for _, a := range algs {
		for i, n := range replicas {
			v := a
			v.Name = fmt.Sprintf("%s@%d", a.Name, n)
			out = append(out, planned{s: scens[i], a: v, base: a.Name, gateways: n})
		}
	}
	return out
}

// SelectAlgorithms returns the scenario's algorithms named in names (all when empty),
// in scenario order, or an error naming the unknown ones.
func SelectAlgorithms(s *scenario.Scenario, names []string) ([]scenario.Algorithm, error) {
	if len(names) == 0 {
		return s.Algorithms, nil
	}
	var out []scenario.Algorithm
	var known []string
	for _, a := range s.Algorithms {
		known = append(known, a.Name)
		if slices.Contains(names, a.Name) {
			out = append(out, a)
		}
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(known, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("scenario %s has no algorithm %s (it has %s)", s.Name, strings.Join(missing, ", "), strings.Join(known, ", "))
	}
	return out, nil
}

// backendInfos returns the fleet's backends for scoring.
func backendInfos(s *scenario.Scenario) []score.BackendInfo {
	top := s.Topology()
	out := make([]score.BackendInfo, 0, len(top.Backends))
	for i := range top.Backends {
		b := &top.Backends[i]
		out = append(out, score.BackendInfo{ID: b.ID, Cluster: b.ClusterID, CapacityTPS: b.Profile.Registration.LastMeanInputTPS})
	}
	return out
}

// profiles maps the fleet's backend ids to their profile names (for the report's labels).
func profiles(top *scenario.Topology) map[string]string {
	out := make(map[string]string, len(top.Backends))
	for i := range top.Backends {
		if b := &top.Backends[i]; b.Profile.Name != "" {
			out[b.ID] = b.Profile.Name
		}
	}
	return out
}

// Run runs every selected algorithm on its own fresh fleet and returns the report.
func Run(ctx context.Context, o Options) (*report.Report, error) {
	s := o.Scenario
	algs, err := SelectAlgorithms(s, o.Algorithms)
	if err != nil {
		return nil, err
	}
	if err := o.Bin.Check(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := scenario.NewManifest(s, o.Seed)
	top := s.Topology()
	rep := &report.Report{Meta: report.Meta{
		Scenario: s.Name, Description: s.Metadata.Description, ExpectedSignal: s.Metadata.ExpectedSignal,
		Seed: o.Seed, Requests: s.RequestCount, MaxConcurrency: s.MaxConcurrency,
		Backends: len(top.Backends), Clusters: len(top.Clusters), Gateways: s.GatewayCount(), ClientSpread: clientSpread(s, s.GatewayCount()),
		TimeScale: timeScale(o.TimeScale), Ignored: s.Ignored(), Profiles: profiles(&top),
	}}
	if len(o.Replicas) > 0 {
		rep.Gateways, rep.Replicas, rep.ClientSpread = 0, o.Replicas, clientSpread(s, slices.Max(o.Replicas))
	}
	expect := func() []score.Outcome {
		if len(o.Replicas) > 0 {
			return nil
		}
		return evaluate(s, rep.Runs)
	}
	for _, p := range plan(s, algs, o.Replicas) {
		run, err := runOne(ctx, &o, p.s, &p.a, &m, log)
		if err != nil {
			rep.Expectations = expect()
			return rep, fmt.Errorf("algorithm %s: %w", p.a.Name, err)
		}
		run.Base, run.Gateways = p.base, p.gateways
		rep.Runs = append(rep.Runs, run)
	}
	rep.Charts = report.Charts(rep.Runs)
	rep.Expectations = expect()
	return rep, nil
}

// evaluate checks the scenario's expect entries against the runs so far.
func evaluate(s *scenario.Scenario, runs []report.Run) []score.Outcome {
	sums := make([]score.Summary, 0, len(runs))
	for i := range runs {
		sums = append(sums, runs[i].Summary)
	}
	return score.Evaluate(s, sums)
}

func timeScale(f float64) float64 {
	if f == 0 {
		return 1
	}
	return f
}

func runOne(ctx context.Context, o *Options, s *scenario.Scenario, a *scenario.Algorithm, m *scenario.Manifest, log *slog.Logger) (report.Run, error) {
	log.Info("fleet_starting", "algorithm", a.Name)
	f, err := fleet.Launch(ctx, s, a, fleet.Options{
		Bin: o.Bin, TimeScale: o.TimeScale, Seed: o.Seed, ReadyTimeout: o.ReadyTimeout,
		WorkDir: filepath.Join(o.OutDir, "fleet", scenario.Slug(a.Name)),
	})
	if err != nil {
		return report.Run{}, err
	}
	defer f.Close()
	before := f.ScrapeMetrics(ctx)
	actions := map[int][]scenario.Action{}
	for _, act := range s.Degradation.Actions {
		actions[act.AtRequest] = append(actions[act.AtRequest], act)
	}
	deps := drive.Deps{Before: func(i int) {
		for _, act := range actions[i] {
			if err := f.Degrade(act.Action, act.BackendIndex); err != nil {
				log.Warn("degradation_failed", "action", act.Action, "backend", act.BackendIndex, "error", err.Error())
				continue
			}
			log.Info("degradation_applied", "action", act.Action, "backend", act.BackendIndex, "at_request", i)
		}
	}}
	if o.Progress != nil {
		o.Progress.Begin(a.Name, len(m.Requests))
		deps.Done = o.Progress.Done
	}
	res, err := drive.Run(ctx, drive.Config{Targets: f.GatewayURLs(), SpreadByAffinityKey: s.SpreadByAffinityKey(), MaxConcurrency: s.MaxConcurrency, TimeScale: o.TimeScale, Plain: a.Plain()}, m, deps)
	if o.Progress != nil {
		o.Progress.End()
	}
	if err != nil {
		return report.Run{}, err
	}
	after := f.ScrapeMetrics(ctx)
	pairs := make([][2]string, 0, len(before))
	for i := range before {
		pairs = append(pairs, [2]string{before[i], after[i]})
	}
	in := score.Input{
		Algorithm: a.Name, AdmissionMode: fleet.AdmissionMode(a), Records: res.Records, Length: res.Length,
		Backends: backendInfos(s), MetricDeltas: score.MetricDeltas(pairs),
	}
	return report.Run{Summary: score.Score(&in), Records: res.Records}, nil
}

// DriveOptions configure a drive of an external endpoint.
type DriveOptions struct {
	Scenario  *scenario.Scenario
	Seed      uint64
	TimeScale float64
	Target    string
	Path      string
	Progress  Progress
}

// Drive sends the scenario's manifest to an existing endpoint once and scores it.
func Drive(ctx context.Context, o DriveOptions) (*report.Report, error) {
	s := o.Scenario
	m := scenario.NewManifest(s, o.Seed)
	deps := drive.Deps{}
	if o.Progress != nil {
		o.Progress.Begin(o.Target, len(m.Requests))
		deps.Done = o.Progress.Done
	}
	res, err := drive.Run(ctx, drive.Config{Target: o.Target, Path: o.Path, MaxConcurrency: s.MaxConcurrency, TimeScale: o.TimeScale}, &m, deps)
	if o.Progress != nil {
		o.Progress.End()
	}
	if err != nil && len(res.Records) == 0 {
		return nil, err
	}
	in := score.Input{Algorithm: "target", AdmissionMode: "n/a", Records: res.Records, Length: res.Length}
	rep := &report.Report{
		Meta: report.Meta{
			Scenario: s.Name, Description: s.Metadata.Description, Seed: o.Seed, Requests: s.RequestCount,
			MaxConcurrency: s.MaxConcurrency, TimeScale: timeScale(o.TimeScale), Target: o.Target,
			Ignored: append(s.Ignored(), "backends, stargates, degradation and algorithms (drive uses the existing target)"),
		},
		Runs: []report.Run{{Summary: score.Score(&in), Records: res.Records}},
	}
	rep.Charts = report.Charts(rep.Runs)
	return rep, err
}

// Write writes report.md, results.json and the charts into dir and returns the paths.
func Write(dir string, rep *report.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	var paths []string
	put := func(name string, render func(io.Writer) error) error {
		var b bytes.Buffer
		if err := render(&b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		paths = append(paths, p)
		return nil
	}
	errs := []error{
		put("report.md", func(w io.Writer) error { return report.Markdown(w, rep) }),
		put("results.json", func(w io.Writer) error { return report.JSON(w, rep) }),
		put(report.FileTTFTCDF, func(w io.Writer) error { return report.TTFTCDF(w, rep.Runs) }),
		put(report.FileCacheHitRate, func(w io.Writer) error { return report.CacheHitRates(w, rep.Runs) }),
	}
	for i := range rep.Runs {
		r := &rep.Runs[i]
		bucket := time.Second
		if rep.TimeScale > 0 && rep.TimeScale < 1 {
			bucket = time.Duration(float64(time.Second) * rep.TimeScale)
		}
		errs = append(errs, put(report.TimelineFile(r.Summary.Algorithm), func(w io.Writer) error { return report.Timeline(w, r, bucket, rep.Profiles) }))
	}
	return paths, errors.Join(errs...)
}

// clientSpread is the report's note of how clients spread over up to gateways gateways
// ("" with one gateway or the default round-robin).
func clientSpread(s *scenario.Scenario, gateways int) string {
	if gateways > 1 && s.SpreadByAffinityKey() {
		return scenario.ClientSpreadAffinityKey
	}
	return ""
}
