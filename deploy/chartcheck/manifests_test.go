package chartcheck

import (
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite deploy/gateway.yaml and deploy/engine-with-pylon.yaml from the chart")

// The plain manifests in deploy/ and the templates each one holds (by file name prefix);
// the rest (ServiceAccount, Secrets) goes to the first.
var plainManifests = []struct {
	file, prefix, holds, header string
}{
	{"gateway.yaml", "", "the templates other than engine-* render", gatewayHeader},
	{"engine-with-pylon.yaml", "engine-", "templates/engine-* render", engineHeader},
}

const generated = `# Generated from the Helm chart deploy/helm/switchyard with its
# ci/manifests-values.yaml and the release name switchyard (the objects of
#   helm template switchyard deploy/helm/switchyard -f deploy/helm/switchyard/ci/manifests-values.yaml
# that %s): do not edit it, change the chart and run make chart-manifests.
# make chart-test fails while it differs from the chart.
#
`

const gatewayHeader = `# Switchyard gateway replicas, secure by default.
#
# Two listeners per replica: the public one (8000: the OpenAI API, /healthz, /readyz) behind
# the switchyard-gateway Service, and the admin one (8001: pylon registrations, /metrics,
# /debug) behind the headless Service pylons discover replicas through. Both serve TLS;
# pylons must present the control token and a client certificate on the admin listener,
# and the gateway presents its own client certificate to pylons (mutual TLS both ways).
#
# Create the three Secrets these manifests mount before applying them (nothing secret is
# committed):
#   kubectl create secret generic switchyard-control --from-literal=token="$(openssl rand -hex 32)"
#   # a certificate for the names switchyard-gateway, switchyard-gateway-headless (and their
#   # .<namespace>.svc forms), with the CA that signed it, e.g. issued by cert-manager
#   # (its Secrets carry tls.crt, tls.key and ca.crt) or by hand:
#   kubectl create secret generic switchyard-gateway-tls --from-file=tls.crt --from-file=tls.key --from-file=ca.crt
#   # the same for the pylons, with a certificate for the name switchyard-pylon:
#   kubectl create secret generic switchyard-pylon-tls --from-file=tls.crt --from-file=tls.key --from-file=ca.crt
# The token file and the certificates are re-read when Kubernetes updates the Secret: a
# rotation needs no restart. docs/security.md explains every flag used here.
`

const engineHeader = `# Inference engines (the mock engine) with a pylon sidecar each; it needs the
# ServiceAccount and the Secrets of gateway.yaml. The pylon registers with every gateway
# replica over TLS through the headless Service, with the control token and a client
# certificate, advertises its pod IP, and serves its data port over TLS to gateways that
# present a certificate signed by the same CA. The engine binds the pod address so that
# kubelet can probe it; the NetworkPolicy admits other pods to the pylon's ports only.
# For vLLM or SGLang use the chart: docs/deploy.md shows the values.
`

// deploy/gateway.yaml and deploy/engine-with-pylon.yaml are the chart rendered with
// ci/manifests-values.yaml (go test -update rewrites them).
func TestPlainManifestsMatchChart(t *testing.T) {
	t.Parallel()
	manifests, err := renderValues(loadChart(t), userValues(t, "manifests-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*strings.Builder{}
	for _, pm := range plainManifests {
		var b strings.Builder
		fmt.Fprintf(&b, generated, pm.holds)
		b.WriteString(pm.header)
		files[pm.file] = &b
	}
	for _, m := range manifests {
		file := plainManifests[0].file
		for _, pm := range plainManifests[1:] {
			if strings.HasPrefix(path.Base(m.Name), pm.prefix) {
				file = pm.file
			}
		}
		fmt.Fprintf(files[file], "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	for _, pm := range plainManifests {
		p := filepath.Join("..", pm.file)
		want := files[pm.file].String()
		if *update {
			if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("deploy/%s differs from the chart's rendering; run make chart-manifests (go test -update) and review the diff", pm.file)
		}
	}
}
