package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
	"github.com/switchyard/switchyard/bench/overhead"
)

// throughputCmd compares the gateway's throughput with nginx round-robin over the same two
// pylons (budget: at least 1.0× nginx for small non-streaming requests).
type throughputCmd struct {
	Nginx       string        `default:"nginx" help:"nginx binary (apt-get install nginx-light)."`
	Concurrency int           `default:"32" help:"Concurrent keep-alive client connections."`
	Duration    time.Duration `default:"10s" help:"Length of each measurement."`
	Rounds      int           `default:"2" help:"Measurements per router, alternating gateway and nginx."`
	BinDir      string        `name:"bin-dir" default:"bin" help:"Directory holding the engine, pylon and gateway binaries."`
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
	dir, err := os.MkdirTemp("", "switchyard-throughput-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ports, err := fleet.FreePorts(ctx, 9)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	engines, pylons, gateway, proxy := []string{addr(0), addr(1)}, []string{addr(2), addr(3)}, addr(4), addr(5)
	gatewayAdmin, pylonAdmins := addr(6), []string{addr(7), addr(8)}
	specs := []fleet.Spec{{Name: "gateway", Path: bins.Gateway, Args: []string{"--http-listen-addr", gateway, "--admin-listen-addr", gatewayAdmin, "--log-level", "warn"}}}
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
	group := &fleet.Group{}
	defer group.Stop(fleet.StopGrace)
	if _, err := startChildren(group, specs, dir); err != nil {
		return err
	}
	if err := waitRoutable(ctx, gatewayAdmin, 2, 20*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d connections, %v per measurement, %d rounds…\n", c.Concurrency, c.Duration, c.Rounds)
	var gw, ng []float64
	for range c.Rounds {
		for _, t := range []struct {
			addr string
			out  *[]float64
		}{{gateway, &gw}, {proxy, &ng}} {
			rps, err := overhead.Throughput(ctx, t.addr, overheadModel, c.Concurrency, c.Duration)
			if err != nil {
				return err
			}
			*t.out = append(*t.out, rps)
		}
	}
	f := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatFloat(x, 'f', 0, 64)
		}
		return strings.Join(s, ", ")
	}
	mean := func(v []float64) float64 {
		t := 0.0
		for _, x := range v {
			t += x
		}
		return t / float64(len(v))
	}
	fmt.Printf("gateway (power-of-n) req/s: %s\nnginx round-robin req/s:   %s\ngateway / nginx: %.2f× (budget ≥ 1.0×)\n", f(gw), f(ng), mean(gw)/mean(ng))
	return nil
}
