package logx_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/logx"
)

// Every JSON record is one line that parses on its own (what jq reads), whatever the
// attribute values hold: newlines, quotes, errors, durations, nested groups.
func TestJSONIsOneObjectPerLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := logx.New(&buf, logx.FormatJSON, "debug")
	if err != nil {
		t.Fatal(err)
	}
	log = log.With("component", "gateway")
	log.Debug("request_parsed", "body", "line one\nline \"two\"")
	log.Info("listening", "addr", "127.0.0.1:8000")
	log.Warn("backend_ejected", "err", fmt.Errorf("dial tcp: %s", "refused\r\n"), "backend", map[string]int{"n": 1})
	log.Error("handler_panic", "panic", "}{")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	got := make([]string, 0, len(lines))
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d does not parse as JSON: %v\n%s", i+1, err, line)
		}
		for _, k := range []string{"time", "level", "msg", "component"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("line %d has no %q: %s", i+1, k, line)
			}
		}
		got = append(got, rec["level"].(string)+" "+rec["msg"].(string))
	}
	want := []string{"DEBUG request_parsed", "INFO listening", "WARN backend_ejected", "ERROR handler_panic"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestLevelAndFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		format, level string
		want          string // the output of one Debug, one Info and one Warn record, without times
	}{
		{logx.FormatText, "info", "level=INFO msg=started n=2\nlevel=WARN msg=slow n=3\n"},
		{logx.FormatText, "warn", "level=WARN msg=slow n=3\n"},
		{logx.FormatText, "debug", "level=DEBUG msg=detail n=1\nlevel=INFO msg=started n=2\nlevel=WARN msg=slow n=3\n"},
		{logx.FormatJSON, "error", ""},
	} {
		t.Run(tc.format+"/"+tc.level, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := logx.New(&buf, tc.format, tc.level)
			if err != nil {
				t.Fatal(err)
			}
			log.Debug("detail", "n", 1)
			log.Info("started", "n", 2)
			log.Warn("slow", "n", 3)
			var got strings.Builder
			for line := range strings.Lines(buf.String()) {
				_, rest, _ := strings.Cut(line, " ") // drop time=...
				got.WriteString(rest)
			}
			if diff := cmp.Diff(tc.want, got.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadFormatOrLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ format, level, want string }{
		{"logfmt", "info", `log format "logfmt"`},
		{logx.FormatJSON, "verbose", `log level "verbose"`},
	} {
		if _, err := logx.New(&bytes.Buffer{}, tc.format, tc.level); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %q) = %v, want an error containing %s", tc.format, tc.level, err, tc.want)
		}
	}
}
