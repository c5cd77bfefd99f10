package chaos

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// Series is one sample of a Prometheus text exposition.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseMetrics parses a Prometheus text exposition; comments and lines it cannot read
// are skipped.
func ParseMetrics(text string) []Series {
	var out []Series
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if s, ok := parseSeries(line); ok {
			out = append(out, s)
		}
	}
	return out
}

func parseSeries(line string) (Series, bool) {
	var s Series
	var rest string
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return s, false
	} else if line[i] == '{' {
		s.Name = line[:i]
		labels, after, ok := parseLabels(line[i+1:])
		if !ok {
			return s, false
		}
		s.Labels, rest = labels, after
	} else {
		s.Name, rest = line[:i], line[i:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || s.Name == "" {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.Value = v
	return s, true
}

// parseLabels reads k="v",... up to the closing brace and returns the rest of the line.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return nil, "", false
		}
		if s[0] == '}' {
			return labels, s[1:], true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, "", false
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, "", false
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
}

// Sum adds the values of every series named name whose labels include all of match.
// found is false when no series matched.
func Sum(ss []Series, name string, match map[string]string) (sum float64, found bool) {
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if s.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			sum += s.Value
			found = true
		}
	}
	return sum, found
}

var errNoRSS = errors.New("no VmRSS line")

// ParseVMRSS returns the VmRSS of a /proc/PID/status text, in bytes.
func ParseVMRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, errNoRSS
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, err //nolint:wrapcheck // names the value
		}
		return kb << 10, nil
	}
	return 0, errNoRSS
}

// RSS returns process pid's resident memory from /proc/PID/status, in bytes; -1 when it
// cannot be read (the process is gone, or no /proc).
func RSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	v, err := ParseVMRSS(string(b))
	if err != nil {
		return -1
	}
	return v
}
