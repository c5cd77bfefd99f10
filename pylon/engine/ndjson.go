// Package engine ingests an inference engine's own load reports for the pylon: the NDJSON
// stats stream with its pings, the /kv-cache/stats poll, and Prometheus /metrics scrapers
// for vLLM and SGLang. Parsers are pure functions; the loops own their HTTP client and
// report to a Sink.
package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/switchyard/switchyard/pylon/stats"
)

// MaxLineBytes is the longest NDJSON line accepted.
const MaxLineBytes = 64 << 10

// Event types of the stats stream.
const (
	EventStats = "stats"
	EventPing  = "ping"
)

// Event is one parsed stats-stream line.
type Event struct {
	Type  string
	Model string
	// Stats is set for a stats event.
	Stats *stats.RequestEvent
	// Concurrency is set for a ping carrying max_engine_concurrency.
	Concurrency *stats.ConcurrencyReport
}

// ErrInvalidEvent classifies malformed lines; InvalidEventError carries the reason.
var ErrInvalidEvent = errors.New("invalid stats event")

// InvalidEventError is a malformed line with a bounded reason (a metric label).
type InvalidEventError struct {
	Reason string
	Err    error
}

func (e *InvalidEventError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("invalid stats event (%s): %v", e.Reason, e.Err)
	}
	return "invalid stats event (" + e.Reason + ")"
}

// Unwrap returns ErrInvalidEvent and the cause.
func (e *InvalidEventError) Unwrap() []error { return []error{ErrInvalidEvent, e.Err} }

// Invalid-event reasons.
const (
	ReasonJSON         = "json"
	ReasonVersion      = "version"
	ReasonType         = "type"
	ReasonMissingField = "missing_field"
	ReasonNoCounter    = "no_counter"
	ReasonTooLong      = "too_long"
)

type wireEvent struct {
	V                    *int    `json:"v"`
	Type                 string  `json:"type"`
	RequestID            string  `json:"request_id"`
	Model                string  `json:"model"`
	TokensProcessed      *uint64 `json:"tokens_processed"`
	TokensGenerated      *uint64 `json:"tokens_generated"`
	Finished             bool    `json:"finished"`
	MaxEngineConcurrency *uint64 `json:"max_engine_concurrency"`
}

func invalid(reason string, err error) (Event, error) {
	return Event{}, &InvalidEventError{Reason: reason, Err: err}
}

// ParseLine parses one non-empty NDJSON line (surrounding whitespace ignored).
func ParseLine(line []byte) (Event, error) {
	line = bytes.TrimSpace(line)
	if len(line) > MaxLineBytes {
		return invalid(ReasonTooLong, nil)
	}
	var w wireEvent
	if err := json.Unmarshal(line, &w); err != nil {
		return invalid(ReasonJSON, err)
	}
	if w.V == nil || *w.V != 1 {
		return invalid(ReasonVersion, nil)
	}
	switch w.Type {
	case EventPing:
		ev := Event{Type: EventPing, Model: w.Model}
		if w.MaxEngineConcurrency != nil {
			if w.Model == "" {
				return invalid(ReasonMissingField, errors.New("max_engine_concurrency needs model"))
			}
			ev.Concurrency = &stats.ConcurrencyReport{MaxEngineConcurrency: *w.MaxEngineConcurrency}
		}
		return ev, nil
	case EventStats:
		if w.RequestID == "" || w.Model == "" {
			return invalid(ReasonMissingField, errors.New("request_id and model are required"))
		}
		if w.TokensProcessed == nil && w.TokensGenerated == nil && !w.Finished {
			return invalid(ReasonNoCounter, nil)
		}
		s := &stats.RequestEvent{RequestID: w.RequestID, Finished: w.Finished}
		if w.TokensProcessed != nil {
			s.TokensProcessed = *w.TokensProcessed
		}
		if w.TokensGenerated != nil {
			s.TokensGenerated = *w.TokensGenerated
		}
		return Event{Type: EventStats, Model: w.Model, Stats: s}, nil
	default:
		return invalid(ReasonType, nil)
	}
}
