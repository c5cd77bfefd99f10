package wire

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Defaults of Limits.
const (
	DefaultMaxModels            = 256
	DefaultMinHeartbeatMs       = 100
	DefaultMaxHeartbeatMs       = 60_000
	DefaultMaxEngineConcurrency = 100_000
	DefaultMaxEstimateMs        = 3_600_000 // one hour
	DefaultMaxEstimates         = 64
	DefaultMaxIDBytes           = 128
	DefaultMaxModelBytes        = 256
	DefaultMaxURLBytes          = 2048
	DefaultMaxListEntries       = 64
	DefaultMaxListEntryBytes    = 128
	DefaultMaxBodyBytes         = 1 << 20
)

// Limits bound what one registration may declare. A registration over any of them is
// refused whole (the gateway answers 400 with the error text): without them one pylon, or
// anyone holding the control token, could make the gateway keep unbounded state (a routing
// target per model name), never expire a backend (a huge heartbeat) or route on numbers
// that mean nothing (a negative throughput). A zero field takes its default.
type Limits struct {
	// MaxModels is the most models one registration may list (default 256).
	MaxModels int
	// MinHeartbeatMs and MaxHeartbeatMs bound heartbeat_ms when it is set (defaults 100
	// and 60 000). 0, or no heartbeat_ms at all, means "use the gateway's default".
	MinHeartbeatMs, MaxHeartbeatMs uint64
	// MaxEngineConcurrency bounds stats.max_engine_concurrency (default 100 000).
	MaxEngineConcurrency uint64
	// MaxEstimateMs bounds each value of stats.queue_time_estimate_ms_by_priority (default
	// one hour) and MaxEstimates the number of its entries (default 64).
	MaxEstimateMs uint64
	MaxEstimates  int
	// MaxIDBytes bounds inference_server_id, cluster_id and routing_key (default 128).
	MaxIDBytes int
	// MaxModelBytes bounds a model name (default 256).
	MaxModelBytes int
	// MaxURLBytes bounds inference_server_url (default 2048).
	MaxURLBytes int
	// MaxListEntries bounds the entries of stats_capabilities and of stats_sources (default
	// 64) and MaxListEntryBytes each entry (default 128).
	MaxListEntries, MaxListEntryBytes int
	// MaxBodyBytes is the largest registration body (default 1 MiB). The HTTP server should
	// refuse a larger body before reading it; ParseRegistration refuses one it is given
	// without decoding it.
	MaxBodyBytes int
}

// DefaultLimits returns the limits ParseRegistration applies.
func DefaultLimits() Limits {
	return Limits{
		MaxModels:      DefaultMaxModels,
		MinHeartbeatMs: DefaultMinHeartbeatMs, MaxHeartbeatMs: DefaultMaxHeartbeatMs,
		MaxEngineConcurrency: DefaultMaxEngineConcurrency,
		MaxEstimateMs:        DefaultMaxEstimateMs, MaxEstimates: DefaultMaxEstimates,
		MaxIDBytes: DefaultMaxIDBytes, MaxModelBytes: DefaultMaxModelBytes, MaxURLBytes: DefaultMaxURLBytes,
		MaxListEntries: DefaultMaxListEntries, MaxListEntryBytes: DefaultMaxListEntryBytes,
		MaxBodyBytes: DefaultMaxBodyBytes,
	}
}

// withDefaults fills the zero fields of l.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	orDefault(&l.MaxModels, d.MaxModels)
	orDefault(&l.MinHeartbeatMs, d.MinHeartbeatMs)
	orDefault(&l.MaxHeartbeatMs, d.MaxHeartbeatMs)
	orDefault(&l.MaxEngineConcurrency, d.MaxEngineConcurrency)
	orDefault(&l.MaxEstimateMs, d.MaxEstimateMs)
	orDefault(&l.MaxEstimates, d.MaxEstimates)
	orDefault(&l.MaxIDBytes, d.MaxIDBytes)
	orDefault(&l.MaxModelBytes, d.MaxModelBytes)
	orDefault(&l.MaxURLBytes, d.MaxURLBytes)
	orDefault(&l.MaxListEntries, d.MaxListEntries)
	orDefault(&l.MaxListEntryBytes, d.MaxListEntryBytes)
	orDefault(&l.MaxBodyBytes, d.MaxBodyBytes)
	return l
}

// orDefault sets *v to def when it is 0 or negative.
func orDefault[T int | uint64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// ParseRegistration decodes and validates a registration body for backend id pathID: JSON
// with unknown fields rejected, the id matching the path, an http(s) URL with a host and
// port, known statuses, and every field within l (see Validate). An absent cluster_id
// becomes the id. Errors wrap ErrBadRegistration and name the field; a value they quote is
// cut to its first 64 bytes.
func (l Limits) ParseRegistration(pathID string, body []byte) (Registration, error) {
	l = l.withDefaults()
	if len(body) > l.MaxBodyBytes {
		return Registration{}, fmt.Errorf("%w: the body is %d bytes, over the limit of %d", ErrBadRegistration, len(body), l.MaxBodyBytes)
	}
	var r Registration
	if err := decodeRegistration(body, &r); err != nil {
		return Registration{}, fmt.Errorf("%w: %w", ErrBadRegistration, clipError(err))
	}
	if err := l.validate(pathID, &r); err != nil {
		return Registration{}, err
	}
	if r.ClusterID == "" {
		r.ClusterID = r.ID
	}
	return r, nil
}

// Validate checks a decoded registration against l (the checks of ParseRegistration but
// the path id). Errors wrap ErrBadRegistration.
func (l Limits) Validate(r *Registration) error {
	return l.withDefaults().validate(r.ID, r)
}

// maxReported is how many problems one error lists; the rest are only counted, so a
// registration with thousands of bad models gets a short answer.
const maxReported = 10

// problems collects a registration's problems, keeping the first maxReported.
type problems struct {
	errs  []error
	extra int
}

func (p *problems) add(format string, args ...any) {
	if len(p.errs) == maxReported {
		p.extra++
		return
	}
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	errs := p.errs
	if p.extra > 0 {
		errs = append(errs, fmt.Errorf("and %d more problems", p.extra))
	}
	return fmt.Errorf("%w: %w", ErrBadRegistration, errors.Join(errs...))
}

func (l Limits) validate(pathID string, r *Registration) error {
	var p problems
	if l.checkText(&p, "inference_server_id", r.ID, l.MaxIDBytes, true, true) && r.ID != pathID {
		p.add("inference_server_id %s does not match the path id %s", quote(r.ID), quote(pathID))
	}
	l.checkURL(&p, r.URL)
	l.checkText(&p, "cluster_id", r.ClusterID, l.MaxIDBytes, false, true)
	l.checkText(&p, "routing_key", r.RoutingKey, l.MaxIDBytes, false, false)
	if hb := r.HeartbeatMs; hb != 0 && (hb < l.MinHeartbeatMs || hb > l.MaxHeartbeatMs) {
		p.add("heartbeat_ms %d must be 0 (the gateway's default) or between %d and %d", hb, l.MinHeartbeatMs, l.MaxHeartbeatMs)
	}
	if n := len(r.Models); n > l.MaxModels {
		// The models are not looked at one by one: there are too many of them.
		p.add("models: %d models, over the limit of %d per backend", n, l.MaxModels)
		return p.err()
	}
	names := make([]string, 0, len(r.Models))
	for name := range r.Models {
		names = append(names, name)
	}
	slices.Sort(names) // the same registration gets the same error
	for _, name := range names {
		m := r.Models[name]
		if name == "" {
			p.add("models: a model name is empty")
		} else {
			l.checkText(&p, "models: model name", name, l.MaxModelBytes, true, false)
		}
		field := "models[" + quote(name) + "]"
		switch m.Status {
		case StatusActive, StatusInactive, StatusUnknown:
		default:
			p.add("%s.status %s must be ACTIVE, INACTIVE or UNKNOWN", field, quote(m.Status))
		}
		l.checkStats(&p, field+".stats", &m.Stats)
	}
	return p.err()
}

func (l Limits) checkStats(p *problems, field string, s *Stats) {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"last_mean_input_tps", s.LastMeanInputTPS},
		{"output_tps", s.OutputTPS},
		{"max_output_tps", s.MaxOutputTPS},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			p.add("%s.%s %g must be a finite number, 0 or more", field, f.name, f.v)
		}
	}
	if s.MaxEngineConcurrency > l.MaxEngineConcurrency {
		p.add("%s.max_engine_concurrency %d is over the limit of %d", field, s.MaxEngineConcurrency, l.MaxEngineConcurrency)
	}
	if s.StatsObservedAtUnixMs < 0 {
		p.add("%s.stats_observed_at_unix_ms %d must not be negative", field, s.StatsObservedAtUnixMs)
	}
	const estimates = "queue_time_estimate_ms_by_priority"
	if n := len(s.QueueTimeEstimateMs); n > l.MaxEstimates {
		p.add("%s.%s: %d entries, over the limit of %d", field, estimates, n, l.MaxEstimates)
	} else {
		for _, k := range slices.Sorted(maps.Keys(s.QueueTimeEstimateMs)) {
			if _, err := strconv.ParseUint(k, 10, 32); err != nil {
				p.add("%s.%s: key %s is not a priority (u32)", field, estimates, quote(k))
			}
			if v := s.QueueTimeEstimateMs[k]; v > l.MaxEstimateMs {
				p.add("%s.%s[%s] %d ms is over the limit of %d ms", field, estimates, quote(k), v, l.MaxEstimateMs)
			}
		}
	}
	l.checkList(p, field+".stats_capabilities", s.StatsCapabilities)
	l.checkList(p, field+".stats_sources", s.StatsSources)
}

func (l Limits) checkList(p *problems, field string, list []string) {
	if len(list) > l.MaxListEntries {
		p.add("%s: %d entries, over the limit of %d", field, len(list), l.MaxListEntries)
		return
	}
	for _, s := range list {
		l.checkText(p, field+" entry", s, l.MaxListEntryBytes, true, false)
	}
}

// checkText checks a name: present when required, at most maxBytes, valid UTF-8 of
// printable characters only (no control characters: names end up in headers and logs),
// and without '/' when noSlash (ids are path segments). It reports whether s passed.
func (l Limits) checkText(p *problems, field, s string, maxBytes int, required, noSlash bool) bool {
	switch {
	case s == "":
		if required {
			p.add("%s is required", field)
			return false
		}
		return true
	case len(s) > maxBytes:
		p.add("%s %s is %d bytes, over the limit of %d", field, quote(s), len(s), maxBytes)
	case !utf8.ValidString(s):
		p.add("%s %s is not valid UTF-8", field, quote(s))
	case strings.IndexFunc(s, notPrintable) >= 0:
		r, _ := utf8.DecodeRuneInString(s[strings.IndexFunc(s, notPrintable):])
		p.add("%s %s contains a non-printable character (%U)", field, quote(s), r)
	case noSlash && strings.Contains(s, "/"):
		p.add("%s %s must not contain '/'", field, quote(s))
	default:
		return true
	}
	return false
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// checkURL wants an absolute http(s) URL with a host and a port in 1–65535 and nothing a
// backend address does not need: no user info, query or fragment.
func (l Limits) checkURL(p *problems, raw string) {
	const field = "inference_server_url"
	if len(raw) > l.MaxURLBytes {
		p.add("%s %s is %d bytes, over the limit of %d", field, quote(raw), len(raw), l.MaxURLBytes)
		return
	}
	if strings.IndexFunc(raw, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) >= 0 {
		p.add("%s %s contains a space or a non-printable character", field, quote(raw))
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
		p.add("%s %s must be an http(s) URL with a host and port", field, quote(raw))
		return
	}
	if port, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || port == 0 {
		p.add("%s %s: the port must be between 1 and 65535", field, quote(raw))
	}
	if u.User != nil {
		p.add("%s %s must not carry user info", field, quote(raw))
	}
	if u.RawQuery != "" || u.ForceQuery {
		p.add("%s %s must not have a query", field, quote(raw))
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		p.add("%s %s must not have a fragment", field, quote(raw))
	}
}

// maxQuoted is how much of a value an error message repeats.
const maxQuoted = 64

// quote returns s quoted for an error message, cut to its first maxQuoted bytes.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxQuoted]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// maxErrorText is the longest decoding error repeated whole; a longer one (an unknown
// field with a huge name) is cut.
const maxErrorText = 200

// clipError keeps err (for errors.Is and errors.As) with its text cut to maxErrorText bytes.
func clipError(err error) error {
	if len(err.Error()) <= maxErrorText {
		return err
	}
	return clippedError{err}
}

type clippedError struct{ err error }

func (c clippedError) Error() string {
	s := c.err.Error()
	return strings.ToValidUTF8(s[:maxErrorText], "") + "… (cut)"
}

func (c clippedError) Unwrap() error { return c.err }
