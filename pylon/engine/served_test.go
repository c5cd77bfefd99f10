package engine_test

import (
	"testing"

	"github.com/switchyard/switchyard/pylon/engine"
	"github.com/switchyard/switchyard/pylon/stats"
)

func TestMatchModel(t *testing.T) {
	vllm := []engine.ServedModel{
		{ID: "llama", Root: "/models/llama-8b"},
		{ID: "llama-8b", Root: "/models/llama-8b"},
		{ID: "sql-lora", Root: "/adapters/sql", Parent: "llama-8b"},
		{ID: "other", Root: "/models/other"},
	}
	one := map[string]stats.EngineMetrics{"llama-8b": {}}
	two := map[string]stats.EngineMetrics{"llama-8b": {}, "other": {}}
	cases := []struct {
		name     string
		model    string
		byEngine map[string]stats.EngineMetrics
		served   []engine.ServedModel
		src, how string
	}{
		{"own name", "other", two, nil, "other", engine.MatchExact},
		{"same root", "llama", two, vllm, "llama-8b", engine.MatchAlias},
		{"adapter of a served model", "sql-lora", two, vllm, "llama-8b", engine.MatchAlias},
		{"only entry", "unknown", one, nil, "llama-8b", engine.MatchOnly},
		{"no fit among several", "unknown", two, vllm, "", ""},
		{"empty scrape", "llama", nil, vllm, "", ""},
	}
	for _, c := range cases {
		src, how := engine.MatchModel(c.model, c.byEngine, c.served)
		if src != c.src || how != c.how {
			t.Errorf("%s: MatchModel(%q) = %q, %q; want %q, %q", c.name, c.model, src, how, c.src, c.how)
		}
	}
}
