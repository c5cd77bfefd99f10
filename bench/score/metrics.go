package score

import (
	"bufio"
	"sort"
	"strconv"
	"strings"
)

// Series is a Prometheus sample key: the metric name and its labels.
type Series struct {
	Name   string
	Labels map[string]string
}

// ParseMetrics reads Prometheus text exposition into series → value. Comments, blank
// lines, timestamps and unparsable lines are skipped.
func ParseMetrics(text string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		key, rest := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			key, rest = line[:i+1], line[i+1:]
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			key, rest = line[:i], line[i:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[key] = v
	}
	return out
}

// MetricDeltas sums after − before over every series, across the given (before, after)
// scrapes of several processes. Series absent before count from zero. Series that did not
// change are left out, but for histogram buckets: a quantile needs every bucket's bound,
// the empty ones below the observations included.
func MetricDeltas(scrapes [][2]string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range scrapes {
		before, after := ParseMetrics(s[0]), ParseMetrics(s[1])
		for k, v := range after {
			if d := v - before[k]; d != 0 || strings.Contains(k, "_bucket{") {
				out[k] += d
			}
		}
	}
	return out
}

// ParseSeries splits `name{a="x",b="y"}` into its name and labels.
func ParseSeries(key string) Series {
	s := Series{Labels: map[string]string{}}
	i := strings.IndexByte(key, '{')
	if i < 0 {
		s.Name = key
		return s
	}
	s.Name = key[:i]
	body := strings.TrimSuffix(key[i+1:], "}")
	for body != "" {
		eq := strings.IndexByte(body, '=')
		if eq < 0 || eq+1 >= len(body) || body[eq+1] != '"' {
			break
		}
		name := strings.TrimSpace(body[:eq])
		var val strings.Builder
		j := eq + 2
		for ; j < len(body) && body[j] != '"'; j++ {
			if body[j] == '\\' && j+1 < len(body) {
				j++
				switch body[j] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(body[j])
				}
				continue
			}
			val.WriteByte(body[j])
		}
		s.Labels[name] = val.String()
		body = strings.TrimLeft(body[min(j+1, len(body)):], ", ")
	}
	return s
}

// sumBy sums the deltas of metrics whose name ends with suffix (any prefix, so
// --metrics-prefix does not matter), grouped by the value of label ("" groups all).
func sumBy(deltas map[string]float64, suffix, label string) map[string]float64 {
	out := map[string]float64{}
	keys := make([]string, 0, len(deltas))
	for k := range deltas {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic float summation
	for _, k := range keys {
		s := ParseSeries(k)
		if !strings.HasSuffix(s.Name, suffix) {
			continue
		}
		out[s.Labels[label]] += deltas[k]
	}
	return out
}
