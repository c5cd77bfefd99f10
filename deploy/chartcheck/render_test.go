package chartcheck

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../helm/switchyard"
	releaseName = "switchyard"
	namespace   = "default"
)

// The Kubernetes version the chart is rendered and linted for (Chart.yaml's kubeVersion
// must admit it).
var kubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// valuesCase is one way of installing the chart: the chart's defaults, or a values file of
// ci/ on top of them.
type valuesCase struct {
	name string
	file string // under the chart's ci/; "" = the defaults alone
}

var valuesCases = []valuesCase{
	{"default", ""},
	{"manifests", "manifests-values.yaml"},
	{"production", "production-values.yaml"},
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	return c
}

// userValues reads a values file of ci/ (nil for "").
func userValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", file))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// renderValues renders the chart with user values as `helm template switchyard
// deploy/helm/switchyard -f FILE` does (schema validated, no cluster to look up) and
// returns the manifests in Helm's install order, one object each.
func renderValues(c *chart.Chart, vals map[string]any) ([]releaseutil.Manifest, error) {
	if !chartutil.IsCompatibleRange(c.Metadata.KubeVersion, kubeVersion.String()) {
		return nil, fmt.Errorf("chart needs kubeVersion %s, not %s", c.Metadata.KubeVersion, kubeVersion.Version)
	}
	caps := &chartutil.Capabilities{KubeVersion: kubeVersion, APIVersions: chartutil.DefaultVersionSet}
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, IsInstall: true, Revision: 1}
	top, err := chartutil.ToRenderValues(c, vals, opts, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("%d hooks rendered; the chart has none", len(hooks))
	}
	return manifests, nil
}

// objects is a rendering decoded into the Kubernetes API types.
type objects struct {
	manifests       []releaseutil.Manifest
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	networkPolicies []*networkingv1.NetworkPolicy
	serviceMonitors []*monitoringv1.ServiceMonitor
	prometheusRules []*monitoringv1.PrometheusRule
}

// render renders and decodes one values case, failing the test on any error.
func render(t *testing.T, vc valuesCase) *objects {
	t.Helper()
	manifests, err := renderValues(loadChart(t), userValues(t, vc.file))
	if err != nil {
		t.Fatalf("render %s: %v", vc.name, err)
	}
	objs, err := decode(manifests)
	if err != nil {
		t.Fatalf("%s: %v", vc.name, err)
	}
	return objs
}

// decode decodes every manifest strictly: an unknown or duplicated field, a wrong type or
// a kind this chart is not expected to render is an error.
func decode(manifests []releaseutil.Manifest) (*objects, error) {
	o := &objects{manifests: manifests}
	for _, m := range manifests {
		var into any
		switch m.Head.Version + " " + m.Head.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			o.deployments = append(o.deployments, d)
			into = d
		case "v1 Service":
			s := &corev1.Service{}
			o.services = append(o.services, s)
			into = s
		case "v1 ConfigMap":
			c := &corev1.ConfigMap{}
			o.configMaps = append(o.configMaps, c)
			into = c
		case "v1 Secret":
			s := &corev1.Secret{}
			o.secrets = append(o.secrets, s)
			into = s
		case "v1 ServiceAccount":
			s := &corev1.ServiceAccount{}
			o.serviceAccounts = append(o.serviceAccounts, s)
			into = s
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			o.pdbs = append(o.pdbs, p)
			into = p
		case "autoscaling/v2 HorizontalPodAutoscaler":
			h := &autoscalingv2.HorizontalPodAutoscaler{}
			o.hpas = append(o.hpas, h)
			into = h
		case "networking.k8s.io/v1 NetworkPolicy":
			n := &networkingv1.NetworkPolicy{}
			o.networkPolicies = append(o.networkPolicies, n)
			into = n
		case "monitoring.coreos.com/v1 ServiceMonitor":
			s := &monitoringv1.ServiceMonitor{}
			o.serviceMonitors = append(o.serviceMonitors, s)
			into = s
		case "monitoring.coreos.com/v1 PrometheusRule":
			r := &monitoringv1.PrometheusRule{}
			o.prometheusRules = append(o.prometheusRules, r)
			into = r
		default:
			return nil, fmt.Errorf("%s: unexpected kind %s %s", m.Name, m.Head.Version, m.Head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(m.Content), into); err != nil {
			return nil, fmt.Errorf("%s (%s %s): %w", m.Name, m.Head.Kind, nameOf(m), err)
		}
	}
	return o, nil
}

func nameOf(m releaseutil.Manifest) string {
	if m.Head.Metadata == nil {
		return ""
	}
	return m.Head.Metadata.Name
}

// deployment returns the rendered Deployment named name.
func (o *objects) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	for _, d := range o.deployments {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

// container returns the container named name of d.
func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %s", d.Name, name)
	return nil
}
