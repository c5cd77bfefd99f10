package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrInvalid is the class of every scenario decoding and validation error.
var ErrInvalid = errors.New("invalid scenario")

var unknownFieldRE = regexp.MustCompile(`field (\S+) not found in type \S+`)

// Parse decodes one scenario document strictly (unknown fields are errors naming the
// field and its line) and validates it. The error wraps ErrInvalid and joins one message
// per problem.
func Parse(data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlMessage(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrInvalid)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// yamlMessage turns a yaml.v3 error into one line, rewriting "field x not found in type
// T" as `unknown field "x"`.
func yamlMessage(err error) string {
	var te *yaml.TypeError
	var parts []string
	if errors.As(err, &te) {
		parts = te.Errors
	} else {
		parts = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, unknownFieldRE.ReplaceAllString(strings.TrimSpace(p), `unknown field "$1"`))
	}
	return strings.Join(out, "; ")
}

// OneLine renders an error (possibly joined) on one line, for CLI messages.
func OneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
