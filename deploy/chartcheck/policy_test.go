package chartcheck

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// external lists the Secrets and claims each values case expects to exist before install.
var external = map[string][]string{
	"default":    nil,
	"manifests":  {"switchyard-control", "switchyard-gateway-tls", "switchyard-pylon-tls"},
	"production": {"switchyard-control", "switchyard-gateway-tls", "switchyard-pylon-tls", "hf-token", "hf-cache"},
}

// Every pod passes the restricted Pod Security Standard as the admission controller
// evaluates it, and every pod and container carries the hardening explicitly: non-root,
// RuntimeDefault seccomp, no privilege escalation, all capabilities dropped, a read-only
// root filesystem, no service account token, readiness and liveness probes on declared
// ports, CPU and memory requests and a memory limit, and topology spread over its own pods.
func TestPodPolicy(t *testing.T) {
	t.Parallel()
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, vc := range valuesCases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			for _, d := range render(t, vc).deployments {
				tmpl := &d.Spec.Template
				result := policy.AggregateCheckResults(evaluator.EvaluatePod(restricted, &tmpl.ObjectMeta, &tmpl.Spec))
				if !result.Allowed {
					t.Errorf("Deployment %s violates the restricted Pod Security Standard: %s", d.Name, result.ForbiddenDetail())
				}
				for _, p := range podProblems(tmpl) {
					t.Errorf("Deployment %s: %s", d.Name, p)
				}
				sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
					t.Errorf("Deployment %s: selector %v does not match its pods (%v)", d.Name, d.Spec.Selector, err)
				}
			}
		})
	}
}

func podProblems(tmpl *corev1.PodTemplateSpec) []string {
	var out []string
	spec := &tmpl.Spec
	psc := spec.SecurityContext
	if psc == nil || !isTrue(psc.RunAsNonRoot) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		out = append(out, fmt.Sprintf("pod securityContext %+v, want runAsNonRoot and RuntimeDefault seccomp", psc))
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		out = append(out, "the pod mounts a service account token")
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		out = append(out, "no topologySpreadConstraints")
	}
	for _, c := range spec.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if c.LabelSelector == nil || err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
			out = append(out, fmt.Sprintf("topology spread over %s does not select the pod itself", c.TopologyKey))
		}
	}
	if len(spec.InitContainers) > 0 || len(spec.EphemeralContainers) > 0 {
		out = append(out, "init or ephemeral containers are not checked here")
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, p := range containerProblems(c) {
			out = append(out, "container "+c.Name+": "+p)
		}
	}
	return out
}

func containerProblems(c *corev1.Container) []string {
	var out []string
	if c.Image == "" || strings.HasSuffix(c.Image, ":") {
		out = append(out, fmt.Sprintf("image %q", c.Image))
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
		if p.probe == nil {
			if p.name != "startupProbe" {
				out = append(out, "no "+p.name)
			}
			continue
		}
		var port intstr.IntOrString
		switch h := p.probe.ProbeHandler; {
		case h.HTTPGet != nil:
			port = h.HTTPGet.Port
		case h.TCPSocket != nil:
			port = h.TCPSocket.Port
		case h.Exec == nil && h.GRPC == nil:
			out = append(out, p.name+" has no handler")
		}
		if !hasPort(c, port) {
			out = append(out, fmt.Sprintf("%s on port %s, which the container does not declare", p.name, port.String()))
		}
	}
	req, lim := c.Resources.Requests, c.Resources.Limits
	for _, want := range []struct {
		what string
		list corev1.ResourceList
		name corev1.ResourceName
	}{{"requests", req, corev1.ResourceCPU}, {"requests", req, corev1.ResourceMemory}, {"limits", lim, corev1.ResourceMemory}} {
		if q, ok := want.list[want.name]; !ok || q.IsZero() {
			out = append(out, fmt.Sprintf("no %s %s", want.name, want.what))
		}
	}
	if q, ok := lim[corev1.ResourceMemory]; ok && q.Cmp(req[corev1.ResourceMemory]) < 0 {
		out = append(out, "memory limit below the request")
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		out = append(out, "no securityContext")
	case !isTrue(sc.RunAsNonRoot), sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		!isTrue(sc.ReadOnlyRootFilesystem), isTrue(sc.Privileged),
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0,
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		out = append(out, fmt.Sprintf("securityContext %+v is not the restricted one", sc))
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }

// hasPort reports whether port (a number or a name; zero for none) is one the container
// declares.
func hasPort(c *corev1.Container, port intstr.IntOrString) bool {
	if port.Type == intstr.Int && port.IntVal == 0 {
		return true
	}
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

// Every reference between rendered objects resolves: Services, PDBs, NetworkPolicies and
// ServiceMonitors select pods or Services that exist, on ports they declare; HPAs scale a
// Deployment that leaves its replicas to them; volumes, env and image pull Secrets name
// objects rendered or expected to exist; $(VAR) in arguments names a variable defined
// before; the pylon relays to the engine's port, registers through the headless Service
// and advertises its own port.
func TestReferences(t *testing.T) {
	t.Parallel()
	for _, vc := range valuesCases {
		t.Run(vc.name, func(t *testing.T) {
			t.Parallel()
			o := render(t, vc)
			for _, p := range referenceProblems(o, external[vc.name]) {
				t.Error(p)
			}
		})
	}
}

func referenceProblems(o *objects, external []string) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	pods := map[string]*corev1.PodTemplateSpec{}
	for _, d := range o.deployments {
		pods[d.Name] = &d.Spec.Template
	}
	// selected returns the pod templates a selector matches.
	selected := func(sel labels.Selector) []*corev1.PodTemplateSpec {
		var m []*corev1.PodTemplateSpec
		for _, d := range o.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				m = append(m, &d.Spec.Template)
			}
		}
		return m
	}
	declares := func(tmpls []*corev1.PodTemplateSpec, port intstr.IntOrString) bool {
		for _, p := range tmpls {
			for i := range p.Spec.Containers {
				if hasPort(&p.Spec.Containers[i], port) {
					return true
				}
			}
		}
		return false
	}
	named := map[string]bool{}
	for _, n := range external {
		named[n] = true
	}
	for _, s := range o.secrets {
		named[s.Name] = true
	}
	for _, c := range o.configMaps {
		named[c.Name] = true
	}
	for _, s := range o.serviceAccounts {
		named[s.Name] = true
	}
	services := map[string]*corev1.Service{}
	for _, s := range o.services {
		services[s.Name] = s
		tmpls := selected(labels.SelectorFromSet(s.Spec.Selector))
		if len(tmpls) != 1 {
			bad("Service %s selects %d Deployments' pods, want 1", s.Name, len(tmpls))
		}
		for _, p := range s.Spec.Ports {
			if !declares(tmpls, p.TargetPort) {
				bad("Service %s: target port %s is not declared by its pods", s.Name, p.TargetPort.String())
			}
		}
	}
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || len(selected(sel)) != 1 {
			bad("PodDisruptionBudget %s does not select one Deployment's pods (%v)", p.Name, err)
		}
	}
	for _, h := range o.hpas {
		ref := h.Spec.ScaleTargetRef
		d := slices.IndexFunc(o.deployments, func(d2 *appsv1.Deployment) bool { return d2.Name == ref.Name })
		switch {
		case ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || d < 0:
			bad("HPA %s scales %s %s, which is not rendered", h.Name, ref.Kind, ref.Name)
		case o.deployments[d].Spec.Replicas != nil:
			bad("HPA %s scales Deployment %s, which sets replicas itself", h.Name, ref.Name)
		}
	}
	for _, n := range o.networkPolicies {
		sel, err := metav1.LabelSelectorAsSelector(&n.Spec.PodSelector)
		tmpls := selected(sel)
		if err != nil || len(tmpls) != 1 {
			bad("NetworkPolicy %s does not select one Deployment's pods (%v)", n.Name, err)
		}
		for _, rule := range n.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && !declares(tmpls, *p.Port) {
					bad("NetworkPolicy %s admits port %s, which its pods do not declare", n.Name, p.Port.String())
				}
			}
			for _, peer := range rule.From {
				if peer.PodSelector != nil && peer.NamespaceSelector == nil {
					s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
					if err != nil || len(selected(s)) == 0 {
						bad("NetworkPolicy %s admits pods %v, which match no Deployment", n.Name, peer.PodSelector)
					}
				}
			}
		}
	}
	for _, sm := range o.serviceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			bad("ServiceMonitor %s: %v", sm.Name, err)
			continue
		}
		for i := range sm.Spec.Endpoints {
			ep := &sm.Spec.Endpoints[i]
			found := false
			for _, s := range o.services {
				if sel.Matches(labels.Set(s.Labels)) && slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					found = true
				}
			}
			if !found {
				bad("ServiceMonitor %s: no selected Service has a port %s", sm.Name, ep.Port)
			}
			var secrets []string
			if a := ep.Authorization; a != nil && a.Credentials != nil {
				secrets = append(secrets, a.Credentials.Name)
			}
			if tc := ep.TLSConfig; tc != nil {
				if tc.CA.Secret != nil {
					secrets = append(secrets, tc.CA.Secret.Name)
				}
				if tc.Cert.Secret != nil {
					secrets = append(secrets, tc.Cert.Secret.Name)
				}
				if tc.KeySecret != nil {
					secrets = append(secrets, tc.KeySecret.Name)
				}
			}
			for _, s := range secrets {
				if !named[s] {
					bad("ServiceMonitor %s uses Secret %s, which is neither rendered nor expected", sm.Name, s)
				}
			}
		}
	}
	for name, p := range pods {
		if sa := p.Spec.ServiceAccountName; sa != "" && !named[sa] {
			bad("Deployment %s runs as ServiceAccount %s, which is not rendered", name, sa)
		}
		for _, s := range p.Spec.ImagePullSecrets {
			if !named[s.Name] {
				bad("Deployment %s pulls with Secret %s, which is not expected", name, s.Name)
			}
		}
		volumes := map[string]bool{}
		for i := range p.Spec.Volumes {
			v := &p.Spec.Volumes[i]
			volumes[v.Name] = true
			var ref string
			switch {
			case v.Secret != nil:
				ref = v.Secret.SecretName
			case v.ConfigMap != nil:
				ref = v.ConfigMap.Name
			case v.PersistentVolumeClaim != nil:
				ref = v.PersistentVolumeClaim.ClaimName
			}
			if ref != "" && !named[ref] {
				bad("Deployment %s: volume %s uses %s, which is neither rendered nor expected", name, v.Name, ref)
			}
		}
		for i := range p.Spec.Containers {
			c := &p.Spec.Containers[i]
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					bad("Deployment %s, container %s mounts volume %s, which the pod lacks", name, c.Name, m.Name)
				}
			}
			defined := map[string]bool{}
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !named[r.SecretKeyRef.Name] {
					bad("Deployment %s, container %s: env %s uses Secret %s, which is not expected", name, c.Name, e.Name, r.SecretKeyRef.Name)
				}
				defined[e.Name] = true
			}
			for _, a := range slices.Concat(c.Command, c.Args) {
				for _, m := range varRef.FindAllStringSubmatch(a, -1) {
					if !defined[m[1]] {
						bad("Deployment %s, container %s: %s names $(%s), which its env does not define", name, c.Name, a, m[1])
					}
				}
			}
		}
	}
	return append(out, wiringProblems(o, services)...)
}

// Kubernetes' $(VAR) references in command and args.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// wiringProblems checks the addresses the pylon is given against the objects they point at.
func wiringProblems(o *objects, services map[string]*corev1.Service) []string {
	var out []string
	for _, d := range o.deployments {
		var engine, pylon *corev1.Container
		for i := range d.Spec.Template.Spec.Containers {
			switch c := &d.Spec.Template.Spec.Containers[i]; c.Name {
			case "engine":
				engine = c
			case "pylon":
				pylon = c
			}
		}
		if pylon == nil {
			continue
		}
		flags := map[string]string{}
		for _, a := range pylon.Args {
			k, v, _ := strings.Cut(a, "=")
			flags[k] = v
		}
		if u, err := url.Parse(flags["--upstream-http-base-url"]); err != nil || engine == nil ||
			!hasPort(engine, intstr.Parse(u.Port())) || u.Hostname() != "127.0.0.1" {
			out = append(out, fmt.Sprintf("pylon relays to %q, not to its engine's declared port on the pod's loopback", flags["--upstream-http-base-url"]))
		}
		host, port, err := net.SplitHostPort(strings.TrimPrefix(flags["--gateway-dns"], "https://"))
		s := services[host]
		if err != nil || s == nil || s.Spec.ClusterIP != corev1.ClusterIPNone || !s.Spec.PublishNotReadyAddresses ||
			!slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port }) {
			out = append(out, fmt.Sprintf("pylon --gateway-dns %q is not a headless Service's port publishing not-ready gateways", flags["--gateway-dns"]))
		}
		if u, err := url.Parse(flags["--advertise-url"]); err != nil || !hasPort(pylon, intstr.Parse(u.Port())) ||
			u.Hostname() != "$(POD_IP)" || (u.Scheme == "https") != (flags["--tls-cert-file"] != "") {
			out = append(out, fmt.Sprintf("pylon advertises %q, not its pod IP and data port with its own scheme", flags["--advertise-url"]))
		}
	}
	return out
}
