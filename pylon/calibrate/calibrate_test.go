package calibrate_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/pylon/calibrate"
)

func TestStepsDefaults(t *testing.T) {
	got, err := calibrate.Steps(calibrate.Config{Requests: 5, MaxPromptUnits: 4096, MaxConcurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := []calibrate.Step{
		{0, 256, 5, 1}, {1, 512, 10, 2}, {2, 1024, 20, 3}, {3, 2048, 40, 4}, {4, 4096, 80, 4},
	}
	if !slices.Equal(got, want) {
		t.Errorf("steps\n got %v\nwant %v", got, want)
	}
}

func TestStepsShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  calibrate.Config
		want []calibrate.Step
	}{
		{"prompt cap below the base", calibrate.Config{1, 100, 1}, []calibrate.Step{{0, 100, 1, 1}}},
		{"prompt cap not a power of two", calibrate.Config{2, 700, 2}, []calibrate.Step{{0, 256, 2, 1}, {1, 512, 4, 2}, {2, 700, 8, 2}}},
		{"concurrency cap last", calibrate.Config{1, 256, 3}, []calibrate.Step{{0, 256, 1, 1}, {1, 256, 2, 2}, {2, 256, 4, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := calibrate.Steps(tc.cfg)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Steps(%+v) = %v, %v; want %v", tc.cfg, got, err, tc.want)
			}
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, c := range []calibrate.Config{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {-1, 4096, 4}} {
		if _, err := calibrate.New(c); !errors.Is(err, calibrate.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

// run drives a plan with the given outcomes (missing ones succeed) and returns the steps run.
func run(t *testing.T, cfg calibrate.Config, outcomes map[int]calibrate.Outcome) ([]calibrate.Step, calibrate.Reason) {
	t.Helper()
	p, err := calibrate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var steps []calibrate.Step
	for i := 0; i < 100; i++ {
		s, ok := p.Next()
		if !ok {
			r, done := p.Done()
			if !done {
				t.Fatal("Next false but not done")
			}
			return steps, r
		}
		steps = append(steps, s)
		p.Report(outcomes[s.Index])
	}
	t.Fatal("plan did not end")
	return nil, ""
}

func TestOutcomes(t *testing.T) {
	def := calibrate.Config{Requests: 5, MaxPromptUnits: 4096, MaxConcurrency: 4}
	for _, tc := range []struct {
		name     string
		outcomes map[int]calibrate.Outcome
		want     []calibrate.Step
		reason   calibrate.Reason
	}{
		{"saturated at step 0", map[int]calibrate.Outcome{0: {Saturated: true}}, []calibrate.Step{{0, 256, 5, 1}}, calibrate.ReasonSaturated},
		{
			"saturated at step 2 stops the ramp",
			map[int]calibrate.Outcome{2: {Saturated: true}},
			[]calibrate.Step{{0, 256, 5, 1}, {1, 512, 10, 2}, {2, 1024, 20, 3}},
			calibrate.ReasonSaturated,
		},
		{
			"prompt too long clamps to the last successful size",
			map[int]calibrate.Outcome{2: {PromptTooLong: true}},
			[]calibrate.Step{{0, 256, 5, 1}, {1, 512, 10, 2}, {2, 1024, 20, 3}, {3, 512, 40, 4}},
			calibrate.ReasonCompleted,
		},
		{
			"prompt too long with no successful size fails",
			map[int]calibrate.Outcome{0: {PromptTooLong: true}},
			[]calibrate.Step{{0, 256, 5, 1}},
			calibrate.ReasonPromptTooLong,
		},
		{
			"saturation wins over prompt too long",
			map[int]calibrate.Outcome{1: {Saturated: true, PromptTooLong: true}},
			[]calibrate.Step{{0, 256, 5, 1}, {1, 512, 10, 2}},
			calibrate.ReasonSaturated,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := run(t, def, tc.outcomes)
			if !slices.Equal(got, tc.want) || reason != tc.reason {
				t.Errorf("steps %v (%s), want %v (%s)", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestReportAfterDoneIsIgnored(t *testing.T) {
	p, _ := calibrate.New(calibrate.Config{1, 256, 1})
	p.Report(calibrate.Outcome{})
	p.Report(calibrate.Outcome{Saturated: true})
	if r, done := p.Done(); !done || r != calibrate.ReasonCompleted {
		t.Errorf("Done = %s %v", r, done)
	}
	if _, ok := p.Next(); ok {
		t.Error("Next after done")
	}
}
