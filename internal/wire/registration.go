package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/switchyard/switchyard/engines/load"
)

// Model statuses of a registration.
const (
	StatusActive   = "ACTIVE"
	StatusInactive = "INACTIVE"
	StatusUnknown  = "UNKNOWN"
)

// RegistrationPath is the control endpoint prefix; the backend id follows it.
const RegistrationPath = "/control/v1/backends/"

// Registration is the full snapshot a pylon PUTs to RegistrationPath+ID every heartbeat
// and on change.
type Registration struct {
	ID          string `json:"inference_server_id"`
	URL         string `json:"inference_server_url"`
	ClusterID   string `json:"cluster_id,omitempty"`
	RoutingKey  string `json:"routing_key,omitempty"` // scope of the registration; empty = unscoped
	HeartbeatMs uint64 `json:"heartbeat_ms,omitempty"`
	DispatchSeq uint64 `json:"dispatch_seq,omitempty"` // highest x-switchyard-dispatch-seq admitted from the receiving gateway
	// EngineSlotShare is the number of its engine's concurrency slots the pylon fills with
	// requests expected to queue 0 ms, when several pylons front one engine (0: the whole
	// engine). Gateways count the pylon full once its own requests fill it.
	EngineSlotShare uint64           `json:"engine_slot_share,omitempty"`
	Models          map[string]Model `json:"models"`
}

// Model is one model's status and stats in a registration.
type Model struct {
	Status     string `json:"status"`
	Generation uint64 `json:"generation,omitempty"`
	// Build is the pylon's snapshot build the stats come from (see LoadReport.Build;
	// 0 = unknown, as from pylons that do not number their snapshots).
	Build uint64 `json:"build,omitempty"`
	Stats Stats  `json:"stats"`
}

// Stats are the 17 stats fields a pylon publishes per model, in their wire names (those of
// the reference pylon).
type Stats struct {
	LastMeanInputTPS        float64           `json:"last_mean_input_tps"`
	OutputTPS               float64           `json:"output_tps"`
	QueueSize               uint64            `json:"queue_size"`
	QueuedInputSize         uint64            `json:"queued_input_size"`
	MaxOutputTPS            float64           `json:"max_output_tps"`
	KVCacheCapacityTokens   uint64            `json:"kv_cache_capacity_tokens"`
	KVCacheUsedTokens       uint64            `json:"kv_cache_used_tokens"`
	KVCacheFreeTokens       uint64            `json:"kv_cache_free_tokens"`
	NumRunningQueries       uint64            `json:"num_running_queries"`
	MaxEngineConcurrency    uint64            `json:"max_engine_concurrency"`
	TotalQueryInputSize     uint64            `json:"total_query_input_size"`
	QueueTimeEstimateMs     map[string]uint64 `json:"queue_time_estimate_ms_by_priority,omitzero"`
	InputProcessingQueries  uint64            `json:"input_processing_queries"`
	OutputGenerationQueries uint64            `json:"output_generation_queries"`
	StatsObservedAtUnixMs   int64             `json:"stats_observed_at_unix_ms"`
	StatsCapabilities       []string          `json:"stats_capabilities,omitempty"`
	StatsSources            []string          `json:"stats_sources,omitempty"`
}

// RegistrationAck is the gateway's answer to a registration.
type RegistrationAck struct {
	GatewayID   string `json:"gateway_id"`
	HeartbeatMs uint64 `json:"heartbeat_ms"`
	// LoadUpdates says the gateway takes load updates (LoadUpdate) between full
	// registrations; absent (older gateways): full registrations only.
	LoadUpdates bool `json:"load_updates,omitempty"`
}

// StatsFromLoad converts a load to its wire stats.
func StatsFromLoad(l *load.Load) Stats {
	s := Stats{
		LastMeanInputTPS: l.InputTPS, OutputTPS: l.OutputTPS, QueueSize: l.QueueSize, QueuedInputSize: l.QueuedInputTokens,
		MaxOutputTPS: l.MaxOutputTPS, KVCacheCapacityTokens: l.KVCapacityTokens, KVCacheUsedTokens: l.KVUsedTokens,
		KVCacheFreeTokens: l.KVFreeTokens, NumRunningQueries: l.RunningRequests, MaxEngineConcurrency: l.MaxEngineConcurrency,
		TotalQueryInputSize: l.TotalInputTokens, InputProcessingQueries: l.InputProcessingRequests,
		OutputGenerationQueries: l.OutputGenerationRequests, StatsObservedAtUnixMs: l.ObservedAtUnixMilli,
		StatsCapabilities: l.Capabilities, StatsSources: l.Sources,
	}
	if l.QueueEstimates != nil {
		s.QueueTimeEstimateMs = make(map[string]uint64, len(l.QueueEstimates))
		for _, e := range l.QueueEstimates {
			s.QueueTimeEstimateMs[strconv.FormatUint(uint64(e.Priority), 10)] = e.QueueMs
		}
	}
	return s
}

// Load converts wire stats to a load; it fails on a priority key that is not a u32.
func (s *Stats) Load() (load.Load, error) {
	l := load.Load{
		InputTPS: s.LastMeanInputTPS, OutputTPS: s.OutputTPS, QueueSize: s.QueueSize, QueuedInputTokens: s.QueuedInputSize,
		MaxOutputTPS: s.MaxOutputTPS, KVCapacityTokens: s.KVCacheCapacityTokens, KVUsedTokens: s.KVCacheUsedTokens,
		KVFreeTokens: s.KVCacheFreeTokens, RunningRequests: s.NumRunningQueries, MaxEngineConcurrency: s.MaxEngineConcurrency,
		TotalInputTokens: s.TotalQueryInputSize, InputProcessingRequests: s.InputProcessingQueries,
		OutputGenerationRequests: s.OutputGenerationQueries, ObservedAtUnixMilli: s.StatsObservedAtUnixMs,
		Capabilities: s.StatsCapabilities, Sources: s.StatsSources,
	}
	if s.QueueTimeEstimateMs != nil {
		l.QueueEstimates = make([]load.PriorityEstimate, 0, len(s.QueueTimeEstimateMs))
		for _, k := range slices.Sorted(maps.Keys(s.QueueTimeEstimateMs)) {
			p, err := strconv.ParseUint(k, 10, 32)
			if err != nil {
				return load.Load{}, fmt.Errorf("queue_time_estimate_ms_by_priority: key %q is not a priority (u32)", k)
			}
			l.QueueEstimates = append(l.QueueEstimates, load.PriorityEstimate{Priority: uint32(p), QueueMs: s.QueueTimeEstimateMs[k]})
		}
		slices.SortFunc(l.QueueEstimates, func(a, b load.PriorityEstimate) int { return int(a.Priority) - int(b.Priority) })
	}
	return l, nil
}

// Registration validation errors.
var (
	ErrBadRegistration = errors.New("invalid registration")
)

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytesReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
