package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Dialects of --engine-metrics.
const (
	DialectVLLM   = "vllm"
	DialectSGLang = "sglang"
)

// ErrUnknownDialect is returned for a dialect other than vllm or sglang.
var ErrUnknownDialect = errors.New("unknown engine metrics dialect (want vllm or sglang)")

// ErrBadExposition classifies a /metrics body that is not Prometheus text exposition.
var ErrBadExposition = errors.New("invalid prometheus exposition")

// dialect names the series one engine family exports.
type dialect struct {
	running, waiting []string // summed (vLLM's older engine also counts swapped requests as waiting)
	usage            []string // KV usage 0..1, the first one present per rank wins
	usedTokens       string   // KV tokens in use
	capacity         string   // KV capacity in tokens, as the value
	cacheInfo        string   // vLLM's cache_config_info: num_gpu_blocks × block_size labels
	prompt           string   // prompt tokens counter
	generation       string   // generation tokens counter
	promptHistogram  string   // per-request prompt length histogram (mean = sum / count)
	requests         string   // request counter (mean prompt = prompt / requests)
	rank             string   // the label telling data-parallel ranks apart
}

var dialects = map[string]*dialect{
	DialectVLLM: {
		running: []string{"vllm:num_requests_running"}, waiting: []string{"vllm:num_requests_waiting", "vllm:num_requests_swapped"},
		usage:     []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		cacheInfo: "vllm:cache_config_info", prompt: "vllm:prompt_tokens_total", generation: "vllm:generation_tokens_total",
		promptHistogram: "vllm:request_prompt_tokens", rank: "engine",
	},
	DialectSGLang: { //nolint:gosec // metric names, not credentials
		running: []string{"sglang:num_running_reqs"}, waiting: []string{"sglang:num_queue_reqs"},
		usage: []string{"sglang:token_usage"}, usedTokens: "sglang:num_used_tokens", capacity: "sglang:max_total_num_tokens",
		prompt: "sglang:prompt_tokens_total", generation: "sglang:generation_tokens_total",
		requests: "sglang:num_requests_total", rank: "dp_rank",
	},
}

// replicaLabels tell apart series that describe the same requests seen from several
// workers of one rank (tensor, pipeline and expert parallel ranks, or a process id in
// Prometheus' multiprocess mode): those are combined by maximum, not summed.
var replicaLabels = []string{"tp_rank", "pp_rank", "moe_ep_rank", "pid"}

const modelLabel = "model_name"

// Figures are one engine model's figures in one exposition. Series without a model_name
// label (vLLM's cache_config_info, say) describe the whole engine and count for every
// model; data-parallel ranks are summed, the KV usage weighted by each rank's capacity.
type Figures struct {
	Running, Waiting float64 // NaN when not exported
	KVUsage          float64 // fraction 0..1 in use; NaN when unknown
	KVCapacityTokens uint64  // 0 when unknown
	// PromptTokensTotal and GenerationTokensTotal are cumulative counters (NaN when not
	// exported). CountersCreated is the newest _created timestamp of their series (0 when
	// the engine exports none) and CounterSeries the number of series summed: when either
	// changes the counters belong to another process.
	PromptTokensTotal, GenerationTokensTotal float64
	CountersCreated                          float64
	CounterSeries                            int
	MeanPromptTokens                         float64 // 0 when unknown
	Ranks                                    int     // data-parallel ranks reporting a running count
}

// cell is one (model, rank)'s figures while parsing; NaN = not seen.
type cell struct {
	running, waiting, usage, used, capacity  float64
	prompt, generation, created              float64
	promptSum, promptCount, requests, series float64
	usageFrom                                int // index in dialect.usage of the usage read (first wins)
}

func newCell() *cell {
	n := math.NaN()
	return &cell{
		running: n, waiting: n, usage: n, used: n, capacity: n, prompt: n, generation: n, created: n,
		promptSum: n, promptCount: n, requests: n, series: n, usageFrom: math.MaxInt,
	}
}

type cellKey struct{ model, rank string }

// seriesKey names one series after its replica labels are dropped.
type seriesKey struct{ model, rank, rest string }

type parse struct {
	d     *dialect
	cells map[cellKey]*cell
	fams  map[string]*dto.MetricFamily
}

// ParseMetrics extracts per-model figures from a vLLM or SGLang /metrics body in the
// Prometheus text format, keyed by the model_name label. Engine-wide series (no
// model_name) are merged into every model's figures; the key "" appears only when no
// series names a model at all. NaN, infinite and negative samples are ignored. A body
// that is not valid text exposition gives an error wrapping ErrBadExposition.
func ParseMetrics(dialectName string, text []byte) (map[string]Figures, error) {
	d, ok := dialects[dialectName]
	if !ok {
		return nil, ErrUnknownDialect
	}
	var in io.Reader = bytes.NewReader(text)
	if len(text) > 0 && text[len(text)-1] != '\n' {
		in = io.MultiReader(in, strings.NewReader("\n")) // the parser wants a final newline
	}
	var tp expfmt.TextParser
	fams, err := tp.TextToMetricFamilies(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadExposition, err)
	}
	p := &parse{d: d, cells: map[cellKey]*cell{}, fams: fams}
	p.read()
	return p.figures(), nil
}

func (p *parse) read() {
	d := p.d
	sum := func(a, b float64) float64 { return a + b }
	for _, name := range d.running {
		p.family(name, plainValue, sum, func(c *cell) *float64 { return &c.running })
	}
	for _, name := range d.waiting {
		p.family(name, plainValue, sum, func(c *cell) *float64 { return &c.waiting })
	}
	for i, name := range d.usage {
		p.familyWith(name, plainValue, func(c *cell, v float64) {
			if i < c.usageFrom { // a newer gauge wins over its deprecated twin
				c.usage, c.usageFrom = v, i
			} else if i == c.usageFrom {
				c.usage = math.Max(c.usage, v)
			}
		})
	}
	p.family(d.usedTokens, plainValue, sum, func(c *cell) *float64 { return &c.used })
	p.family(d.capacity, plainValue, sum, func(c *cell) *float64 { return &c.capacity })
	p.family(d.cacheInfo, blocksTimesSize, sum, func(c *cell) *float64 { return &c.capacity })
	for _, name := range []string{d.prompt, d.generation} {
		field := func(c *cell) *float64 { return &c.prompt }
		if name == d.generation {
			field = func(c *cell) *float64 { return &c.generation }
		}
		p.family(name, plainValue, sum, field)
		p.countSeries(name)
		p.family(createdName(name), plainValue, math.Max, func(c *cell) *float64 { return &c.created })
	}
	p.family(d.promptHistogram, histogramSum, sum, func(c *cell) *float64 { return &c.promptSum })
	p.family(d.promptHistogram, histogramCount, sum, func(c *cell) *float64 { return &c.promptCount })
	p.family(d.requests, plainValue, sum, func(c *cell) *float64 { return &c.requests })
}

// createdName is the _created series Prometheus' Python client writes next to a counter.
func createdName(counter string) string {
	return strings.TrimSuffix(counter, "_total") + "_created"
}

// countSeries adds the number of series of the counter family name to each cell.
func (p *parse) countSeries(name string) {
	for k, n := range p.series(name) {
		c := p.cell(k.model, k.rank)
		c.series = add(c.series, float64(n))
	}
}

// series counts the distinct series of a family by (model, rank).
func (p *parse) series(name string) map[cellKey]int {
	out := map[cellKey]int{}
	mf := p.fams[name]
	if mf == nil {
		return out
	}
	seen := map[seriesKey]bool{}
	for _, m := range mf.GetMetric() {
		if v, ok := plainValue(m); !ok || !usable(v) {
			continue
		}
		k := p.key(m)
		if !seen[k] {
			seen[k] = true
			out[cellKey{k.model, k.rank}]++
		}
	}
	return out
}

// family reads one family: per series (replicas combined by maximum) the value get
// returns, combined across the series of a (model, rank) with combine into field.
func (p *parse) family(name string, get func(*dto.Metric) (float64, bool), combine func(a, b float64) float64, field func(*cell) *float64) {
	p.familyWith(name, get, func(c *cell, v float64) {
		f := field(c)
		if math.IsNaN(*f) {
			*f = v
		} else {
			*f = combine(*f, v)
		}
	})
}

// familyWith hands use, per (model, rank) cell, the value get returns of every series of
// the family name, replicas combined by maximum.
func (p *parse) familyWith(name string, get func(*dto.Metric) (float64, bool), use func(c *cell, v float64)) {
	if name == "" {
		return
	}
	mf := p.fams[name]
	if mf == nil {
		return
	}
	byKey := map[seriesKey]float64{}
	for _, m := range mf.GetMetric() {
		v, ok := get(m)
		if !ok || !usable(v) {
			continue
		}
		k := p.key(m)
		if old, seen := byKey[k]; !seen || v > old {
			byKey[k] = v
		}
	}
	keys := make([]seriesKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b seriesKey) int { // a stable order keeps float sums repeatable
		return strings.Compare(a.model+"\x00"+a.rank+"\x00"+a.rest, b.model+"\x00"+b.rank+"\x00"+b.rest)
	})
	for _, k := range keys {
		use(p.cell(k.model, k.rank), byKey[k])
	}
}

// key is a series' model, rank and remaining labels (sorted), without replica labels.
func (p *parse) key(m *dto.Metric) seriesKey {
	var k seriesKey
	var rest []string
	for _, l := range m.GetLabel() {
		switch name := l.GetName(); {
		case name == modelLabel:
			k.model = l.GetValue()
		case name == p.d.rank:
			k.rank = l.GetValue()
		case slices.Contains(replicaLabels, name):
		default:
			rest = append(rest, name+"="+strconv.Quote(l.GetValue()))
		}
	}
	slices.Sort(rest)
	k.rest = strings.Join(rest, ",")
	return k
}

func (p *parse) cell(model, rank string) *cell {
	k := cellKey{model, rank}
	c := p.cells[k]
	if c == nil {
		c = newCell()
		p.cells[k] = c
	}
	return c
}

func plainValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	default:
		return 0, false
	}
}

func histogramSum(m *dto.Metric) (float64, bool) {
	if m.Histogram == nil {
		return 0, false
	}
	return m.Histogram.GetSampleSum(), true
}

func histogramCount(m *dto.Metric) (float64, bool) {
	if m.Histogram == nil {
		return 0, false
	}
	return float64(m.Histogram.GetSampleCount()), true
}

// blocksTimesSize reads vLLM's cache_config_info: the capacity in tokens is the
// num_gpu_blocks label times the block_size label (the value is always 1).
func blocksTimesSize(m *dto.Metric) (float64, bool) {
	var blocks, size uint64
	err1, err2 := errMissing, errMissing
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "num_gpu_blocks":
			blocks, err1 = strconv.ParseUint(l.GetValue(), 10, 64)
		case "block_size":
			size, err2 = strconv.ParseUint(l.GetValue(), 10, 64)
		}
	}
	if err1 != nil || err2 != nil || blocks == 0 || size == 0 || blocks > math.MaxUint64/size {
		return 0, false // "None" before the engine has profiled its memory
	}
	return float64(blocks * size), true
}

var errMissing = errors.New("label missing")

// usable excludes NaN, infinite and negative samples (an engine's "not known yet").
func usable(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

func add(a, b float64) float64 {
	if math.IsNaN(a) {
		return b
	}
	if math.IsNaN(b) {
		return a
	}
	return a + b
}

// figures merges the cells into per-model figures: a model's own series first, the
// engine-wide ones (model "") for what the model lacks, rank by rank.
func (p *parse) figures() map[string]Figures {
	var models, ranks []string
	for k := range p.cells {
		if k.model != "" && !slices.Contains(models, k.model) {
			models = append(models, k.model)
		}
		if !slices.Contains(ranks, k.rank) {
			ranks = append(ranks, k.rank)
		}
	}
	if len(models) == 0 {
		models = []string{""}
	}
	slices.Sort(ranks)
	out := make(map[string]Figures, len(models))
	for _, model := range models {
		out[model] = p.model(model, ranks)
	}
	return out
}

func (p *parse) model(model string, ranks []string) Figures {
	n := math.NaN()
	f := Figures{Running: n, Waiting: n, KVUsage: n, PromptTokensTotal: n, GenerationTokensTotal: n}
	var capSum, usedSum, usedCap, usageOnly float64
	usageRanks := 0
	promptSum, promptCount, prompt, requests, series := n, n, n, n, n
	for _, rank := range ranks {
		own, wide := p.cells[cellKey{model, rank}], p.cells[cellKey{"", rank}]
		if own == nil && wide == nil {
			continue
		}
		pick := func(field func(*cell) float64) float64 {
			if own != nil && !math.IsNaN(field(own)) {
				return field(own)
			}
			if wide != nil && model != "" {
				return field(wide)
			}
			return n
		}
		if r := pick(func(c *cell) float64 { return c.running }); !math.IsNaN(r) {
			f.Running = add(f.Running, r)
			f.Ranks++
		}
		f.Waiting = add(f.Waiting, pick(func(c *cell) float64 { return c.waiting }))
		f.PromptTokensTotal = add(f.PromptTokensTotal, pick(func(c *cell) float64 { return c.prompt }))
		f.GenerationTokensTotal = add(f.GenerationTokensTotal, pick(func(c *cell) float64 { return c.generation }))
		if c := pick(func(c *cell) float64 { return c.created }); c > f.CountersCreated {
			f.CountersCreated = c
		}
		series = add(series, pick(func(c *cell) float64 { return c.series }))
		promptSum = add(promptSum, pick(func(c *cell) float64 { return c.promptSum }))
		promptCount = add(promptCount, pick(func(c *cell) float64 { return c.promptCount }))
		prompt = add(prompt, pick(func(c *cell) float64 { return c.prompt }))
		requests = add(requests, pick(func(c *cell) float64 { return c.requests }))

		capacity := pick(func(c *cell) float64 { return c.capacity })
		usage := pick(func(c *cell) float64 { return c.usage })
		used := pick(func(c *cell) float64 { return c.used })
		if math.IsNaN(capacity) && used > 0 && usage > 0 {
			capacity = math.Round(used / usage) // an engine that exports no capacity
		}
		switch {
		case capacity > 0 && !math.IsNaN(used):
			capSum += capacity
			usedCap += capacity
			usedSum += math.Min(used, capacity)
		case capacity > 0 && !math.IsNaN(usage):
			capSum += capacity
			usedCap += capacity
			usedSum += math.Min(1, usage) * capacity
		case capacity > 0:
			capSum += capacity
		case !math.IsNaN(usage):
			usageOnly += math.Min(1, usage)
			usageRanks++
		}
	}
	switch {
	case usedCap > 0:
		f.KVUsage = usedSum / usedCap
	case capSum == 0 && usageRanks > 0:
		f.KVUsage = usageOnly / float64(usageRanks)
	}
	if capSum > 0 && capSum < math.MaxUint64 {
		f.KVCapacityTokens = uint64(capSum)
	}
	if series > 0 {
		f.CounterSeries = int(series)
	}
	switch {
	case promptCount > 0 && !math.IsNaN(promptSum):
		f.MeanPromptTokens = promptSum / promptCount
	case requests > 0 && !math.IsNaN(prompt):
		f.MeanPromptTokens = prompt / requests
	}
	return f
}
