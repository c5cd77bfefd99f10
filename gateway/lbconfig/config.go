package lbconfig

import (
	"errors"
	"fmt"
	"slices"
)

// Model is the configuration of one model id: its own algorithm definition plus the
// model-level request_algorithms, which replace same-named top-level entries for this
// model and inherit the rest.
type Model struct {
	Entry
	// RequestAlgorithms are the model-level x-routing-method overrides.
	RequestAlgorithms map[Algorithm]Entry
}

// Config is a decoded lb-config.json (or the permissive default when no file is given).
type Config struct {
	// Default is the definition for models without an entry in Models ("default": a
	// name with default settings).
	Default Entry
	// RequestAlgorithms are the definitions any model may select with x-routing-method.
	RequestAlgorithms map[Algorithm]Entry
	// Models maps exact model ids to their configuration.
	Models map[string]Model
	// Permissive allows every algorithm, with default settings, by header. Only Default()
	// sets it; a configuration file is an allowlist.
	Permissive bool
}

// Default returns the configuration used without --lb-config-path: power-of-n for every
// model, and every built-in algorithm selectable by header with default settings.
func Default() *Config {
	return &Config{
		Default:           DefaultEntry(PowerOfN),
		RequestAlgorithms: map[Algorithm]Entry{},
		Models:            map[string]Model{},
		Permissive:        true,
	}
}

// ModelEntry returns the configured definition for model, or Default when the model has
// no entry. A nil *Config behaves like Default().
func (c *Config) ModelEntry(model string) Entry {
	if c == nil {
		return DefaultEntry(PowerOfN)
	}
	if m, ok := c.Models[model]; ok {
		return m.Entry
	}
	return c.Default
}

// Resolve returns the definition that routes a request for model, given the
// x-routing-method header. Without the header it is ModelEntry(model). With it, the value
// is normalised (trimmed, lower-cased, '_' → '-', aliases resolved) to an algorithm N, and
// the first of these wins: the model's own definition when its algorithm is N; the
// model-level request_algorithms[N]; the top-level request_algorithms[N]; under the
// permissive default, DefaultEntry(N) named with the header's normalised spelling.
// Otherwise the error is a *HeaderError wrapping ErrUnavailableAlgorithm; blank, non-UTF-8
// and unknown values wrap ErrUnknownAlgorithm.
//
// A value with parameters is a routing expression (see IsExpression): its method resolves
// the same way and its parameters override that definition's settings; a refused
// expression is an *ExpressionError.
func (c *Config) Resolve(model, header string, headerPresent bool) (Entry, error) {
	if !headerPresent {
		return c.ModelEntry(model), nil
	}
	if IsExpression(header) {
		return c.resolveExpression(model, header)
	}
	return c.resolveName(model, header)
}

// resolveName resolves a plain x-routing-method name (see Resolve).
func (c *Config) resolveName(model, header string) (Entry, error) {
	a, name, err := ParseRoutingMethod(header)
	if err != nil {
		return Entry{}, err
	}
	if c == nil {
		c = Default()
	}
	m, hasModel := c.Models[model]
	if !hasModel {
		m.Entry = c.Default
	}
	if m.Algorithm == a {
		return m.Entry, nil
	}
	if e, ok := m.RequestAlgorithms[a]; ok {
		return e, nil
	}
	if e, ok := c.RequestAlgorithms[a]; ok {
		return e, nil
	}
	if c.Permissive {
		e := DefaultEntry(a)
		e.Name = name
		return e, nil
	}
	return Entry{}, &HeaderError{Value: header, Name: name, Model: model, Reason: ReasonNotAllowed}
}

// Entries returns every definition a request for model can resolve to by its model or an
// x-routing-method name (not a routing expression): the model's own, the model-level and
// top-level request_algorithms, and under the permissive default every algorithm's
// default definition. Entries may repeat.
func (c *Config) Entries(model string) []Entry {
	if c == nil {
		c = Default()
	}
	out := []Entry{c.ModelEntry(model)}
	overrides := c.Models[model].RequestAlgorithms
	for a := range overrides {
		out = append(out, overrides[a])
	}
	for a := range c.RequestAlgorithms {
		out = append(out, c.RequestAlgorithms[a])
	}
	if c.Permissive {
		for _, a := range Algorithms() {
			out = append(out, DefaultEntry(a))
		}
	}
	return out
}

// Validate checks a configuration built in code the way Parse checks a file: every
// definition passes Entry.Validate and every request_algorithms key equals the
// algorithm of its value. It returns errors.Join of one message per problem.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	var errs []error
	errs = appendPrefixed(errs, "default", c.Default.problems())
	errs = validateOverrides(errs, "", c.RequestAlgorithms)
	models := make([]string, 0, len(c.Models))
	for id := range c.Models {
		models = append(models, id)
	}
	slices.Sort(models)
	for _, id := range models {
		m := c.Models[id]
		path := modelPath(id)
		errs = appendPrefixed(errs, path, m.problems())
		errs = validateOverrides(errs, path, m.RequestAlgorithms)
	}
	return errors.Join(errs...)
}

func validateOverrides(errs []error, parent string, overrides map[Algorithm]Entry) []error {
	for _, a := range Algorithms() {
		e, ok := overrides[a]
		if !ok {
			continue
		}
		if e.Algorithm != a {
			errs = appendPrefixed(errs, parent, []error{keyMismatch(a.String(), e.Algorithm)})
		}
		errs = appendPrefixed(errs, overridePath(parent, a.String()), e.problems())
	}
	var invalid []Algorithm
	for a := range overrides {
		if !a.valid() {
			invalid = append(invalid, a)
		}
	}
	slices.Sort(invalid)
	for _, a := range invalid {
		errs = appendPrefixed(errs, parent, []error{fmt.Errorf("request_algorithms key %s is not an algorithm", a)})
	}
	return errs
}

func keyMismatch(key string, a Algorithm) error {
	return fmt.Errorf("request_algorithms key %s does not match its algorithm %s", key, a)
}
