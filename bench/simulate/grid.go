package simulate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/bench/scenario"
)

// Axis is one swept lb-config field of the model's entry and its values.
type Axis struct {
	Field  string
	Values []float64
}

// ParseAxis parses "field=v1,v2,...".
func ParseAxis(spec string) (Axis, error) {
	field, list, ok := strings.Cut(spec, "=")
	if !ok || field == "" || list == "" {
		return Axis{}, fmt.Errorf("grid axis %q: want field=value,value (numbers)", spec)
	}
	ax := Axis{Field: strings.TrimSpace(field)}
	for v := range strings.SplitSeq(list, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return Axis{}, fmt.Errorf("grid axis %s: value %q is not a number", ax.Field, v)
		}
		ax.Values = append(ax.Values, f)
	}
	return ax, nil
}

// Point is one grid point's settings and result.
type Point struct {
	Settings []float64 // one value per axis
	Result   Result
}

// Variants returns one variant of algorithm a of s per combination of the axes' values
// (see Variant), in Grid's order.
func Variants(s *scenario.Scenario, a *scenario.Algorithm, axes []Axis) ([]scenario.Algorithm, error) {
	var out []scenario.Algorithm
	for _, settings := range combinations(axes) {
		v, err := Variant(s, a, axes, settings)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// combinations lists every combination of the axes' values in row-major order (the last
// axis varies fastest).
func combinations(axes []Axis) [][]float64 {
	n := 1
	for _, ax := range axes {
		n *= len(ax.Values)
	}
	out := make([][]float64, 0, n)
	for i := range n {
		settings := make([]float64, len(axes))
		k := i
		for j := len(axes) - 1; j >= 0; j-- {
			settings[j] = axes[j].Values[k%len(axes[j].Values)]
			k /= len(axes[j].Values)
		}
		out = append(out, settings)
	}
	return out
}

// Grid runs algorithm a of s once per combination of the axes' values, each value set on
// the algorithm's entry for the scenario's model (which must be a detailed object), over
// seeds manifests (RunSeeds). The points come in row-major order (the last axis varies
// fastest).
func Grid(s *scenario.Scenario, a *scenario.Algorithm, axes []Axis, seeds int) ([]Point, error) {
	combos := combinations(axes)
	points := make([]Point, 0, len(combos))
	for _, settings := range combos {
		v, err := Variant(s, a, axes, settings)
		if err != nil {
			return nil, err
		}
		res, err := RunSeeds(s, &v, seeds)
		if err != nil {
			return nil, err
		}
		points = append(points, Point{Settings: settings, Result: res})
	}
	return points, nil
}

// Variant returns a copy of a with the axes' fields of the model's entry set to settings,
// named after them (for example "cache_affinity_wait_ms=200,cache_affinity_input_tokens_scale=0.1").
func Variant(s *scenario.Scenario, a *scenario.Algorithm, axes []Axis, settings []float64) (scenario.Algorithm, error) {
	raw, err := json.Marshal(a.Config)
	if err != nil {
		return scenario.Algorithm{}, fmt.Errorf("algorithm %s: %w", a.Name, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return scenario.Algorithm{}, fmt.Errorf("algorithm %s: %w", a.Name, err)
	}
	models, _ := cfg["models"].(map[string]any)
	entry, ok := models[s.Model].(map[string]any)
	if !ok {
		return scenario.Algorithm{}, fmt.Errorf("algorithm %s: models[%q] must be a detailed entry (an object) to sweep its fields", a.Name, s.Model)
	}
	names := make([]string, len(axes))
	for i, ax := range axes {
		entry[ax.Field] = settings[i]
		names[i] = ax.Field + "=" + strconv.FormatFloat(settings[i], 'g', -1, 64)
	}
	v := *a
	v.Name, v.Config = strings.Join(names, ","), cfg
	if _, err := v.LBConfigJSON(); err != nil {
		return scenario.Algorithm{}, fmt.Errorf("algorithm %s with %s: %w", a.Name, v.Name, err)
	}
	return v, nil
}

// RunSeeds runs a on the manifests of seeds consecutive seeds from the scenario's and
// averages the results (counts are summed, times and the hit rate averaged): one manifest
// decides close calls by its own luck.
func RunSeeds(s *scenario.Scenario, a *scenario.Algorithm, seeds int) (Result, error) {
	seeds = max(seeds, 1)
	var sum Result
	for i := range seeds {
		sc := *s
		sc.Seed = s.Seed + uint64(i)
		r, err := Run(&sc, a)
		if err != nil {
			return Result{}, err
		}
		sum.Algorithm = r.Algorithm
		sum.Served += r.Served
		sum.Failed += r.Failed
		sum.TTFTMean += r.TTFTMean
		sum.TTFTP50 += r.TTFTP50
		sum.TTFTP95 += r.TTFTP95
		sum.CacheHitRate += r.CacheHitRate
		sum.Makespan += r.Makespan
	}
	n := time.Duration(seeds)
	sum.TTFTMean, sum.TTFTP50, sum.TTFTP95, sum.Makespan = sum.TTFTMean/n, sum.TTFTP50/n, sum.TTFTP95/n, sum.Makespan/n
	sum.CacheHitRate /= float64(seeds)
	return sum, nil
}
