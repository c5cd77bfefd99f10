package lbconfig

import (
	"errors"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/engines/load"
)

// A routing expression overrides settings of the method's definition for one request:
// the model's own definition when the method is its algorithm, else the allow-listed one.
func TestResolveExpression(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"power-of-n",
		"request_algorithms":{"wait-and-widen":{"algorithm":"wait-and-widen","cache_affinity_backend_selection_count":2}},
		"models":{"m":{"algorithm":"pulsar-wait-and-widen","max_queue_time_floor_ms":100,"max_queue_time_ceil_ms":300}}}`)
	base := with(WaitAndWiden, func(e *Entry) { e.SelectionCount = 2 })
	tests := []struct {
		model, value string
		want         func(*Entry)
		from         Entry
	}{
		{"x", "wait-and-widen;n=3", func(e *Entry) { e.N = 3 }, base},
		{"x", " Wait_And_Widen;n=3 ", func(e *Entry) { e.N = 3 }, base},
		{"x", "wait-and-widen;cache_affinity_wait_ms=150;cache_affinity_input_tokens_scale=0.1", func(e *Entry) {
			e.AffinityWait, e.AffinityInputScale = 150*time.Millisecond, 0.1
		}, base},
		{"x", `wait-and-widen;cache_affinity_input_tokens_scale="0.0625"`, func(e *Entry) { e.AffinityInputScale = 0.0625 }, base},
		{"x", "wait-and-widen;comparator=queue-time;seed=\"s 1\"", func(e *Entry) { e.Comparator, e.Seed = load.ComparatorQueueTime, "s 1" }, base},
		{"x", "wait-and-widen;ignore_queue_time", func(e *Entry) { e.IgnoreQueueTime = true }, base},
		{"x", "wait-and-widen;prefill_wait=?0", func(e *Entry) { e.PrefillWait = false }, base},
		{"x", "wait-and-widen;max_queue_time_floor_ms=50;max_queue_time_ceil_ms=200", func(e *Entry) {
			e.HasQueueSLO, e.QueueFloor, e.QueueCeil = true, 50*time.Millisecond, 200*time.Millisecond
		}, base},
		// The model's own definition: one bound of its queue SLO alone is enough.
		{"m", "pulsar-wait-and-widen;max_queue_time_ceil_ms=500", func(e *Entry) { e.QueueCeil = 500 * time.Millisecond }, mustParse(t, `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","max_queue_time_floor_ms":100,"max_queue_time_ceil_ms":300}}}`).Models["m"].Entry},
	}
	for _, tt := range tests {
		got, err := c.Resolve(tt.model, tt.value, true)
		if err != nil {
			t.Errorf("%q: %v", tt.value, err)
			continue
		}
		want := tt.from
		tt.want(&want)
		want.FromExpression = true
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tt.value, diff)
		}
	}
}

// Refused expressions: the class and the parameter at fault.
func TestResolveExpressionErrors(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"power-of-n","request_algorithms":{"wait-and-widen":"wait-and-widen","pulsar-wait-and-widen":"pulsar-wait-and-widen"}}`)
	tests := []struct {
		value string
		class ExpressionClass
		param string
		is    error
	}{
		{"wait-and-widen;", ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen;n", ExprInvalidValue, "n", ErrInvalidExpression},
		{"wait-and-widen;N=2", ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen;n=2,random", ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen;n=2;n=3", ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen;cache_affinity_input_tokens_scale=0.0625", ExprMalformed, "cache_affinity_input_tokens_scale", ErrInvalidExpression},
		{"wait-and-widen;seed=\"unterminated", ExprMalformed, "seed", ErrInvalidExpression},
		{"wait-and-widen;n=:AAA=:", ExprMalformed, "n", ErrInvalidExpression},
		{"1wait;n=2", ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen;n=2 x", ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen" + strings.Repeat(";a", 600), ExprMalformed, "", ErrInvalidExpression},
		{"wait-and-widen;" + strings.Repeat("a", MaxExpressionBytes), ExprMalformed, "", ErrInvalidExpression},
		{"sticky;n=2", ExprUnknownMethod, "", ErrUnknownAlgorithm},
		{"round-robin;n=2", ExprUnavailable, "", ErrUnavailableAlgorithm},
		{"wait-and-widen;colour=1", ExprUnknownParameter, "colour", ErrInvalidExpression},
		{"wait-and-widen;algorithm=random", ExprUnknownParameter, "algorithm", ErrInvalidExpression},
		{"wait-and-widen;sample_count=3", ExprNotApplicable, "sample_count", ErrInvalidExpression},
		{"wait-and-widen;n=-1", ExprInvalidValue, "n", ErrInvalidExpression},
		{"wait-and-widen;n=\"two\"", ExprInvalidValue, "n", ErrInvalidExpression},
		{"wait-and-widen;cache_affinity_backend_selection_count=1;cache_affinity_input_tokens_scale=1.5", ExprInvalidValue, "", ErrInvalidExpression},
		{"wait-and-widen;cache_affinity_backend_selection_count=1;cache_affinity_virtual_nodes=2000", ExprInvalidValue, "cache_affinity_virtual_nodes", ErrInvalidExpression},
		{"wait-and-widen;comparator=fastest", ExprInvalidValue, "comparator", ErrInvalidExpression},
		{"wait-and-widen;n=2", ExprInertValue, "n", ErrInvalidExpression},
		{"wait-and-widen;ignore_queue_time=?0", ExprInertValue, "ignore_queue_time", ErrInvalidExpression},
		{"pulsar-wait-and-widen;cache_affinity_virtual_nodes=8", ExprInertValue, "cache_affinity_virtual_nodes", ErrInvalidExpression},
		{"wait-and-widen;cache_affinity_wait_ms=100", ExprInertCombination, "cache_affinity_wait_ms", ErrInvalidExpression},
		{"wait-and-widen;max_queue_time_floor_ms=100", ExprInertCombination, fieldQueueFloor, ErrInvalidExpression},
	}
	for _, tt := range tests {
		_, err := c.Resolve("m", tt.value, true)
		var xe *ExpressionError
		if !errors.As(err, &xe) {
			t.Errorf("%.60q: %v, want an *ExpressionError", tt.value, err)
			continue
		}
		if xe.Class != tt.class || xe.Param != tt.param || !errors.Is(err, tt.is) {
			t.Errorf("%.60q: class %s, param %q (%v); want %s, %q, %v", tt.value, xe.Class, xe.Param, err, tt.class, tt.param, tt.is)
		}
	}
}

// More than 32 parameters is malformed; 32 distinct ones are parsed.
func TestExpressionParameterLimit(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("wait-and-widen")
	for i := range MaxExpressionParams + 1 {
		b.WriteString(";k")
		b.WriteString(strings.Repeat("a", i+1))
	}
	_, params, err := parseExpression(b.String())
	if err == nil || err.Class != ExprMalformed || !strings.Contains(err.Msg, "more than 32") {
		t.Errorf("33 parameters: %v (%d parsed)", err, len(params))
	}
	if _, params, err := parseExpression(b.String()[:strings.LastIndexByte(b.String(), ';')]); err != nil || len(params) != MaxExpressionParams {
		t.Errorf("32 parameters: %v, %d parsed", err, len(params))
	}
}

// A plain name is not an expression and resolves as before (no FromExpression).
func TestPlainNameIsNoExpression(t *testing.T) {
	t.Parallel()
	e, err := Default().Resolve("m", "wait_and_widen", true)
	if err != nil || e.FromExpression || e.Algorithm != WaitAndWiden {
		t.Errorf("plain name: %+v, %v", e, err)
	}
}

// Entries lists every definition a model's requests can reach by name.
func TestEntries(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"default":"random","request_algorithms":{"pulsar":"pulsar"},
		"models":{"m":{"algorithm":"round-robin","request_algorithms":{"wait-and-widen":"wait-and-widen"}}}}`)
	has := func(es []Entry, a Algorithm) bool {
		for _, e := range es {
			if e.Algorithm == a {
				return true
			}
		}
		return false
	}
	m, other := c.Entries("m"), c.Entries("x")
	if !has(m, RoundRobin) || !has(m, WaitAndWiden) || !has(m, Pulsar) || has(m, Random) || len(m) != 3 {
		t.Errorf("model m: %v", m)
	}
	if !has(other, Random) || !has(other, Pulsar) || has(other, WaitAndWiden) || len(other) != 2 {
		t.Errorf("model x: %v", other)
	}
	if n := len(Default().Entries("m")); n != 1+len(Algorithms()) {
		t.Errorf("permissive default: %d entries", n)
	}
}

// ExpressionClasses lists every ExpressionClass constant declared in expression.go, once:
// the gateway's error table is checked against it.
func TestExpressionClassesComplete(t *testing.T) {
	t.Parallel()
	f, err := goparser.ParseFile(token.NewFileSet(), "expression.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []ExpressionClass
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "ExpressionClass" {
			for _, v := range vs.Values {
				lit, _ := v.(*ast.BasicLit)
				if lit == nil {
					t.Fatalf("class %v is not a string literal", vs.Names)
				}
				s, _ := strconv.Unquote(lit.Value)
				declared = append(declared, ExpressionClass(s))
			}
		}
		return true
	})
	if diff := cmp.Diff(declared, ExpressionClasses()); diff != "" || len(declared) < 8 {
		t.Errorf("ExpressionClasses (-declared +listed):\n%s", diff)
	}
}
