package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/internal/overhead"
)

// throughputCmd compares the gateway's throughput with nginx and HAProxy round-robin over
// the same two pylons (budget: at least 1.0× nginx for small non-streaming requests), and
// with a bare fasthttp proxy over them: the ceiling of the gateway's HTTP library.
type throughputCmd struct {
	Nginx       string        `default:"nginx" help:"nginx binary (apt-get install nginx-light); required."`
	HAProxy     string        `name:"haproxy" default:"haproxy" help:"HAProxy binary (apt-get install haproxy); when it is not found the HAProxy column is skipped with a message."`
	Concurrency int           `default:"32" help:"Concurrent keep-alive client connections."`
	Duration    time.Duration `default:"10s" help:"Length of each measurement."`
	Rounds      int           `default:"2" help:"Measurements per router, taking turns: gateway, nginx, HAProxy, the bare proxy."`
	BinDir      string        `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon and gateway binaries."`
	Profile     string        `placeholder:"DIR" help:"Run the gateway with --enable-pprof and save its CPU profile over its first measurement in DIR (go tool pprof DIR/gateway-cpu.pprof), and the bare proxy's over its whole run (DIR/bare-cpu.pprof)."`
	NoBareProxy bool          `name:"no-bare-proxy" help:"Skip the bare fasthttp proxy's column (a reverse proxy of a few lines on the gateway's HTTP library, over the same two pylons: what the library itself costs)."`
}

func (c *throughputCmd) Validate() error {
	if c.Concurrency <= 0 || c.Duration <= 0 || c.Rounds <= 0 {
		return errors.New("--concurrency, --duration and --rounds must be > 0")
	}
	return nil
}

const nginxConf = `daemon off;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream pylons {
    server %[2]s;
    server %[3]s;
    keepalive 256;
  }
  server {
    listen %[4]s;
    location / {
      proxy_pass http://pylons;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

// haproxyConf is HAProxy's configuration for the comparison, the counterpart of nginxConf:
// round-robin over the two pylons, keep-alive on both sides, idle server connections
// shared between client connections (http-reuse always, as nginx's keepalive pool does),
// no logging. Arguments: the two pylons and the listen address.
const haproxyConf = `global
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  option http-keep-alive
  http-reuse always
frontend clients
  bind %[3]s
  default_backend pylons
backend pylons
  balance roundrobin
  server p0 %[1]s
  server p1 %[2]s
`

// haproxyConfig renders haproxyConf.
func haproxyConfig(pylon0, pylon1, listen string) []byte {
	return fmt.Appendf(nil, haproxyConf, pylon0, pylon1, listen)
}

func (c *throughputCmd) Run() error {
	ctx, stop := signalContext()
	defer stop()
	bins := fleet.BinariesIn(c.BinDir)
	if err := bins.Check(); err != nil {
		return err
	}
	nginx, err := exec.LookPath(c.Nginx)
	if err != nil {
		return fmt.Errorf("nginx not found (%w): apt-get install nginx-light, or --nginx PATH", err)
	}
	haproxy, err := exec.LookPath(c.HAProxy)
	if err != nil {
		fmt.Fprintf(os.Stderr, "HAProxy skipped: %s not found (%v); apt-get install haproxy, or --haproxy PATH\n", c.HAProxy, err)
		haproxy = ""
	}
	dir, err := os.MkdirTemp("", "switchyard-throughput-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ports, err := fleet.FreePorts(ctx, 11)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	engines, pylons, gateway, proxy, haproxyAddr := []string{addr(0), addr(1)}, []string{addr(2), addr(3)}, addr(4), addr(5), addr(9)
	gatewayAdmin, pylonAdmins, bareAddr := addr(6), []string{addr(7), addr(8)}, addr(10)
	specs := []fleet.Spec{{Name: "gateway", Path: bins.Gateway, Args: []string{"--http-listen-addr", gateway, "--admin-listen-addr", gatewayAdmin, "--log-level", "warn"}}}
	if c.Profile != "" {
		specs[0].Args = append(specs[0].Args, "--enable-pprof")
	}
	for i := range engines {
		specs = append(specs,
			fleet.Spec{Name: "engine-" + strconv.Itoa(i), Path: bins.Engine, Args: []string{"--http-listen-addr", engines[i], "--num-tokens", "1", "--token-delay", "0s", "--log-level", "warn"}},
			fleet.Spec{Name: "pylon-" + strconv.Itoa(i), Path: bins.Pylon, Args: []string{
				"--http-listen-addr", pylons[i], "--admin-listen-addr", pylonAdmins[i], "--upstream-http-base-url", "http://" + engines[i], "--model-name", overheadModel,
				"--gateway", "http://" + gatewayAdmin, "--inference-server-id", "p" + strconv.Itoa(i), "--initial-input-tps", "100000",
				"--engine-stats-stream", "off", "--log-level", "warn",
			}})
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, pylons[0], pylons[1], proxy), 0o600); err != nil {
		return err
	}
	specs = append(specs, fleet.Spec{Name: "nginx", Path: nginx, Args: []string{"-c", conf, "-p", dir}})
	routers := []router{{name: "gateway (power-of-n)", addr: gateway, proc: 0}, {name: "nginx round-robin", addr: proxy, proc: len(specs) - 1}}
	if haproxy != "" {
		hconf := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(hconf, haproxyConfig(pylons[0], pylons[1], haproxyAddr), 0o600); err != nil {
			return err
		}
		// -db: stay in the foreground, so that the group's SIGTERM stops it.
		specs = append(specs, fleet.Spec{Name: "haproxy", Path: haproxy, Args: []string{"-db", "-f", hconf}})
		routers = append(routers, router{name: "HAProxy round-robin", addr: haproxyAddr, proc: len(specs) - 1})
	}
	if !c.NoBareProxy {
		// From a private copy of this executable, as bench overhead's bare proxies, so that
		// it shares no machine code with the client.
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bins, removeCopies := proxyExecutables(self, "proxy-bare")
		defer removeCopies()
		args := []string{"bare-proxy", "--listen", bareAddr, "--upstream", pylons[0] + "," + pylons[1]}
		if c.Profile != "" {
			if err := os.MkdirAll(c.Profile, 0o750); err != nil {
				return err
			}
			args = append(args, "--cpu-profile", filepath.Join(c.Profile, "bare-cpu.pprof"))
		}
		specs = append(specs, fleet.Spec{Name: "proxy-bare", Path: bins[0], Args: args})
		routers = append(routers, router{name: "fasthttp bare proxy", addr: bareAddr, proc: len(specs) - 1, vsNginx: true})
	}
	group := &fleet.Group{}
	defer group.Stop(fleet.StopGrace)
	procs, err := startChildren(group, specs, dir)
	if err != nil {
		return err
	}
	if err := waitRoutable(ctx, gatewayAdmin, 2, 20*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d connections, %v per measurement, %d rounds…\n", c.Concurrency, c.Duration, c.Rounds)
	var profDone chan error
	if c.Profile != "" { // over the first measurement, the gateway's
		profDone = make(chan error, 1)
		go func() { profDone <- saveCPUProfile(c.Profile, gatewayAdmin, "", c.Duration) }()
	}
	for range c.Rounds {
		for i := range routers {
			r := &routers[i]
			pid := procs[r.proc].PID()
			before, cpuErr := fleet.TreeCPUTime(pid)
			rps, err := overhead.Throughput(ctx, r.addr, overheadModel, c.Concurrency, c.Duration)
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			r.rps = append(r.rps, rps)
			if after, err := fleet.TreeCPUTime(pid); cpuErr == nil && err == nil && rps > 0 {
				r.cpu += after - before
				r.requests += rps * c.Duration.Seconds()
			}
		}
	}
	printThroughput(os.Stdout, routers)
	if profDone != nil {
		if err := <-profDone; err != nil {
			fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		}
	}
	return nil
}

// router is one column of the comparison: where it listens, its process (an index into
// the started children) and its measurements: the rates, and the CPU its process and its
// children (nginx's workers) used over them for about requests requests. vsNginx adds its
// own ratio to nginx (the second router) to the report.
type router struct {
	name     string
	addr     string
	proc     int
	vsNginx  bool
	rps      []float64
	cpu      time.Duration
	requests float64
}

// cpuPerRequest is the router's CPU time per request over its measurements (0: unknown).
func (r *router) cpuPerRequest() time.Duration {
	if r.requests <= 0 {
		return 0
	}
	return time.Duration(float64(r.cpu) / r.requests)
}

func (r *router) mean() float64 {
	t := 0.0
	for _, x := range r.rps {
		t += x
	}
	return t / float64(len(r.rps))
}

// printThroughput prints each router's measurements and CPU per request, and the gateway's
// (the first router's) ratios to each of the others; the budget is the rate's ratio to nginx.
func printThroughput(w io.Writer, routers []router) {
	for i := range routers {
		s := make([]string, len(routers[i].rps))
		for j, x := range routers[i].rps {
			s[j] = strconv.FormatFloat(x, 'f', 0, 64)
		}
		cpu := "CPU per request unknown"
		if d := routers[i].cpuPerRequest(); d > 0 {
			cpu = fmt.Sprintf("CPU %.1f µs per request", float64(d)/float64(time.Microsecond))
		}
		fmt.Fprintf(w, "%-22s req/s: %s (mean %.0f); %s\n", routers[i].name, strings.Join(s, ", "), routers[i].mean(), cpu)
	}
	for i := 1; i < len(routers); i++ {
		budget := ""
		if i == 1 {
			budget = " (budget ≥ 1.0×)"
		}
		cpu := ""
		if g, o := routers[0].cpuPerRequest(), routers[i].cpuPerRequest(); g > 0 && o > 0 {
			cpu = fmt.Sprintf("; CPU per request %.2f×", float64(g)/float64(o))
		}
		fmt.Fprintf(w, "gateway / %s: %.2f×%s%s%s\n", strings.Fields(routers[i].name)[0], routers[0].mean()/routers[i].mean(), budget, cpu, perRound(routers[0].rps, routers[i].rps))
	}
	for i := 2; i < len(routers); i++ {
		if routers[i].vsNginx {
			fmt.Fprintf(w, "%s / nginx: %.2f×\n", routers[i].name, routers[i].mean()/routers[1].mean())
		}
	}
}

// perRound describes the ratios of the rates of a and b round by round (a round's
// measurements are taken one after the other, so a pair shares the machine's phase more
// than the means do): their median and range, with three rounds or more.
func perRound(a, b []float64) string {
	n := min(len(a), len(b))
	if n < 3 {
		return ""
	}
	r := make([]float64, n)
	for k := range r {
		r[k] = a[k] / b[k]
	}
	slices.Sort(r)
	med := r[n/2]
	if n%2 == 0 {
		med = (r[n/2-1] + r[n/2]) / 2
	}
	return fmt.Sprintf("; round by round: median %.2f× (%.2f–%.2f×)", med, r[0], r[n-1])
}
