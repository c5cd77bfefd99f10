package lbconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
)

// resolveConfig exercises every step of the resolution order: the model's own definition
// when the header names its algorithm, then the model-level request_algorithms, then the
// top-level ones.
const resolveConfig = `{
  "default": "power-of-n",
  "request_algorithms": {
    "wait-and-widen": {"algorithm": "wait-and-widen", "comparator": "utilization"},
    "power-of-n": {"algorithm": "power-of-n", "comparator": "queue-time"},
    "round-robin": "round-robin"
  },
  "models": {
    "model-a": {"algorithm": "wait-and-widen", "comparator": "num-requests-queued", "seed": "a"},
    "model-b": "round-robin",
    "model-c": {"algorithm": "random", "request_algorithms": {
      "wait-and-widen": {"algorithm": "wait-and-widen", "comparator": "input-work-seconds"}
    }},
    "model-d": "groq-multiregion"
  }
}`

func TestResolve(t *testing.T) {
	t.Parallel()
	c := mustParse(t, resolveConfig)
	modelA := with(WaitAndWiden, func(e *Entry) { e.Comparator, e.Seed = load.ComparatorNumRequestsQueued, "a" })
	topWAW := with(WaitAndWiden, func(e *Entry) { e.Comparator = load.ComparatorUtilization })
	topPON := with(PowerOfN, func(e *Entry) { e.Comparator = load.ComparatorQueueTime })
	nestedWAW := with(WaitAndWiden, func(e *Entry) { e.Comparator = load.ComparatorInputWorkSeconds })
	tests := []struct {
		name    string
		model   string
		header  string
		present bool
		want    Entry
		wantErr error
		reason  HeaderReason
	}{
		{name: "no header: model entry", model: "model-a", want: modelA},
		{name: "no header: default for unconfigured model", model: "other", want: DefaultEntry(PowerOfN)},
		{name: "no header value ignored when absent", model: "model-b", header: "pulsar", want: DefaultEntry(RoundRobin)},
		{name: "override matching the model's algorithm reuses its config", model: "model-a", header: "wait-and-widen", present: true, want: modelA},
		{name: "underscore spelling of the model's algorithm", model: "model-a", header: " WAIT_AND_WIDEN ", present: true, want: modelA},
		{name: "alias of the model's algorithm", model: "model-a", header: "groq-multiregion", present: true, want: modelA},
		{name: "model with an alias name, canonical header", model: "model-d", header: "wait-and-widen", present: true, want: named(WaitAndWiden, "groq-multiregion")},
		{name: "top-level override for another model", model: "model-b", header: "wait-and-widen", present: true, want: topWAW},
		{name: "model-level override beats top-level", model: "model-c", header: "wait_and_widen", present: true, want: nestedWAW},
		{name: "model-level override inherits the rest", model: "model-c", header: "power-of-n", present: true, want: topPON},
		{name: "top-level override for an unconfigured model", model: "other", header: "wait-and-widen", present: true, want: topWAW},
		{name: "unconfigured model: default algorithm header uses the default", model: "other", header: "powerOf2", present: true, want: DefaultEntry(PowerOfN)},
		{name: "configured model: power-of-n from the top level", model: "model-b", header: "power-of-two", present: true, want: topPON},
		{name: "round-robin override", model: "model-a", header: "round-robin", present: true, want: DefaultEntry(RoundRobin)},
		{name: "model's own round-robin", model: "model-b", header: "round_robin", present: true, want: DefaultEntry(RoundRobin)},
		{name: "known but not configured", model: "model-b", header: "pulsar", present: true, wantErr: ErrUnavailableAlgorithm, reason: ReasonNotAllowed},
		{name: "not allow-listed for this model", model: "model-a", header: "random", present: true, wantErr: ErrUnavailableAlgorithm, reason: ReasonNotAllowed},
		{name: "unknown", model: "model-a", header: "sticky", present: true, wantErr: ErrUnknownAlgorithm, reason: ReasonUnknown},
		{name: "empty", model: "model-a", header: "", present: true, wantErr: ErrUnknownAlgorithm, reason: ReasonBlank},
		{name: "blank", model: "model-a", header: "  ", present: true, wantErr: ErrUnknownAlgorithm, reason: ReasonBlank},
		{name: "invalid UTF-8", model: "model-a", header: "\xc3\x28", present: true, wantErr: ErrUnknownAlgorithm, reason: ReasonInvalidUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.Resolve(tt.model, tt.header, tt.present)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Resolve(%q, %q): %v", tt.model, tt.header, err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("Resolve(%q, %q) (-want +got):\n%s", tt.model, tt.header, diff)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Resolve(%q, %q) error = %v, want %v", tt.model, tt.header, err, tt.wantErr)
			}
			var he *HeaderError
			if !errors.As(err, &he) || he.Reason != tt.reason || he.Value != tt.header {
				t.Errorf("Resolve(%q, %q) error = %#v, want reason %q", tt.model, tt.header, err, tt.reason)
			}
			if diff := cmp.Diff(Entry{}, got); diff != "" {
				t.Errorf("entry returned with an error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveUnavailableMessage(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"power-of-n"}`)
	_, err := c.Resolve("model-x", "Pulsar_Multiregion", true)
	want := `x-routing-method "Pulsar_Multiregion": algorithm pulsar-multiregion is not allow-listed for model "model-x"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

// TestResolvePermissive checks that without a config file every algorithm can be selected
// by header, in every spelling (canonical, underscore, alias, legacy name), and that no
// header means power-of-n.
func TestResolvePermissive(t *testing.T) {
	t.Parallel()
	c := Default()
	if got, err := c.Resolve("any", "", false); err != nil || !cmp.Equal(got, DefaultEntry(PowerOfN)) {
		t.Errorf("no header: %+v, %v; want power-of-n defaults", got, err)
	}
	for _, a := range Algorithms() {
		canonical := a.String()
		spellings := []string{canonical, strings.ReplaceAll(canonical, "-", "_"), " " + strings.ToUpper(canonical) + " "}
		for alias, target := range aliases {
			if target == a {
				spellings = append(spellings, alias, strings.ReplaceAll(alias, "-", "_"))
			}
		}
		for _, h := range spellings {
			got, err := c.Resolve("any", h, true)
			if err != nil {
				t.Errorf("Resolve(%q): %v", h, err)
				continue
			}
			if a == PowerOfN {
				// The model's own (default) algorithm: its configured entry.
				if diff := cmp.Diff(DefaultEntry(PowerOfN), got); diff != "" {
					t.Errorf("Resolve(%q) (-want +got):\n%s", h, diff)
				}
				continue
			}
			if diff := cmp.Diff(named(a, NormalizeRoutingMethod(h)), got); diff != "" {
				t.Errorf("Resolve(%q) (-want +got):\n%s", h, diff)
			}
		}
	}
	legacy := []struct {
		header string
		want   Entry
	}{
		{"groq-multiregion", named(WaitAndWiden, "groq-multiregion")},
		{"groq_multiregion", named(WaitAndWiden, "groq-multiregion")},
		{"pulsar_multiregion", named(PulsarWaitAndWiden, "pulsar-multiregion")},
	}
	for _, tt := range legacy {
		got, err := c.Resolve("m", tt.header, true)
		if err != nil {
			t.Fatalf("Resolve(%q): %v", tt.header, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Resolve(%q) (-want +got):\n%s", tt.header, diff)
		}
	}
	if _, err := c.Resolve("m", "sticky", true); !errors.Is(err, ErrUnknownAlgorithm) {
		t.Errorf("permissive unknown header: %v, want ErrUnknownAlgorithm", err)
	}
}

// TestResolveExplicitStaysRestrictive checks that an explicit config, even an empty one,
// lets a header select only the algorithms it lists and the default's own.
func TestResolveExplicitStaysRestrictive(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{}`, `{"default":"power-of-n"}`, `{"default":"power-of-n","request_algorithms":{}}`} {
		c := mustParse(t, doc)
		if c.Permissive {
			t.Errorf("Parse(%s) is permissive", doc)
		}
		for _, a := range Algorithms()[1:] {
			if _, err := c.Resolve("m", a.String(), true); !errors.Is(err, ErrUnavailableAlgorithm) {
				t.Errorf("Parse(%s).Resolve(%v) error = %v, want ErrUnavailableAlgorithm", doc, a, err)
			}
		}
		if got, err := c.Resolve("m", "power_of_n", true); err != nil || got.Algorithm != PowerOfN {
			t.Errorf("Parse(%s).Resolve(power_of_n) = %v, %v; want the default", doc, got, err)
		}
	}
}

// TestModelEntry checks that a model gets its own definition, matched by exact id, else the
// default.
func TestModelEntry(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"random","models":{"model-a":"wait-and-widen","Model-B":"pulsar"}}`)
	tests := []struct{ model, want string }{
		{"model-a", "wait-and-widen"},
		{"Model-B", "pulsar"},
		{"model-b", "random"}, // model ids match exactly
		{"", "random"},
	}
	for _, tt := range tests {
		if got := c.ModelEntry(tt.model).Algorithm.String(); got != tt.want {
			t.Errorf("ModelEntry(%q) = %s, want %s", tt.model, got, tt.want)
		}
	}
}

func TestNilConfig(t *testing.T) {
	t.Parallel()
	var c *Config
	if got := c.ModelEntry("m"); !cmp.Equal(got, DefaultEntry(PowerOfN)) {
		t.Errorf("nil ModelEntry = %+v", got)
	}
	if got, err := c.Resolve("m", "pulsar", true); err != nil || !cmp.Equal(got, DefaultEntry(Pulsar)) {
		t.Errorf("nil Resolve = %+v, %v", got, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("nil Validate = %v", err)
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	want := &Config{Default: DefaultEntry(PowerOfN), Permissive: true}
	got := Default()
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("Default() (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := &Config{
		Default:           with(PowerOfN, func(e *Entry) { e.SampleCount = 0 }),
		RequestAlgorithms: map[Algorithm]Entry{Random: DefaultEntry(Pulsar), 9: DefaultEntry(Random), 7: DefaultEntry(Random)},
		Models: map[string]Model{
			"b": {Entry: DefaultEntry(Random), RequestAlgorithms: map[Algorithm]Entry{
				WaitAndWiden: with(WaitAndWiden, func(e *Entry) { e.AffinityInputScale = 2 }),
			}},
			"a": {Entry: with(Pulsar, func(e *Entry) { e.Comparator = load.ComparatorTTFT })},
		},
	}
	want := []string{
		`default: power-of-n sample_count must be between 1 and 64`,
		`request_algorithms key random does not match its algorithm pulsar`,
		`request_algorithms key algorithm(7) is not an algorithm`,
		`request_algorithms key algorithm(9) is not an algorithm`,
		`models["a"]: comparator is not supported for pulsar`,
		`models["b"].request_algorithms["wait-and-widen"]: cache_affinity_input_tokens_scale must be between 0.0 and 1.0`,
	}
	if diff := cmp.Diff(want, problems(c.Validate())); diff != "" {
		t.Errorf("Validate() (-want +got):\n%s", diff)
	}
}
