package engine

import (
	"bytes"
	"errors"
	"math"
	"strconv"

	"github.com/switchyard/switchyard/pylon/stats"
)

// Label is one Prometheus label pair.
type Label struct{ Name, Value string }

// ErrBadExposition classifies malformed Prometheus text lines.
var ErrBadExposition = errors.New("invalid prometheus exposition line")

// ParseText walks Prometheus text exposition, calling fn for every sample. Comment and
// blank lines are skipped; a malformed line stops the walk with an error wrapping
// ErrBadExposition. labels is only valid during the call.
func ParseText(text []byte, fn func(name string, labels []Label, value float64)) error {
	var labels []Label
	for len(text) > 0 {
		var line []byte
		line, text, _ = bytes.Cut(text, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, rest := splitName(line)
		if name == "" {
			return ErrBadExposition
		}
		labels = labels[:0]
		if len(rest) > 0 && rest[0] == '{' {
			var err error
			labels, rest, err = parseLabels(rest[1:], labels)
			if err != nil {
				return err
			}
		}
		rest = bytes.TrimSpace(rest)
		valueText, _, _ := bytes.Cut(rest, []byte(" ")) // an optional timestamp follows
		v, err := strconv.ParseFloat(string(valueText), 64)
		if err != nil {
			return ErrBadExposition
		}
		fn(name, labels, v)
	}
	return nil
}

func splitName(line []byte) (name string, rest []byte) {
	i := 0
	for i < len(line) {
		c := line[i]
		if c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			i++
			continue
		}
		break
	}
	return string(line[:i]), line[i:]
}

func parseLabels(b []byte, out []Label) ([]Label, []byte, error) {
	for {
		b = bytes.TrimLeft(b, " ,")
		if len(b) == 0 {
			return out, nil, ErrBadExposition
		}
		if b[0] == '}' {
			return out, b[1:], nil
		}
		eq := bytes.IndexByte(b, '=')
		if eq <= 0 || eq+1 >= len(b) || b[eq+1] != '"' {
			return out, nil, ErrBadExposition
		}
		name := string(bytes.TrimSpace(b[:eq]))
		b = b[eq+2:]
		var val []byte
		closed := false
		for i := 0; i < len(b); i++ {
			if b[i] == '\\' && i+1 < len(b) {
				switch b[i+1] {
				case 'n':
					val = append(val, '\n')
				default:
					val = append(val, b[i+1])
				}
				i++
				continue
			}
			if b[i] == '"' {
				b, closed = b[i+1:], true
				break
			}
			val = append(val, b[i])
		}
		if !closed {
			return out, nil, ErrBadExposition
		}
		out = append(out, Label{Name: name, Value: string(val)})
	}
}

func label(labels []Label, name string) string {
	for _, l := range labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Dialects of --engine-metrics.
const (
	DialectVLLM   = "vllm"
	DialectSGLang = "sglang"
)

type metricNames struct {
	running, waiting, kvUsage, kvUsageOld, capacity, prompt, generation string
}

var dialects = map[string]metricNames{
	DialectVLLM: {
		running: "vllm:num_requests_running", waiting: "vllm:num_requests_waiting",
		kvUsage: "vllm:kv_cache_usage_perc", kvUsageOld: "vllm:gpu_cache_usage_perc",
		capacity: "vllm:cache_config_info", prompt: "vllm:prompt_tokens_total", generation: "vllm:generation_tokens_total",
	},
	DialectSGLang: {
		running: "sglang:num_running_reqs", waiting: "sglang:num_queue_reqs",
		kvUsage: "sglang:token_usage", capacity: "sglang:max_total_num_tokens",
		prompt: "sglang:prompt_tokens_total", generation: "sglang:generation_tokens_total",
	},
}

// ErrUnknownDialect is returned for a dialect other than vllm or sglang.
var ErrUnknownDialect = errors.New("unknown engine metrics dialect (want vllm or sglang)")

// ParseMetrics extracts per-model engine figures from a vLLM or SGLang /metrics text, keyed
// by the model_name label ("" for series without it, which apply to every model). Counters
// and gauges of several series for one model are summed. KV capacity comes from vLLM's
// cache_config_info (num_gpu_blocks × block_size) or SGLang's max_total_num_tokens;
// KVUsage is NaN when the engine exports no usage gauge.
func ParseMetrics(dialect string, text []byte) (map[string]stats.EngineMetrics, error) {
	names, ok := dialects[dialect]
	if !ok {
		return nil, ErrUnknownDialect
	}
	out := map[string]stats.EngineMetrics{}
	get := func(labels []Label) (string, stats.EngineMetrics) {
		model := label(labels, "model_name")
		m, seen := out[model]
		if !seen {
			m.KVUsage = math.NaN()
		}
		return model, m
	}
	err := ParseText(text, func(name string, labels []Label, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return
		}
		switch name {
		case names.running, names.waiting, names.kvUsage, names.kvUsageOld, names.capacity, names.prompt, names.generation:
		default:
			return
		}
		model, m := get(labels)
		switch name {
		case names.running:
			m.Running += uint64(v)
		case names.waiting:
			m.Waiting += uint64(v)
		case names.kvUsage:
			m.KVUsage = v
		case names.kvUsageOld:
			if math.IsNaN(m.KVUsage) {
				m.KVUsage = v
			}
		case names.capacity:
			if dialect == DialectVLLM {
				blocks := label(labels, "num_gpu_blocks")
				size := label(labels, "block_size")
				nb, err1 := strconv.ParseUint(blocks, 10, 64)
				bs, err2 := strconv.ParseUint(size, 10, 64)
				if err1 == nil && err2 == nil {
					m.KVCapacityTokens = nb * bs
				}
			} else {
				m.KVCapacityTokens = uint64(v)
			}
		case names.prompt:
			m.PromptTokensTotal += v
		case names.generation:
			m.GenerationTokensTotal += v
		}
		out[model] = m
	})
	return out, err
}
