package chartcheck

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// helm lint, for the defaults and each values file: no warning, no error.
func TestLint(t *testing.T) {
	t.Parallel()
	for _, vc := range valuesCases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			linter := lint.AllWithKubeVersion(chartDir, userValues(t, vc.file), namespace, &kubeVersion)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m)
				} else {
					t.Log(m)
				}
			}
		})
	}
}

// Every values case renders objects that decode strictly, and the kinds each one asks for.
func TestRenderedObjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		valuesCase
		secrets, pdbs, hpas, networkPolicies, serviceMonitors, prometheusRules int
		gatewayReplicas                                                        int32 // 0: left to the HPA
	}{
		{valuesCase: valuesCases[0], secrets: 1, pdbs: 2, networkPolicies: 2, gatewayReplicas: 2},
		{valuesCase: valuesCases[1], pdbs: 2, networkPolicies: 2, gatewayReplicas: 2},
		{valuesCase: valuesCases[2], pdbs: 2, hpas: 1, networkPolicies: 2, serviceMonitors: 2, prometheusRules: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := render(t, tc.valuesCase)
			for _, c := range []struct {
				kind      string
				got, want int
			}{
				{"Deployment", len(o.deployments), 2},
				{"Service", len(o.services), 3},
				{"ConfigMap", len(o.configMaps), 1},
				{"ServiceAccount", len(o.serviceAccounts), 1},
				{"Secret", len(o.secrets), tc.secrets},
				{"PodDisruptionBudget", len(o.pdbs), tc.pdbs},
				{"HorizontalPodAutoscaler", len(o.hpas), tc.hpas},
				{"NetworkPolicy", len(o.networkPolicies), tc.networkPolicies},
				{"ServiceMonitor", len(o.serviceMonitors), tc.serviceMonitors},
				{"PrometheusRule", len(o.prometheusRules), tc.prometheusRules},
			} {
				if c.got != c.want {
					t.Errorf("%d %s objects, want %d", c.got, c.kind, c.want)
				}
			}
			gw := o.deployment(t, "switchyard-gateway")
			switch {
			case tc.gatewayReplicas == 0 && gw.Spec.Replicas != nil:
				t.Errorf("gateway replicas %d with an HPA, want none", *gw.Spec.Replicas)
			case tc.gatewayReplicas != 0 && (gw.Spec.Replicas == nil || *gw.Spec.Replicas != tc.gatewayReplicas):
				t.Errorf("gateway replicas %v, want %d", gw.Spec.Replicas, tc.gatewayReplicas)
			}
			for _, h := range o.hpas {
				if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 3 {
					t.Errorf("HPA %s minReplicas %v, want at least 3", h.Name, h.Spec.MinReplicas)
				}
			}
		})
	}
}

// The production values: TLS with mutual TLS on both sides, the token from an existing
// Secret, vLLM behind the pylon, and the gateway's ServiceMonitor with the token and a
// client certificate.
func TestProductionValues(t *testing.T) {
	t.Parallel()
	o := render(t, valuesCases[2])
	gw := container(t, o.deployment(t, "switchyard-gateway"), "gateway")
	engine := o.deployment(t, "switchyard-engine")
	pylon := container(t, engine, "pylon")
	for _, want := range []string{
		"--tls-cert-file=/etc/switchyard/tls/tls.crt", "--admin-tls-client-ca-file=/etc/switchyard/tls/ca.crt",
		"--tls-client-cert-file=/etc/switchyard/tls/tls.crt", "--tls-server-name=switchyard-pylon",
		"--control-token-file=/etc/switchyard/control/token",
	} {
		if !slices.Contains(gw.Args, want) {
			t.Errorf("gateway args lack %s: %q", want, gw.Args)
		}
	}
	for _, want := range []string{
		"--gateway-dns=https://switchyard-gateway-headless:8001", "--advertise-url=https://$(POD_IP):8100",
		"--tls-client-ca-file=/etc/switchyard/tls/ca.crt", "--tls-server-name=switchyard-gateway-headless",
		"--engine-metrics=vllm", "--engine-stats-stream=off", "--max-engine-concurrency=256",
		"--upstream-http-base-url=http://127.0.0.1:8090",
	} {
		if !slices.Contains(pylon.Args, want) {
			t.Errorf("pylon args lack %s: %q", want, pylon.Args)
		}
	}
	for _, unwanted := range []string{"--do-calibration", "--model-name", "--kv-cache-stats-path"} {
		for _, a := range pylon.Args {
			if strings.HasPrefix(a, unwanted) {
				t.Errorf("pylon in front of vLLM has %s", a)
			}
		}
	}
	e := container(t, engine, "engine")
	if e.Image != "vllm/vllm-openai:v0.10.1" || !slices.Contains(e.Args, "--port=8090") || e.StartupProbe == nil {
		t.Errorf("engine container: image %s, args %q, startupProbe %v", e.Image, e.Args, e.StartupProbe)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{
		{"gateway readiness", gw.ReadinessProbe},
		{"gateway liveness", gw.LivenessProbe},
		{"pylon readiness", pylon.ReadinessProbe},
		{"pylon liveness", pylon.LivenessProbe},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v, want HTTPS", p.name, p.probe)
		}
	}
	sm := o.serviceMonitors[0]
	ep := sm.Spec.Endpoints[0]
	if sm.Name != "switchyard-gateway" || ep.Authorization == nil || ep.Authorization.Credentials.Name != "switchyard-control" ||
		ep.TLSConfig == nil || ep.TLSConfig.Cert.Secret == nil || ep.TLSConfig.KeySecret == nil {
		t.Errorf("gateway ServiceMonitor endpoint lacks the token or the client certificate: %+v", ep)
	}
}

// The defaults: plain HTTP, the mock engine with the pylon reading its stats stream and KV
// cache and calibrating, a generated 48-character control token.
func TestDefaultValues(t *testing.T) {
	t.Parallel()
	o := render(t, valuesCases[0])
	pylon := container(t, o.deployment(t, "switchyard-engine"), "pylon")
	for _, want := range []string{
		"--gateway-dns=switchyard-gateway-headless:8001", "--advertise-url=http://$(POD_IP):8100",
		"--model-name=dummy-model", "--engine-metrics=off", "--kv-cache-stats-path=/kv-cache/stats", "--do-calibration",
	} {
		if !slices.Contains(pylon.Args, want) {
			t.Errorf("pylon args lack %s: %q", want, pylon.Args)
		}
	}
	for _, a := range pylon.Args {
		if strings.HasPrefix(a, "--tls") {
			t.Errorf("pylon has %s without TLS", a)
		}
	}
	token := string(o.secrets[0].Data["token"])
	if o.secrets[0].Name != "switchyard-control" || !regexp.MustCompile(`^[A-Za-z0-9]{48}$`).MatchString(token) {
		t.Errorf("control Secret %s holds %d characters, want a random 48-character token", o.secrets[0].Name, len(token))
	}
}

// A token and certificates given as values go into Secrets the chart creates, which the
// pods mount.
func TestSecretsFromValues(t *testing.T) {
	t.Parallel()
	vals, err := chartutil.ReadValues([]byte(`
controlToken: {value: test-value-not-a-token}
tls:
  enabled: true
  gateway: {cert: GATEWAY-CERT, key: GATEWAY-KEY, ca: CA}
  pylon: {cert: PYLON-CERT, key: PYLON-KEY, ca: CA}
`))
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := renderValues(loadChart(t), vals)
	if err != nil {
		t.Fatal(err)
	}
	o, err := decode(manifests)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"switchyard-control":     "token=test-value-not-a-token",
		"switchyard-gateway-tls": "ca.crt=CA tls.crt=GATEWAY-CERT tls.key=GATEWAY-KEY",
		"switchyard-pylon-tls":   "ca.crt=CA tls.crt=PYLON-CERT tls.key=PYLON-KEY",
	}
	for _, s := range o.secrets {
		keys := make([]string, 0, len(s.Data))
		for k, v := range s.Data {
			keys = append(keys, k+"="+string(v))
		}
		slices.Sort(keys)
		if got := strings.Join(keys, " "); got != want[s.Name] {
			t.Errorf("Secret %s holds %q, want %q", s.Name, got, want[s.Name])
		}
		delete(want, s.Name)
	}
	if len(want) > 0 {
		t.Errorf("Secrets not rendered: %v", want)
	}
	if problems := referenceProblems(o, nil); len(problems) > 0 {
		t.Errorf("references: %q", problems)
	}
	mounted := map[string]bool{}
	for _, d := range o.deployments {
		for i := range d.Spec.Template.Spec.Volumes {
			if v := &d.Spec.Template.Spec.Volumes[i]; v.Secret != nil {
				mounted[v.Secret.SecretName] = true
			}
		}
	}
	if len(mounted) != 3 {
		t.Errorf("pods mount the Secrets %v, want the three rendered", mounted)
	}
}

// Values that cannot work are refused at render time with a message naming the value.
func TestValuesRejected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, values, want string
	}{
		{"TLS without a certificate", "tls: {enabled: true}", "tls.enabled needs tls.gateway.existingSecret"},
		{"a certificate without its key", "tls: {enabled: true, gateway: {cert: C, ca: A}, pylon: {existingSecret: p}}", "tls.gateway.key is needed"},
		{"a bare off, which YAML reads as false", "pylon: {engine: {metrics: off}}", "metrics"},
		{"an unknown engine dialect", "pylon: {engine: {metrics: tgi}}", "metrics"},
		{"an extra argument that is not a flag", "gateway: {extraArgs: [oops]}", "extraArgs"},
		{"a misspelt section", "gatway: {replicas: 3}", "gatway"},
		{"resources without a memory limit", "gateway: {resources: {limits: {memory: null}}}", "memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vals, err := chartutil.ReadValues([]byte(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			_, err = renderValues(loadChart(t), vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render with %s: %v, want an error naming %q", tc.values, err, tc.want)
			}
		})
	}
}

// The production values' PrometheusRule carries exactly the rules of
// deploy/prometheus/alerts.yaml (the file promtool checks and unit-tests), with the labels
// Prometheus selects rules by.
func TestPrometheusRuleIsTheAlertsFile(t *testing.T) {
	t.Parallel()
	o := render(t, valuesCases[2])
	if len(o.prometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(o.prometheusRules))
	}
	r := o.prometheusRules[0]
	if r.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v, want release=prometheus from the values", r.Labels)
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "..", "..", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(data, &want); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yaml: %v", err)
	}
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) < 6 {
		t.Fatalf("deploy/prometheus/alerts.yaml has %d groups", len(want.Groups))
	}
	if !reflect.DeepEqual(r.Spec, want) {
		t.Errorf("the PrometheusRule's spec differs from deploy/prometheus/alerts.yaml:\n got %+v\nwant %+v", r.Spec, want)
	}
}
