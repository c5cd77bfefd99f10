package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/gateway/lbconfig"
)

// ClusterIndexPlaceholder is replaced by the cluster index in cluster_id_template.
const ClusterIndexPlaceholder = "{cluster_index}"

// problems collects precise messages, each prefixed with the field path.
type problems struct{ errs []error }

func (p *problems) add(path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: %s: %s", ErrInvalid, path, fmt.Sprintf(format, args...)))
}

// Validate returns one precise error per problem, joined, each wrapping ErrInvalid.
func (s *Scenario) Validate() error {
	var p problems
	if strings.TrimSpace(s.Name) == "" {
		p.add("name", "must not be empty")
	}
	if strings.TrimSpace(s.Model) == "" {
		p.add("model", "must not be empty")
	}
	if s.RequestCount <= 0 {
		p.add("request_count", "is %d, want > 0", s.RequestCount)
	}
	if s.MaxConcurrency <= 0 {
		p.add("max_concurrency", "is %d, want > 0", s.MaxConcurrency)
	}
	switch s.Stargates.ClientSpread {
	case "", ClientSpreadRoundRobin, ClientSpreadAffinityKey:
	default:
		p.add("stargates.client_spread", "is %q, want %s or %s", s.Stargates.ClientSpread, ClientSpreadRoundRobin, ClientSpreadAffinityKey)
	}
	if s.Stargates.Count != nil && *s.Stargates.Count < 1 {
		p.add("stargates.count", "is %d, want ≥ 1", *s.Stargates.Count)
	}
	s.validateBackends(&p)
	s.TrafficPattern.validate(&p)
	s.validateDegradation(&p)
	s.validateAlgorithms(&p)
	s.validateExpect(&p)
	return errors.Join(p.errs...)
}

func (s *Scenario) validateBackends(p *problems) {
	b := &s.Backends
	if b.Count <= 0 {
		p.add("backends.count", "is %d, want > 0", b.Count)
		return
	}
	ppc := b.pylonsPerCluster()
	if b.PylonsPerCluster < 0 {
		p.add("backends.pylons_per_cluster", "is %d, want ≥ 1", b.PylonsPerCluster)
	}
	if ppc > 1 {
		if !strings.Contains(b.ClusterIDTemplate, ClusterIndexPlaceholder) {
			p.add("backends.cluster_id_template", "%q must contain %s when pylons_per_cluster is %d", b.ClusterIDTemplate, ClusterIndexPlaceholder, ppc)
		}
		if b.Count%ppc != 0 {
			p.add("backends.count", "%d is not divisible by pylons_per_cluster %d", b.Count, ppc)
		}
	}
	if b.Profile != nil {
		b.Profile.validate(p, "backends.profile")
	}
	if len(b.Profiles) == 0 {
		return
	}
	sum := 0
	for i := range b.Profiles {
		g := &b.Profiles[i]
		path := fmt.Sprintf("backends.profiles[%d]", i)
		if g.Count <= 0 {
			p.add(path+".count", "is %d, want > 0", g.Count)
		}
		sum += g.Count
		g.Profile.validate(p, path+".profile")
	}
	if sum != b.Count {
		p.add("backends.profiles", "counts sum to %d, want backends.count %d", sum, b.Count)
		return
	}
	if ppc > 1 && b.Count%ppc == 0 {
		groups := b.profileGroupOf()
		for c := 0; c < b.Count/ppc; c++ {
			first := groups[c*ppc]
			for i := c*ppc + 1; i < (c+1)*ppc; i++ {
				if groups[i] != first {
					p.add("backends.profiles", "cluster %d mixes profiles %q and %q; all pylons of a cluster must share one profile",
						c, b.Profiles[first].Profile.Name, b.Profiles[groups[i]].Profile.Name)
					break
				}
			}
		}
	}
}

// profileGroupOf maps each backend index to its index in Profiles.
func (b *Backends) profileGroupOf() []int {
	out := make([]int, 0, b.Count)
	for gi := range b.Profiles {
		for range b.Profiles[gi].Count {
			out = append(out, gi)
		}
	}
	return out
}

func (pr *Profile) validate(p *problems, path string) {
	if pr.Weight != nil && !(*pr.Weight >= 0) {
		p.add(path+".weight", "is %v, want ≥ 0", *pr.Weight)
	}
	if pr.MaxConcurrentRequests < 0 {
		p.add(path+".max_concurrent_requests", "is %d, want ≥ 0", pr.MaxConcurrentRequests)
	}
	st := pr.ServiceTimeMs
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"ttft_mean", st.TTFTMean},
		{"ttft_jitter_ms", st.TTFTJitterMs},
		{"decode_jitter_ms", st.DecodeJitterMs},
		{"prefill_tokens_per_s", st.PrefillTokensPerS},
		{"decode_tokens_per_s", st.DecodeTokensPerS},
	} {
		if !finiteNonNegative(f.v) {
			p.add(path+".service_time_ms."+f.name, "is %v, want a finite value ≥ 0", f.v)
		}
	}
	if !finiteNonNegative(pr.Registration.LastMeanInputTPS) {
		p.add(path+".registration.last_mean_input_tps", "is %v, want a finite value ≥ 0", pr.Registration.LastMeanInputTPS)
	}
}

func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

func positive(v *float64) bool { return v != nil && *v > 0 && !math.IsInf(*v, 0) }

// field is one optional traffic_pattern field and whether the document set it.
type field struct {
	name string
	set  bool
}

// kindFields lists the kind-specific fields each kind accepts (routing_keys and
// cache_affinity_keys are common to all).
var kindFields = map[string][]string{
	KindUniform:     {"input_tokens", "output_tokens", "arrival"},
	KindHotset:      {"input_tokens", "output_tokens", "arrival", "hotset_fraction", "hotset_share"},
	KindBursty:      {"input_tokens", "output_tokens", "quiet_rps", "burst_rps", "burst_period_requests"},
	KindStairStep:   {"input_tokens", "output_tokens", "start_rps", "step_rps", "step_requests"},
	KindMixedSize:   {"arrival", "small_share", "small", "large"},
	KindPrefixReuse: {"initial_input_tokens", "incremental_input_tokens", "output_tokens", "arrival"},
}

// Kinds returns the traffic pattern kinds, sorted.
func Kinds() []string {
	out := make([]string, 0, len(kindFields))
	for k := range kindFields {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (t *TrafficPattern) fields() []field {
	return []field{
		{"input_tokens", t.InputTokens != nil},
		{"output_tokens", t.OutputTokens != nil},
		{"arrival", t.Arrival != nil},
		{"hotset_fraction", t.HotsetFraction != nil},
		{"hotset_share", t.HotsetShare != nil},
		{"quiet_rps", t.QuietRPS != nil},
		{"burst_rps", t.BurstRPS != nil},
		{"burst_period_requests", t.BurstPeriodRequests != nil},
		{"start_rps", t.StartRPS != nil},
		{"step_rps", t.StepRPS != nil},
		{"step_requests", t.StepRequests != nil},
		{"small_share", t.SmallShare != nil},
		{"small", t.Small != nil},
		{"large", t.Large != nil},
		{"initial_input_tokens", t.InitialInputTokens != nil},
		{"incremental_input_tokens", t.IncrementalInputTokens != nil},
	}
}

func (t *TrafficPattern) validate(p *problems) {
	const path = "traffic_pattern"
	allowed, ok := kindFields[t.Kind]
	if !ok {
		p.add(path+".kind", "%q is not a traffic pattern kind (want one of %s)", t.Kind, strings.Join(Kinds(), ", "))
		return
	}
	for _, f := range t.fields() {
		if !f.set {
			continue
		}
		if !slices.Contains(allowed, f.name) {
			p.add(path+"."+f.name, "is not a field of kind %q (its fields: routing_keys, cache_affinity_keys, %s)", t.Kind, strings.Join(allowed, ", "))
		}
	}
	if t.RoutingKeys < 0 {
		p.add(path+".routing_keys", "is %d, want ≥ 0", t.RoutingKeys)
	}
	if t.CacheAffinityKeys < 0 {
		p.add(path+".cache_affinity_keys", "is %d, want ≥ 0", t.CacheAffinityKeys)
	}
	need := func(name string, d *Distribution) {
		if d == nil {
			p.add(path+"."+name, "is required for kind %q", t.Kind)
			return
		}
		d.validate(p, path+"."+name)
	}
	needArrival := func() {
		if t.Arrival == nil {
			p.add(path+".arrival", "is required for kind %q", t.Kind)
			return
		}
		t.Arrival.validate(p, path+".arrival")
	}
	switch t.Kind {
	case KindUniform:
		need("input_tokens", t.InputTokens)
		need("output_tokens", t.OutputTokens)
		needArrival()
	case KindHotset:
		need("input_tokens", t.InputTokens)
		need("output_tokens", t.OutputTokens)
		needArrival()
		unitInterval(p, path+".hotset_fraction", t.HotsetFraction)
		unitInterval(p, path+".hotset_share", t.HotsetShare)
	case KindBursty:
		need("input_tokens", t.InputTokens)
		need("output_tokens", t.OutputTokens)
		rate(p, path+".quiet_rps", t.QuietRPS)
		rate(p, path+".burst_rps", t.BurstRPS)
		count(p, path+".burst_period_requests", t.BurstPeriodRequests)
	case KindStairStep:
		need("input_tokens", t.InputTokens)
		need("output_tokens", t.OutputTokens)
		rate(p, path+".start_rps", t.StartRPS)
		switch {
		case t.StepRPS == nil:
			p.add(path+".step_rps", "is required")
		case !finiteNonNegative(*t.StepRPS):
			p.add(path+".step_rps", "is %v, want a finite value ≥ 0", *t.StepRPS)
		}
		count(p, path+".step_requests", t.StepRequests)
	case KindMixedSize:
		needArrival()
		unitInterval(p, path+".small_share", t.SmallShare)
		for _, c := range []struct {
			name string
			sc   *SizeClass
		}{{"small", t.Small}, {"large", t.Large}} {
			if c.sc == nil {
				p.add(path+"."+c.name, "is required for kind %q", t.Kind)
				continue
			}
			need(c.name+".input_tokens", c.sc.InputTokens)
			need(c.name+".output_tokens", c.sc.OutputTokens)
		}
	case KindPrefixReuse:
		need("initial_input_tokens", t.InitialInputTokens)
		need("incremental_input_tokens", t.IncrementalInputTokens)
		need("output_tokens", t.OutputTokens)
		needArrival()
		if t.CacheAffinityKeys <= 0 {
			p.add(path+".cache_affinity_keys", "is %d, want > 0 for kind %q (one key per session)", t.CacheAffinityKeys, t.Kind)
		}
	}
}

func unitInterval(p *problems, path string, v *float64) {
	switch {
	case v == nil:
		p.add(path, "is required")
	case !(*v >= 0 && *v <= 1):
		p.add(path, "is %v, want a value in [0, 1]", *v)
	}
}

func rate(p *problems, path string, v *float64) {
	switch {
	case v == nil:
		p.add(path, "is required")
	case !positive(v):
		p.add(path, "is %v, want a finite value > 0", *v)
	}
}

func count(p *problems, path string, v *int) {
	switch {
	case v == nil:
		p.add(path, "is required")
	case *v <= 0:
		p.add(path, "is %d, want > 0", *v)
	}
}

func (d *Distribution) validate(p *problems, path string) {
	set := map[string]bool{
		"value": d.Value != nil, "min": d.Min != nil, "max": d.Max != nil,
		"mean": d.Mean != nil, "sigma": d.Sigma != nil, "p99_cap": d.P99Cap != nil,
	}
	var allowed []string
	switch d.Distribution {
	case DistConstant:
		allowed = []string{"value"}
		if d.Value == nil || !finiteNonNegative(*d.Value) {
			p.add(path+".value", "is required and must be a finite value ≥ 0")
		}
	case DistUniform:
		allowed = []string{"min", "max"}
		switch {
		case d.Min == nil || d.Max == nil:
			p.add(path, "uniform needs min and max")
		case !finiteNonNegative(*d.Min) || !finiteNonNegative(*d.Max):
			p.add(path, "uniform min %v and max %v must be finite values ≥ 0", *d.Min, *d.Max)
		case *d.Min > *d.Max:
			p.add(path, "uniform min %v is above max %v", *d.Min, *d.Max)
		}
	case DistLognormal:
		allowed = []string{"mean", "sigma", "min", "p99_cap"}
		if !positive(d.Mean) {
			p.add(path+".mean", "is required and must be a finite value > 0 (it is the median)")
		}
		if d.Sigma == nil || !finiteNonNegative(*d.Sigma) {
			p.add(path+".sigma", "is required and must be a finite value ≥ 0")
		}
		if d.Min != nil && d.P99Cap != nil && *d.Min > *d.P99Cap {
			p.add(path, "lognormal min %v is above p99_cap %v", *d.Min, *d.P99Cap)
		}
	default:
		p.add(path+".distribution", "%q is not a token distribution (want constant, uniform or lognormal)", d.Distribution)
		return
	}
	for _, name := range []string{"value", "min", "max", "mean", "sigma", "p99_cap"} {
		if set[name] && !slices.Contains(allowed, name) {
			p.add(path+"."+name, "is not a field of distribution %q (its fields: %s)", d.Distribution, strings.Join(allowed, ", "))
		}
	}
}

func (a *Arrival) validate(p *problems, path string) {
	switch a.Distribution {
	case ArrivalConstant:
		if a.IntervalMs == nil || !finiteNonNegative(*a.IntervalMs) {
			p.add(path+".interval_ms", "is required and must be a finite value ≥ 0")
		}
		if a.TargetRPS != nil {
			p.add(path+".target_rps", "is not a field of arrival %q (its field: interval_ms)", a.Distribution)
		}
	case ArrivalPoisson:
		if !positive(a.TargetRPS) {
			p.add(path+".target_rps", "is required and must be a finite value > 0")
		}
		if a.IntervalMs != nil {
			p.add(path+".interval_ms", "is not a field of arrival %q (its field: target_rps)", a.Distribution)
		}
	default:
		p.add(path+".distribution", "%q is not an arrival distribution (want constant or poisson)", a.Distribution)
	}
}

var actions = []string{
	ActionDeleteBackendPod, ActionScaleBackend, ActionKillEngine, ActionKillPylon, ActionRestartEngine, ActionRestartPylon,
}

func (s *Scenario) validateDegradation(p *problems) {
	for i, a := range s.Degradation.Actions {
		path := fmt.Sprintf("degradation.actions[%d]", i)
		if a.AtRequest < 0 || (s.RequestCount > 0 && a.AtRequest >= s.RequestCount) {
			p.add(path+".at_request", "is %d, want 0 ≤ at_request < request_count %d", a.AtRequest, s.RequestCount)
		}
		if a.BackendIndex < 0 || (s.Backends.Count > 0 && a.BackendIndex >= s.Backends.Count) {
			p.add(path+".backend_index", "is %d, want 0 ≤ backend_index < backends.count %d", a.BackendIndex, s.Backends.Count)
		}
		if !slices.Contains(actions, a.Action) {
			p.add(path+".action", "%q is not an action (want one of %s)", a.Action, strings.Join(actions, ", "))
		}
		if a.Action == ActionScaleBackend && a.Replicas == nil {
			p.add(path+".replicas", "is required for %s", ActionScaleBackend)
		}
		if a.Replicas != nil && *a.Replicas < 0 {
			p.add(path+".replicas", "is %d, want ≥ 0", *a.Replicas)
		}
	}
}

func (s *Scenario) validateAlgorithms(p *problems) {
	if len(s.Algorithms) == 0 {
		p.add("algorithms", "must list at least one algorithm")
	}
	seen := map[string]bool{}
	for i := range s.Algorithms {
		a := &s.Algorithms[i]
		path := fmt.Sprintf("algorithms[%d]", i)
		switch {
		case strings.TrimSpace(a.Name) == "":
			p.add(path+".name", "must not be empty")
		case seen[a.Name]:
			p.add(path+".name", "%q is repeated", a.Name)
		}
		seen[a.Name] = true
		if _, err := a.LBConfigJSON(); err != nil {
			p.add(path+".config", "%s", OneLine(err))
		}
		if a.ClusterBackends != "" && a.ClusterBackends != ClusterBackendsSpread && a.ClusterBackends != ClusterBackendsLead {
			p.add(path+".cluster_backends", "is %q, want %q or %q", a.ClusterBackends, ClusterBackendsSpread, ClusterBackendsLead)
		}
		if a.Clients != "" && a.Clients != ClientsRoutingHeaders && a.Clients != ClientsPlain {
			p.add(path+".clients", "is %q, want %q or %q", a.Clients, ClientsRoutingHeaders, ClientsPlain)
		}
		if q := a.PylonQueueAdmission; q != nil {
			if q.MinDeltaMs != nil && !finiteNonNegative(*q.MinDeltaMs) {
				p.add(path+".pylon_queue_admission.min_delta_ms", "is %v, want a finite value ≥ 0", *q.MinDeltaMs)
			}
			if q.ToleranceFactor != nil && !positive(q.ToleranceFactor) {
				p.add(path+".pylon_queue_admission.tolerance_factor", "is %v, want a finite value > 0", *q.ToleranceFactor)
			}
		}
	}
}

// LBConfigJSON returns the algorithm's config as lb-config.json bytes, after checking
// that lbconfig.Parse accepts and validates it.
func (a *Algorithm) LBConfigJSON() ([]byte, error) {
	if a.Config == nil {
		return nil, errors.New("is required (a full lb-config.json object)")
	}
	doc, err := json.MarshalIndent(a.Config, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("cannot be rendered as JSON: %w", err)
	}
	c, err := lbconfig.Parse(doc)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return append(doc, '\n'), nil
}

// Ignored lists the fields this document sets that have no local meaning; reports say
// that they were ignored.
func (s *Scenario) Ignored() []string {
	var out []string
	if s.TunnelProtocol != "" {
		out = append(out, "tunnel_protocol (the gateway and pylons talk HTTP/1.1 on loopback)")
	}
	weights := s.Backends.Profile != nil && s.Backends.Profile.Weight != nil
	for _, g := range s.Backends.Profiles {
		weights = weights || g.Profile.Weight != nil
	}
	if weights {
		out = append(out, "backends profile weight (no local meaning)")
	}
	for i, a := range s.Degradation.Actions {
		if a.Action == ActionScaleBackend {
			out = append(out, fmt.Sprintf("degradation.actions[%d] scale_backend (not supported on a local fleet)", i))
		}
	}
	return out
}
