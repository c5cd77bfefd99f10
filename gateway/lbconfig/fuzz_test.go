package lbconfig

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that every configuration it accepts is
// valid and resolvable.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `{"default":"random"}`, `{"default":"sticky"}`,
		referenceExample, resolveConfig,
		`{"models":{"m":{"algorithm":"power-of-n","sample_count":65}}}`,
		`{"models":{"m":{"algorithm":"pulsar-wait-and-widen","comparator":null}}}`,
		`{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_input_tokens_scale":1e-400,"n":0}}}`,
		`{"request_algorithms":{"random":{"algorithm":"random","request_algorithms":{"random":"random"}}}}`,
		`{"models":{"m":"random","m":"random"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a config and an error: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid config: %v\n%s", err, data)
		}
		if c.Permissive {
			t.Fatalf("Parse returned a permissive config")
		}
		for id := range c.Models {
			for _, a := range Algorithms() {
				e, err := c.Resolve(id, a.String(), true)
				if err == nil {
					if e.Algorithm != a {
						t.Fatalf("Resolve(%q, %v) = %v", id, a, e.Algorithm)
					}
				} else if !errors.Is(err, ErrUnavailableAlgorithm) {
					t.Fatalf("Resolve(%q, %v): %v", id, a, err)
				}
			}
		}
	})
}

// FuzzResolve checks the x-routing-method handling against the permissive default and
// an explicit configuration.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"", " ", "power-of-n", "POWER_OF_TWO", " PowerOf2 ", "groq-multiregion", "pulsar_multiregion",
		"sticky", "random;x=1", "wait-and-widen;n=3", "pulsar_wait_and_widen;cache_affinity_backend_selection_count=2;x", "\xff", "round\u00a0robin", "ＰＵＬＳＡＲ",
	} {
		f.Add("model-a", seed)
	}
	explicit, err := Parse([]byte(resolveConfig))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, model, header string) {
		for _, c := range []*Config{Default(), explicit} {
			e, err := c.Resolve(model, header, true)
			if err != nil && IsExpression(header) {
				var xe *ExpressionError
				if !errors.As(err, &xe) || xe.Value != header || xe.Class == "" {
					t.Fatalf("Resolve(%q, %q) error %v is not an ExpressionError for the value", model, header, err)
				}
				continue
			}
			if err != nil {
				var he *HeaderError
				if !errors.As(err, &he) || he.Value != header {
					t.Fatalf("Resolve(%q, %q) error %v is not a HeaderError for the value", model, header, err)
				}
				unknown, unavailable := errors.Is(err, ErrUnknownAlgorithm), errors.Is(err, ErrUnavailableAlgorithm)
				if unknown == unavailable {
					t.Fatalf("Resolve(%q, %q) error %v must be exactly one class", model, header, err)
				}
				if unavailable && c.Permissive {
					t.Fatalf("permissive Resolve(%q, %q) refused a known algorithm", model, header)
				}
				continue
			}
			method := header
			if IsExpression(header) {
				if !e.FromExpression {
					t.Fatalf("Resolve(%q, %q) = %+v, not marked as an expression's", model, header, e)
				}
				method = header[:strings.IndexByte(header, ';')]
			}
			a, _, perr := ParseRoutingMethod(method)
			if perr != nil || e.Algorithm != a {
				t.Fatalf("Resolve(%q, %q) = %v, but the header parses to %v, %v", model, header, e.Algorithm, a, perr)
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("Resolve(%q, %q) returned an invalid entry: %v", model, header, err)
			}
		}
	})
}
