package fleet_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/scenario"
	"github.com/switchyard/switchyard/bench/scenarios"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// groupAlive reports whether any process of group pgid exists.
func groupAlive(pgid int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func TestStopKillsTheWholeGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	// The shell ignores SIGTERM and starts a grandchild that ignores it too; Stop must
	// still leave nothing behind.
	p, err := fleet.Start(fleet.Spec{Name: "dummy", Path: "/bin/sh", Args: []string{
		"-c",
		"trap '' TERM; (trap '' TERM; sleep 60) & echo $! > " + pidFile + "; wait",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var grandchild int
	for grandchild == 0 && time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(b)) != "" {
			grandchild, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if grandchild == 0 {
		t.Fatal("grandchild did not start")
	}
	var g fleet.Group
	g.Add(p)
	start := time.Now()
	g.Stop(200 * time.Millisecond)
	if exited, _ := p.Exited(); !exited {
		t.Error("child still running after Stop")
	}
	// The grandchild is reparented to init, which reaps it shortly after SIGKILL.
	for groupAlive(p.PID()) && time.Since(start) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if groupAlive(p.PID()) {
		t.Errorf("process group %d (grandchild %d) survived Stop", p.PID(), grandchild)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Stop took %v", d)
	}
}

func TestKillAndExit(t *testing.T) {
	t.Parallel()
	p, err := fleet.Start(fleet.Spec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"60"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if exited, _ := p.Exited(); exited {
		t.Fatal("exited at once")
	}
	p.Kill()
	exited, err := p.Exited()
	if !exited || err == nil {
		t.Errorf("after Kill: exited %t, err %v", exited, err)
	}
	if _, err := fleet.Start(fleet.Spec{Name: "missing", Path: "/no/such/binary"}, nil); err == nil {
		t.Error("starting a missing binary succeeded")
	}
}

func TestFreePorts(t *testing.T) {
	t.Parallel()
	ports, err := fleet.FreePorts(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ports)
	if len(slices.Compact(ports)) != 5 {
		t.Errorf("ports %v not distinct", ports)
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	data, _ := scenarios.Read("queue-mismatch-retry-ab")
	s, err := scenario.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	n := fleet.PortsNeeded(s)
	if n != 4+2*2+2*4 { // engines, gateways and pylons (public and admin each)
		t.Fatalf("ports needed %d", n)
	}
	ports := make([]int, n)
	for i := range ports {
		ports[i] = 9000 + i
	}
	p := fleet.NewPlan(s, &s.Algorithms[0], "/tmp/lb.json", ports, fleet.Options{Bin: fleet.BinariesIn("bin"), TimeScale: 0.1, Seed: 3})
	if len(p.Engines) != 4 || len(p.Gateways) != 2 || len(p.Pylons) != 4 {
		t.Fatalf("plan %d/%d/%d", len(p.Engines), len(p.Gateways), len(p.Pylons))
	}
	eng := strings.Join(p.Engines[1].Args, " ")
	for _, want := range []string{"--http-listen-addr=127.0.0.1:9001", "--token-delay-ms=10", "--ttft-ms=120", "--prefill-tokens-per-s=2200", "--max-concurrent-requests=4", "--time-scale=0.1", "--num-tokens=32"} {
		if !strings.Contains(eng, want) {
			t.Errorf("engine args %q lack %s", eng, want)
		}
	}
	if p.Gateways[1].URL != "http://127.0.0.1:9006" || p.Gateways[1].AdminURL != "http://127.0.0.1:9007" || !slices.Contains(p.Gateways[0].Args, "--lb-config-path=/tmp/lb.json") {
		t.Errorf("gateway %+v", p.Gateways)
	}
	// Each replica has its own fixed id, which seeds its balancers' draws.
	if !slices.Contains(p.Gateways[0].Args, "--gateway-id=gateway-0") || !slices.Contains(p.Gateways[1].Args, "--gateway-id=gateway-1") {
		t.Errorf("gateway ids: %v, %v", p.Gateways[0].Args, p.Gateways[1].Args)
	}
	py := strings.Join(p.Pylons[2].Args, " ")
	for _, want := range []string{
		"--upstream-http-base-url=http://127.0.0.1:9002", "--inference-server-id=backend-2", "--cluster-id=backend-2",
		"--initial-input-tps=2200 --benchmark-pin-input-tps", "--queue-admission=true", "--queue-admission-min-delta=0ms", "--queue-admission-tolerance=1", "--queue-mismatch-retry-after=5ms",
		"--gateway=http://127.0.0.1:9005", "--gateway=http://127.0.0.1:9007", "--advertise-url=http://127.0.0.1:9012",
		"--admin-listen-addr=127.0.0.1:9013",
	} {
		if !strings.Contains(py, want) {
			t.Errorf("pylon args %q lack %s", py, want)
		}
	}
	if fleet.AdmissionMode(&s.Algorithms[1]) != "disabled" {
		t.Error("admission mode")
	}
	// The mock engine answers once the prompt is cached; pylon_prompt_wait: false turns the
	// pylon's prompt wait off for that algorithm only.
	if !strings.Contains(py, "--prompt-cached-at=headers") || strings.Contains(py, "--prompt-wait=") {
		t.Errorf("pylon args %q: want --prompt-cached-at=headers and the default --prompt-wait", py)
	}
	off := false
	noWait := s.Algorithms[0]
	noWait.PylonPromptWait = &off
	if pa := fleet.NewPlan(s, &noWait, "/tmp/lb.json", ports, fleet.Options{Bin: fleet.BinariesIn("bin")}).Pylons[0].Args; !slices.Contains(pa, "--prompt-wait=0s") {
		t.Errorf("pylon_prompt_wait false: pylon args %q lack --prompt-wait=0s", pa)
	}
	on := true
	withShares := s.Algorithms[0]
	withShares.PylonQueueAdmission = &scenario.QueueAdmission{SlotShares: &on}
	if pa := strings.Join(fleet.NewPlan(s, &withShares, "/tmp/lb.json", ports, fleet.Options{Bin: fleet.BinariesIn("bin")}).Pylons[0].Args, " "); strings.Contains(pa, "engine-slot-share") {
		t.Errorf("pylon args %q: a cluster of one pylon gets no slot share", pa)
	}
	if strings.Contains(py, "require-free-slot") {
		t.Errorf("pylon args %q: want the pylon's default free-slot rule", py)
	}
	lead := s.Algorithms[0]
	lead.ClusterBackends = "lead"
	if ga := fleet.NewPlan(s, &lead, "/tmp/lb.json", ports, fleet.Options{Bin: fleet.BinariesIn("bin")}).Gateways[1].Args; !slices.Contains(ga, "--cluster-backends=lead") {
		t.Errorf("cluster_backends lead: gateway args %q lack --cluster-backends=lead", ga)
	}
	if slices.ContainsFunc(p.Gateways[0].Args, func(a string) bool { return strings.HasPrefix(a, "--cluster-backends") }) {
		t.Errorf("gateway args %q: want the gateway's default --cluster-backends", p.Gateways[0].Args)
	}
	lenient := s.Algorithms[0]
	lenient.PylonQueueAdmission = &scenario.QueueAdmission{RequireFreeSlot: &off}
	if pa := fleet.NewPlan(s, &lenient, "/tmp/lb.json", ports, fleet.Options{Bin: fleet.BinariesIn("bin")}).Pylons[0].Args; !slices.Contains(pa, "--queue-admission-require-free-slot=false") {
		t.Errorf("require_free_slot false: pylon args %q lack --queue-admission-require-free-slot=false", pa)
	}

	// Grouped clusters share one engine with scaled capacity.
	data, _ = scenarios.Read("lb-balance-smoke-2c2p-1s")
	s, _ = scenario.Parse(data)
	ports = make([]int, fleet.PortsNeeded(s))
	for i := range ports {
		ports[i] = 9100 + i
	}
	p = fleet.NewPlan(s, &s.Algorithms[0], "/tmp/lb.json", ports, fleet.Options{})
	if len(p.Engines) != 2 || !slices.Contains(p.Engines[0].Args, "--max-concurrent-requests=12") ||
		!slices.Contains(p.Pylons[1].Args, "--upstream-http-base-url="+p.Engines[0].URL) || !slices.Contains(p.Pylons[1].Args, "--cluster-id=cluster-0") {
		t.Errorf("grouped plan %+v", p)
	}
	// Each pylon of a grouped cluster fills its profile's share of the engine when the
	// algorithm asks for shares (not by default); a cluster of one pylon gets no share
	// (the earlier plan).
	hasShare := func(a string) bool { return strings.HasPrefix(a, "--engine-slot-share") }
	for _, pl := range p.Pylons {
		if slices.ContainsFunc(pl.Args, hasShare) {
			t.Errorf("default: grouped pylon args %q have a share", pl.Args)
		}
	}
	shares := s.Algorithms[0]
	shares.PylonQueueAdmission = &scenario.QueueAdmission{SlotShares: &on}
	for _, pl := range fleet.NewPlan(s, &shares, "/tmp/lb.json", ports, fleet.Options{}).Pylons {
		if !slices.Contains(pl.Args, "--engine-slot-share=6") {
			t.Errorf("slot_shares true: grouped pylon args %q lack --engine-slot-share=6", pl.Args)
		}
	}
	shares.PylonQueueAdmission.SlotShares = &off
	for _, pl := range fleet.NewPlan(s, &shares, "/tmp/lb.json", ports, fleet.Options{}).Pylons {
		if slices.ContainsFunc(pl.Args, hasShare) {
			t.Errorf("slot_shares false: pylon args %q have a share", pl.Args)
		}
	}
}

func TestRoutable(t *testing.T) {
	t.Parallel()
	models := []byte(`{"object":"list","data":[{"id":"dummy-model"}]}`)
	state := []byte(`{"gateway_id":"g","backends":[{"id":"a","routable":true},{"id":"b","routable":false},{"id":"c","routable":true}]}`)
	if err := fleet.Routable(models, state, "dummy-model", 2); err != nil {
		t.Error(err)
	}
	if err := fleet.Routable(models, state, "dummy-model", 3); err == nil || !strings.Contains(err.Error(), "2 routable backends of 3") {
		t.Errorf("err %v", err)
	}
	if err := fleet.Routable([]byte(`{"data":[]}`), state, "dummy-model", 1); err == nil {
		t.Error("unlisted model accepted")
	}
}
