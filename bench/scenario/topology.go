package scenario

import (
	"math"
	"strconv"
	"strings"
)

// DefaultProfile is used when backends has neither profile nor profiles.
var DefaultProfile = Profile{
	Name:                  "default",
	MaxConcurrentRequests: 4,
	ServiceTimeMs:         ServiceTime{TTFTMean: 100, DecodeTokensPerS: 100},
	Registration:          Registration{LastMeanInputTPS: 1000},
}

// EngineOutputTokens is the engine's default output length (--num-tokens) in a run; the
// driver overrides it per request with x-output-tokens.
const EngineOutputTokens = 32

// Backend is one pylon of the fleet.
type Backend struct {
	// Index is the backend index (0-based), as in degradation actions.
	Index int
	// ID is the pylon's inference server id, "backend-<index>".
	ID string
	// Cluster is the index of the backend's cluster (and shared engine).
	Cluster int
	// ClusterID is the cluster id the pylon registers with.
	ClusterID string
	// Profile is the backend's profile.
	Profile Profile
}

// Cluster is one engine shared by PylonsPerCluster consecutive backends.
type Cluster struct {
	Index    int
	ID       string
	Backends []int
	Profile  Profile
}

// Topology is the fleet a validated scenario describes.
type Topology struct {
	Backends []Backend
	Clusters []Cluster
}

// Topology returns the backends and clusters of s (which must be valid).
func (s *Scenario) Topology() Topology {
	b := &s.Backends
	ppc := b.pylonsPerCluster()
	profileOf := func(i int) Profile {
		if len(b.Profiles) > 0 {
			return b.Profiles[b.profileGroupOf()[i]].Profile
		}
		if b.Profile != nil {
			return *b.Profile
		}
		return DefaultProfile
	}
	var t Topology
	for i := range b.Count {
		c := i / ppc
		id := "backend-" + strconv.Itoa(i)
		cid := id
		if b.ClusterIDTemplate != "" {
			cid = strings.ReplaceAll(b.ClusterIDTemplate, ClusterIndexPlaceholder, strconv.Itoa(c))
		}
		pr := profileOf(i)
		t.Backends = append(t.Backends, Backend{Index: i, ID: id, Cluster: c, ClusterID: cid, Profile: pr})
		if c == len(t.Clusters) {
			t.Clusters = append(t.Clusters, Cluster{Index: c, ID: cid, Profile: pr})
		}
		t.Clusters[c].Backends = append(t.Clusters[c].Backends, i)
	}
	return t
}

// EngineFlags are the mock engine's settings for one cluster, before the listen address and
// time scale are added.
type EngineFlags struct {
	TokenDelayMs          float64
	DecodeJitterMs        float64
	TTFTMs                float64
	TTFTJitterMs          float64
	PrefillTokensPerS     float64
	MaxConcurrentRequests int
	KVCacheCapacityTokens uint64
	// HideConcurrency runs the engine with --no-advertise-concurrency.
	HideConcurrency bool
}

// Engine returns the engine settings of cluster c: the profile scaled by the number of
// pylons sharing the engine.
func (c *Cluster) Engine() EngineFlags {
	st := c.Profile.ServiceTimeMs
	delay := 1.0
	if st.DecodeTokensPerS > 0 {
		delay = math.Max(1, math.Floor(1000/st.DecodeTokensPerS))
	}
	n := len(c.Backends)
	return EngineFlags{
		TokenDelayMs:          delay,
		DecodeJitterMs:        st.DecodeJitterMs,
		TTFTMs:                st.TTFTMean,
		TTFTJitterMs:          st.TTFTJitterMs,
		PrefillTokensPerS:     st.PrefillTokensPerS,
		MaxConcurrentRequests: c.Profile.MaxConcurrentRequests * n,
		KVCacheCapacityTokens: c.Profile.KVCacheCapacityTokens * uint64(n),
		HideConcurrency:       c.Profile.AdvertiseConcurrency != nil && !*c.Profile.AdvertiseConcurrency,
	}
}
