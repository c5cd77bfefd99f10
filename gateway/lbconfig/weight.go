package lbconfig

import "fmt"

// RendezvousWeight is rendezvous_weight (pulsar and pulsar-wait-and-widen): which
// throughput weighs a cluster in the rendezvous ranking.
type RendezvousWeight uint8

// The rendezvous weights.
const (
	// WeightDefault is the unset value: the same as WeightMaxInputTPS.
	WeightDefault RendezvousWeight = iota
	// WeightMaxInputTPS ("max-input-tps", the default) weighs a cluster by the peak mean
	// input throughput its backends reported for the model: it moves only when a cluster
	// becomes faster than ever before, so the ranking (and the clusters' prompt caches)
	// stays put while traffic moves the means.
	WeightMaxInputTPS
	// WeightLastMeanInputTPS ("last-mean-input-tps") weighs a cluster by its latest mean
	// input throughput: the ranking moves with traffic.
	WeightLastMeanInputTPS
)

// String returns the configuration name of w.
func (w RendezvousWeight) String() string {
	switch w {
	case WeightDefault, WeightMaxInputTPS:
		return "max-input-tps"
	case WeightLastMeanInputTPS:
		return "last-mean-input-tps"
	default:
		return fmt.Sprintf("rendezvous_weight(%d)", uint8(w))
	}
}

// ParseRendezvousWeight resolves a rendezvous_weight name.
func ParseRendezvousWeight(name string) (RendezvousWeight, error) {
	switch name {
	case "max-input-tps":
		return WeightMaxInputTPS, nil
	case "last-mean-input-tps":
		return WeightLastMeanInputTPS, nil
	default:
		return WeightDefault, fmt.Errorf("rendezvous_weight must be max-input-tps or last-mean-input-tps, not %q", name)
	}
}
