package lbconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/internal/echo"
)

// Routing expressions: an x-routing-method value of the form
//
//	<method>;<field>=<value>;<field>=<value>...
//
// selects the method as a plain name does and overrides some of its settings for this one
// request. The syntax is a Structured Field Item with Parameters (RFC 8941): the method is
// a token, each parameter a lower-case key with an integer, a decimal (at most three
// fractional digits), a quoted string, a token or a boolean (?1, ?0; a key alone means ?1).
// Keys are the lb-config fields of the method's detailed entry.

// Bounds of a routing expression.
const (
	MaxExpressionBytes        = 1024 // longest expression
	MaxExpressionParams       = 32   // most parameters
	MaxExpressionVirtualNodes = 1024 // largest cache_affinity_virtual_nodes in an expression
)

// ExpressionClass says why a routing expression was refused; the gateway answers 400 with
// the class as the error code.
type ExpressionClass string

// The classes of refused expressions.
const (
	// ExprMalformed: not a token with parameters (bad syntax, a list, too long, too many
	// parameters, a parameter given twice).
	ExprMalformed ExpressionClass = "malformed_expression"
	// ExprUnknownMethod: the method is no algorithm.
	ExprUnknownMethod ExpressionClass = "unknown_method"
	// ExprUnavailable: the method is not allow-listed for the request's model.
	ExprUnavailable ExpressionClass = "unavailable"
	// ExprUnknownParameter: the key is no setting of any algorithm.
	ExprUnknownParameter ExpressionClass = "unknown_parameter"
	// ExprNotApplicable: the key is a setting of another algorithm.
	ExprNotApplicable ExpressionClass = "not_applicable"
	// ExprInvalidValue: the value has the wrong type or is out of range.
	ExprInvalidValue ExpressionClass = "invalid_value"
	// ExprInertValue: the value changes nothing (it is the method's configured value, or
	// the method ignores the setting).
	ExprInertValue ExpressionClass = "inert_value"
	// ExprInertCombination: the setting has no effect with the method's other settings
	// (an affinity setting without an affinity group, one queue-time bound without the
	// other).
	ExprInertCombination ExpressionClass = "inert_combination"
)

// ExpressionClasses returns every class of refused expressions, in the order declared.
func ExpressionClasses() []ExpressionClass {
	return []ExpressionClass{
		ExprMalformed, ExprUnknownMethod, ExprUnavailable, ExprUnknownParameter,
		ExprNotApplicable, ExprInvalidValue, ExprInertValue, ExprInertCombination,
	}
}

// ErrInvalidExpression is the class of refused routing expressions other than an unknown
// or unavailable method.
var ErrInvalidExpression = errors.New("invalid routing expression")

// ExpressionError is a refused routing expression. It unwraps to ErrUnknownAlgorithm
// (ExprUnknownMethod), ErrUnavailableAlgorithm (ExprUnavailable) or ErrInvalidExpression.
type ExpressionError struct {
	Value string          // the header value as received
	Class ExpressionClass // why it was refused
	Param string          // the parameter at fault ("" for the whole expression)
	Msg   string          // what is wrong
}

// Error names the parameter and the problem.
func (e *ExpressionError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("routing expression %s: %s: %s", echo.Quote(e.Value), e.Param, e.Msg)
	}
	return fmt.Sprintf("routing expression %s: %s", echo.Quote(e.Value), e.Msg)
}

// Unwrap returns the error class.
func (e *ExpressionError) Unwrap() error {
	switch e.Class {
	case ExprUnknownMethod:
		return ErrUnknownAlgorithm
	case ExprUnavailable:
		return ErrUnavailableAlgorithm
	default:
		return ErrInvalidExpression
	}
}

// IsExpression reports whether an x-routing-method value is a routing expression (it
// has parameters) rather than a plain method name.
func IsExpression(value string) bool { return strings.IndexByte(value, ';') >= 0 }

// exprParam is one parsed parameter: its key and its value as JSON.
type exprParam struct {
	key   string
	value json.RawMessage
}

// parseExpression splits an expression into its method token and parameters.
func parseExpression(value string) (string, []exprParam, *ExpressionError) {
	fail := func(format string, args ...any) (string, []exprParam, *ExpressionError) {
		return "", nil, &ExpressionError{Value: value, Class: ExprMalformed, Msg: fmt.Sprintf(format, args...)}
	}
	if len(value) > MaxExpressionBytes {
		return fail("longer than %d bytes", MaxExpressionBytes)
	}
	s := strings.Trim(value, " ")
	if strings.IndexByte(s, ',') >= 0 && !inString(s, strings.IndexByte(s, ',')) {
		return fail("a list of methods is not allowed (one method per request)")
	}
	p := sfParser{s: s}
	method, ok := p.token()
	if !ok {
		return fail("the method must be a token (a letter, then letters, digits or - _ . : /)")
	}
	var params []exprParam
	for !p.done() {
		if !p.eat(';') {
			return fail("unexpected %q after %s (parameters are ;key=value)", p.s[p.i], p.s[:p.i])
		}
		p.spaces()
		key, ok := p.key()
		if !ok {
			return fail("a parameter key must start with a lower-case letter and hold only a-z 0-9 _ - . *")
		}
		if slices.ContainsFunc(params, func(q exprParam) bool { return q.key == key }) {
			return fail("parameter %s given twice", key)
		}
		raw := json.RawMessage("true")
		if p.eat('=') {
			v, err := p.bareItem()
			if err != "" {
				return "", nil, &ExpressionError{Value: value, Class: ExprMalformed, Param: key, Msg: err}
			}
			raw = v
		}
		params = append(params, exprParam{key: key, value: raw})
		if len(params) > MaxExpressionParams {
			return fail("more than %d parameters", MaxExpressionParams)
		}
	}
	return method, params, nil
}

// inString reports whether byte i of s is inside a quoted string.
func inString(s string, i int) bool {
	in := false
	for j := 0; j < i; j++ {
		switch {
		case in && s[j] == '\\':
			j++
		case s[j] == '"':
			in = !in
		}
	}
	return in
}

// sfParser reads the parts of an RFC 8941 Item with Parameters.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *sfParser) spaces() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func isAlpha(c byte) bool   { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }

// isKeyChar is a character of a parameter key after the first.
func isKeyChar(c byte) bool {
	return isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

// isTChar is RFC 9110's tchar plus the ':' and '/' sf-tokens allow.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

func (p *sfParser) token() (string, bool) {
	start := p.i
	if p.done() || (!isAlpha(p.s[p.i]) && p.s[p.i] != '*') {
		return "", false
	}
	for p.i++; p.i < len(p.s) && isTChar(p.s[p.i]); p.i++ {
	}
	return p.s[start:p.i], true
}

func (p *sfParser) key() (string, bool) {
	start := p.i
	if p.done() || (!isLCAlpha(p.s[p.i]) && p.s[p.i] != '*') {
		return "", false
	}
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if !isKeyChar(c) {
			break
		}
	}
	return p.s[start:p.i], true
}

// bareItem reads a value and returns it as JSON, or a description of what is wrong.
func (p *sfParser) bareItem() (json.RawMessage, string) {
	if p.done() {
		return nil, "missing value after ="
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			v := p.s[p.i+1] == '1'
			p.i += 2
			return json.RawMessage(strconv.FormatBool(v)), ""
		}
		return nil, "a boolean is ?1 or ?0"
	case isAlpha(c) || c == '*':
		tok, _ := p.token()
		b, _ := json.Marshal(tok)
		return b, ""
	case c == ':':
		return nil, "byte sequences are not accepted"
	default:
		return nil, fmt.Sprintf("unexpected %q (want a number, \"string\", token or ?1/?0)", c)
	}
}

func (p *sfParser) number() (json.RawMessage, string) {
	start := p.i
	p.eat('-')
	intDigits, fracDigits, dot := 0, 0, false
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case isDigit(c) && dot:
			fracDigits++
		case isDigit(c):
			intDigits++
		case c == '.' && !dot:
			dot = true
		default:
			goto end
		}
	}
end:
	text := p.s[start:p.i]
	switch {
	case intDigits == 0:
		return nil, fmt.Sprintf("%q is not a number", text)
	case !dot && intDigits > 15:
		return nil, "an integer has at most 15 digits"
	case dot && intDigits > 12:
		return nil, "a decimal has at most 12 integer digits"
	case dot && fracDigits == 0:
		return nil, fmt.Sprintf("%q: a decimal needs digits after the point", text)
	case dot && fracDigits > 3:
		return nil, fmt.Sprintf("%q: a decimal has at most 3 fractional digits (quote longer ones)", text)
	}
	return json.RawMessage(text), ""
}

func (p *sfParser) str() (json.RawMessage, string) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return nil, `a string may only escape \" and \\`
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			s := b.String()
			if f, err := strconv.ParseFloat(s, 64); err == nil && strings.TrimSpace(s) == s {
				// A quoted number (a decimal with more fractional digits).
				return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64)), ""
			}
			out, _ := json.Marshal(s)
			return out, ""
		case c < 0x20 || c > 0x7e:
			return nil, "a string holds only printable ASCII"
		default:
			b.WriteByte(c)
		}
	}
	return nil, "unterminated string"
}

// expressionOnly are detailed-entry fields an expression cannot set.
var expressionOnly = map[string]string{
	fieldAlgorithm:         "the method is the expression's token",
	fieldRequestAlgorithms: "request_algorithms belongs in the lb-config file",
}

// ignoredBy lists, per algorithm, the fields it accepts but does not use.
var ignoredBy = map[Algorithm][]string{
	PulsarWaitAndWiden: {"cache_affinity_virtual_nodes"},
}

// affinityFields need an affinity group (cache_affinity_backend_selection_count > 0) on
// wait-and-widen.
var affinityFields = []string{
	"cache_affinity_virtual_nodes", "cache_affinity_wait_ms", "cache_affinity_input_tokens_scale",
	"last_cluster_affinity", "session_affinity_ttl_ms", "session_table_size",
}

// applyExpression applies params to base (the definition the method resolves to) and
// checks the result.
func applyExpression(value string, base Entry, params []exprParam) (Entry, *ExpressionError) {
	fail := func(class ExpressionClass, key, format string, args ...any) (Entry, *ExpressionError) {
		return Entry{}, &ExpressionError{Value: value, Class: class, Param: key, Msg: fmt.Sprintf(format, args...)}
	}
	a := base.Algorithm
	d := entryDecoder{e: base, floorSet: base.HasQueueSLO, ceilSet: base.HasQueueSLO}
	for _, prm := range params {
		if why, ok := expressionOnly[prm.key]; ok {
			return fail(ExprUnknownParameter, prm.key, "not an expression parameter: %s", why)
		}
		if !supports(a, prm.key) {
			if slices.ContainsFunc(Algorithms(), func(o Algorithm) bool { return supports(o, prm.key) }) {
				return fail(ExprNotApplicable, prm.key, "not a setting of %s", a)
			}
			return fail(ExprUnknownParameter, prm.key, "no algorithm has this setting")
		}
		if slices.Contains(ignoredBy[a], prm.key) {
			return fail(ExprInertValue, prm.key, "%s does not use this setting", a)
		}
		before := d.e
		if err := d.set(prm.key, prm.value); err != nil {
			return fail(ExprInvalidValue, prm.key, "%v", err)
		}
		if prm.key == "cache_affinity_virtual_nodes" && d.e.VirtualNodes > MaxExpressionVirtualNodes {
			return fail(ExprInvalidValue, prm.key, "at most %d in an expression", MaxExpressionVirtualNodes)
		}
		if d.e == before && prm.key != fieldQueueFloor && prm.key != fieldQueueCeil {
			return fail(ExprInertValue, prm.key, "%s is already the method's setting", string(prm.value))
		}
	}
	if d.floorSet != d.ceilSet {
		key, other := fieldQueueFloor, fieldQueueCeil
		if d.ceilSet {
			key, other = other, key
		}
		return fail(ExprInertCombination, key, "has no effect without %s", other)
	}
	d.e.HasQueueSLO = d.floorSet && d.ceilSet
	if d.e == base {
		return fail(ExprInertValue, "", "the parameters change none of the method's settings")
	}
	if a == WaitAndWiden && d.e.SelectionCount == 0 {
		for _, prm := range params {
			if slices.Contains(affinityFields, prm.key) {
				return fail(ExprInertCombination, prm.key, "has no effect without cache_affinity_backend_selection_count")
			}
		}
	}
	if errs := d.e.problems(); len(errs) > 0 {
		return fail(ExprInvalidValue, "", "%v", errors.Join(errs...))
	}
	d.e.FromExpression = true
	return d.e, nil
}

// resolveExpression resolves a routing expression for model (see Resolve).
func (c *Config) resolveExpression(model, value string) (Entry, error) {
	method, params, perr := parseExpression(value)
	if perr != nil {
		return Entry{}, perr
	}
	base, err := c.resolveName(model, method)
	if err != nil {
		var he *HeaderError
		class := ExprUnknownMethod
		if errors.As(err, &he) && he.Reason == ReasonNotAllowed {
			class = ExprUnavailable
		}
		return Entry{}, &ExpressionError{Value: value, Class: class, Msg: strings.TrimPrefix(err.Error(), "x-routing-method ")}
	}
	e, xerr := applyExpression(value, base, params)
	if xerr != nil {
		return Entry{}, xerr
	}
	return e, nil
}
