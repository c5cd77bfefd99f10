package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The generated HAProxy configuration is one HAProxy accepts (haproxy -c), with both pylons
// in a round-robin backend behind the listen address. The check needs the haproxy binary
// (.ci/run installs it) and skips without it.
func TestHAProxyConfigIsValid(t *testing.T) {
	t.Parallel()
	conf := haproxyConfig("127.0.0.1:18100", "127.0.0.1:18101", "127.0.0.1:18000")
	for _, want := range []string{"balance roundrobin", "server p0 127.0.0.1:18100", "server p1 127.0.0.1:18101", "bind 127.0.0.1:18000", "http-reuse always"} {
		if !bytes.Contains(conf, []byte(want)) {
			t.Errorf("configuration lacks %q:\n%s", want, conf)
		}
	}
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed (apt-get install haproxy): configuration not checked by HAProxy")
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), haproxy, "-c", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	if strings.Contains(strings.ToLower(string(out)), "warning") {
		t.Errorf("haproxy -c warns:\n%s", out)
	}
}

// The report has one line per router and the gateway's ratios to each other one, the
// budget on the nginx line; CPU per request where it was measured; the bare proxy's own
// ratio to nginx.
func TestPrintThroughput(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printThroughput(&b, []router{
		{name: "gateway (power-of-n)", rps: []float64{1000, 1200}, cpu: 2 * time.Second, requests: 20_000},
		{name: "nginx round-robin", rps: []float64{1000, 1000}, cpu: time.Second, requests: 20_000},
		{name: "HAProxy round-robin", rps: []float64{2200}},
		{name: "fasthttp bare proxy", rps: []float64{900}, vsNginx: true},
	})
	want := "gateway (power-of-n)   req/s: 1000, 1200 (mean 1100); CPU 100.0 µs per request\n" +
		"nginx round-robin      req/s: 1000, 1000 (mean 1000); CPU 50.0 µs per request\n" +
		"HAProxy round-robin    req/s: 2200 (mean 2200); CPU per request unknown\n" +
		"fasthttp bare proxy    req/s: 900 (mean 900); CPU per request unknown\n" +
		"gateway / nginx: 1.10× (budget ≥ 1.0×); CPU per request 2.00×\n" +
		"gateway / HAProxy: 0.50×\n" +
		"gateway / fasthttp: 1.22×\n" +
		"fasthttp bare proxy / nginx: 0.90×\n"
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}

// With three rounds or more the ratios also come round by round: median and range.
func TestPrintThroughputPerRound(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printThroughput(&b, []router{
		{name: "gateway (power-of-n)", rps: []float64{900, 1100, 1000, 1300}},
		{name: "nginx round-robin", rps: []float64{1000, 1000, 1000, 1000}},
	})
	want := "gateway / nginx: 1.07× (budget ≥ 1.0×); round by round: median 1.05× (0.90–1.30×)\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("report:\n%s\nwant it to end with:\n%s", b.String(), want)
	}
}
