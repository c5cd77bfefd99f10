package lbconfig

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/switchyard/switchyard/internal/echo"
)

// Algorithm is one of the six built-in load-balancing algorithms.
type Algorithm uint8

// The built-in algorithms, in their canonical order.
const (
	PowerOfN Algorithm = iota
	WaitAndWiden
	RoundRobin
	Random
	Pulsar
	PulsarWaitAndWiden
)

// numAlgorithms is the number of built-in algorithms.
const numAlgorithms = int(PulsarWaitAndWiden) + 1

var algorithmNames = [numAlgorithms]string{
	PowerOfN:           "power-of-n",
	WaitAndWiden:       "wait-and-widen",
	RoundRobin:         "round-robin",
	Random:             "random",
	Pulsar:             "pulsar",
	PulsarWaitAndWiden: "pulsar-wait-and-widen",
}

// aliases maps every accepted spelling that is not canonical to its algorithm.
var aliases = map[string]Algorithm{
	"power-of-two":       PowerOfN,
	"powerOf2":           PowerOfN,
	"powerOfN":           PowerOfN,
	"powerof2":           PowerOfN,
	"powerofn":           PowerOfN,
	"groq-multiregion":   WaitAndWiden,
	"pulsar-multiregion": PulsarWaitAndWiden,
}

// String returns the canonical kebab-case name, the one used in metrics and logs.
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

func (a Algorithm) valid() bool { return int(a) < numAlgorithms }

// Algorithms returns all six algorithms in canonical order.
func Algorithms() []Algorithm {
	all := make([]Algorithm, numAlgorithms)
	for i := range all {
		all[i] = Algorithm(i)
	}
	return all
}

// ErrUnknownAlgorithm is the class of errors for names that are no algorithm at all
// (including a blank or non-UTF-8 x-routing-method header).
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// ErrUnavailableAlgorithm is the class of errors for a known algorithm that the
// configuration does not allow for the request's model.
var ErrUnavailableAlgorithm = errors.New("algorithm not available")

// ParseAlgorithm resolves a name as written in lb-config.json: a canonical name or one of
// the aliases power-of-two, powerOf2, powerOfN, powerof2, powerofn (power-of-n),
// groq-multiregion (wait-and-widen) and pulsar-multiregion (pulsar-wait-and-widen). The
// match is exact; header spellings go through ParseRoutingMethod. The error wraps
// ErrUnknownAlgorithm and quotes the name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, canonical := range algorithmNames {
		if name == canonical {
			return Algorithm(a), nil
		}
	}
	if a, ok := aliases[name]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnknownAlgorithm, name, strings.Join(algorithmNames[:], ", "))
}

// HeaderReason says why an x-routing-method value was refused.
type HeaderReason string

// The reasons of a HeaderError; the first three are ErrUnknownAlgorithm, the last is
// ErrUnavailableAlgorithm.
const (
	ReasonBlank       HeaderReason = "blank"
	ReasonInvalidUTF8 HeaderReason = "invalid UTF-8"
	ReasonUnknown     HeaderReason = "unknown"
	ReasonNotAllowed  HeaderReason = "not allow-listed"
)

// HeaderError is a refused x-routing-method value. It unwraps to ErrUnknownAlgorithm or
// ErrUnavailableAlgorithm; the gateway answers 400 for both.
type HeaderError struct {
	Value  string       // the header value as received
	Name   string       // the normalised spelling (trimmed, lower case, '_' → '-')
	Model  string       // the request's model (set for ReasonNotAllowed)
	Reason HeaderReason // why it was refused
}

// Error describes the refused value and the reason.
func (e *HeaderError) Error() string {
	switch e.Reason {
	case ReasonBlank:
		return "x-routing-method is blank"
	case ReasonInvalidUTF8:
		return fmt.Sprintf("x-routing-method %s is not valid UTF-8", echo.Quote(e.Value))
	case ReasonNotAllowed:
		return fmt.Sprintf("x-routing-method %s: algorithm %s is not allow-listed for model %s", echo.Quote(e.Value), e.Name, echo.Quote(e.Model))
	default:
		return fmt.Sprintf("x-routing-method %s: unknown algorithm", echo.Quote(e.Value))
	}
}

// Unwrap returns the error class: ErrUnavailableAlgorithm for ReasonNotAllowed, else
// ErrUnknownAlgorithm.
func (e *HeaderError) Unwrap() error {
	if e.Reason == ReasonNotAllowed {
		return ErrUnavailableAlgorithm
	}
	return ErrUnknownAlgorithm
}

// NormalizeRoutingMethod applies the header spelling rules: surrounding white space is
// trimmed, letters are lower-cased and '_' becomes '-'.
func NormalizeRoutingMethod(value string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(value)), "_", "-")
}

// ParseRoutingMethod resolves an x-routing-method header value to an algorithm and its
// normalised spelling (so "pulsar_wait_and_widen" and " PowerOf2 " are accepted). Blank,
// non-UTF-8 and unknown values give a *HeaderError wrapping ErrUnknownAlgorithm.
func ParseRoutingMethod(value string) (Algorithm, string, error) {
	if !utf8.ValidString(value) {
		return 0, "", &HeaderError{Value: value, Reason: ReasonInvalidUTF8}
	}
	name := NormalizeRoutingMethod(value)
	if name == "" {
		return 0, "", &HeaderError{Value: value, Reason: ReasonBlank}
	}
	a, err := ParseAlgorithm(name)
	if err != nil {
		return 0, name, &HeaderError{Value: value, Name: name, Reason: ReasonUnknown}
	}
	return a, name, nil
}
