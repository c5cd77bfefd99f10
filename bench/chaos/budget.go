package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The budgets of the fault suite. A scenario passes when every check it makes is within
// its budget; bench chaos exits non-zero when any scenario misses one.
const (
	// MaxFailedWithHealthyBackend is how many new requests may fail (or hang) while a
	// healthy backend exists: after a kill -9 of a pylon, a kill -9 of an engine and while
	// a pylon is frozen with SIGSTOP, the other backend can serve every request.
	MaxFailedWithHealthyBackend = 0
	// MaxErrorWindow bounds the error window of a fault: from the first to the last failed
	// new request. It applies to the pylon kill, the engine kill, the pylon freeze and the
	// gateway restart (where requests refused while no gateway listens count too).
	MaxErrorWindow = time.Second
	// MaxStreamErrorDelay bounds how long after a backend is killed each stream it was
	// serving must end, and each must end with an SSE error event (not a silent cut).
	MaxStreamErrorDelay = time.Second
	// HangBound is how long a load request may go without a complete answer before the
	// client gives up and counts it as hung. Load requests take well under 100 ms.
	HangBound = 5 * time.Second

	// OversizedBodyStatus is the status each oversized chunked body must be answered with.
	OversizedBodyStatus = 413
	// MaxRSSGrowth bounds the peak resident memory growth of every fleet process while the
	// oversized bodies are sent, over its RSS just before.
	MaxRSSGrowth = 256 << 20
	// MaxRSSSettleFraction bounds each process's RSS RSSSettleAfter after the oversized
	// bodies: within this fraction above its baseline (the memory was handed back).
	MaxRSSSettleFraction = 0.20
	// RSSSettleAfter is how long after the oversized bodies the settled RSS is read.
	RSSSettleAfter = 30 * time.Second

	// SlowlorisHeaderTimeout is the read-header timeout the suite gives the gateway when
	// its --help lists such a flag (--read-header-timeout or --read-header-timeout-ms).
	SlowlorisHeaderTimeout = 2 * time.Second
	// SlowlorisSlack is how much longer than SlowlorisHeaderTimeout, counted from when a
	// stalled connection sent its partial headers, the gateway may take to close it.
	SlowlorisSlack = 3 * time.Second
	// SlowlorisWaitWithoutFlag is how long the suite waits for the stalled connections to
	// be closed when the gateway has no read-header-timeout flag (a built-in default
	// timeout would have to close them within it).
	SlowlorisWaitWithoutFlag = 12 * time.Second

	// MinRejoinShare is the least share of serial requests a restarted pylon must serve
	// within RejoinWindow of its restart on the 2-backend fleet.
	MinRejoinShare = 0.25
	// RejoinWindow is the time after a pylon restart over which its share is counted.
	RejoinWindow = 5 * time.Second

	// MaxBurstFailures is how many burst requests to an idle fleet may fail.
	MaxBurstFailures = 0

	// JunkStatus is the status each invalid registration must get; a body over the admin
	// listener's size limit may get JunkOversizeStatus instead.
	JunkStatus         = 400
	JunkOversizeStatus = 413
	// MaxJunkRSSGrowth bounds the gateway's RSS growth over the junk registrations.
	MaxJunkRSSGrowth = 64 << 20

	// StalledWriteTimeout is the write timeout the suite gives the gateway when its --help
	// lists --write-timeout (the stalled-readers scenario).
	StalledWriteTimeout = 2 * time.Second
	// StalledWait is how long after its stalled clients sent their requests the gateway may
	// take to end every one of their streams: the socket buffers between the two fill at
	// the stream's pace first, then the write timeout runs. Without the flag a gateway
	// would have to give up on them by itself within it.
	StalledWait = 30 * time.Second
	// StalledTokens is the length of a stalled client's stream (100 s at the fleet's 5 ms
	// per token, about 3 MB of events): far longer, and far larger than the socket
	// buffers, than StalledWait.
	StalledTokens = 20000

	// CancelledStatus is the status label the gateway's requests_total must count each
	// stream the client cancelled mid-way under.
	CancelledStatus = "499"
)

// The budgets of the soak run.
const (
	// SoakMaxHeapGrowth bounds the gateway's heap growth (in-use heap bytes after a forced
	// collection when --enable-pprof exists, else as reported) from the first sample
	// after the warm-up to the last one, as a fraction of the first.
	SoakMaxHeapGrowth = 0.10
	// SoakGoroutineSlack and SoakGoroutineSlackFraction bound how far above its idle
	// baseline (read before any request) a process's goroutine count may stay once the
	// load has stopped: the larger of the two. A process that has served traffic keeps a
	// few more goroutines than a fresh one (pooled connections to its peers and their
	// cleaners); a leak of a goroutine or two per fault exceeds the slack within the
	// twenty faults of a 10-minute soak.
	SoakGoroutineSlack         = 10
	SoakGoroutineSlackFraction = 0.10
	// SoakSettle bounds the wait for the goroutines to come back after the load stops.
	SoakSettle = 20 * time.Second
)

// Check is one budget compared with what was measured.
type Check struct {
	// Budget names what is bounded, e.g. "new requests failed or hung".
	Budget string
	// Got is the measured value and Limit the budget, both rendered.
	Got, Limit string
	Pass       bool
}

func (c Check) String() string {
	verdict := "ok"
	if !c.Pass {
		verdict = "MISSED"
	}
	return fmt.Sprintf("%s: %s: %s (budget %s)", verdict, c.Budget, c.Got, c.Limit)
}

// FailureCheck bounds the failed and hung new requests of a load.
func FailureCheck(s LoadStats, limit int) Check {
	n := s.Failed + s.Hung
	got := strconv.Itoa(n) + " of " + strconv.Itoa(s.Sent)
	if by := s.FailuresByKind(); by != "" {
		got += " (" + by + ")"
	}
	return Check{Budget: "new requests failed or hung while a healthy backend exists", Got: got, Limit: "≤ " + strconv.Itoa(limit), Pass: n <= limit}
}

// WindowCheck bounds a load's error window.
func WindowCheck(s LoadStats, limit time.Duration) Check {
	return Check{Budget: "error window", Got: ms(s.Window), Limit: "≤ " + ms(limit), Pass: s.Window <= limit}
}

// MaxCheck is got ≤ limit for a count.
func MaxCheck(budget string, got, limit int) Check {
	return Check{Budget: budget, Got: strconv.Itoa(got), Limit: "≤ " + strconv.Itoa(limit), Pass: got <= limit}
}

// EqualCheck is got == want for a count.
func EqualCheck(budget string, got, want int) Check {
	return Check{Budget: budget, Got: strconv.Itoa(got), Limit: "= " + strconv.Itoa(want), Pass: got == want}
}

// AnswersCheck requires every answer to be one of want: answers are statuses ("413") or
// what happened instead ("reset", "timeout").
func AnswersCheck(budget string, answers, want []string) Check {
	pass := len(answers) > 0
	for _, a := range answers {
		if !slices.Contains(want, a) {
			pass = false
		}
	}
	return Check{Budget: budget, Got: Tally(answers), Limit: "all " + strings.Join(want, " or "), Pass: pass}
}

// Tally renders answers as counts, most frequent first: "413×7, reset×1"; "none" when empty.
func Tally(answers []string) string {
	if len(answers) == 0 {
		return "none"
	}
	counts := map[string]int{}
	for _, a := range answers {
		counts[a]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	slices.SortStableFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"×"+strconv.Itoa(counts[k]))
	}
	return strings.Join(parts, ", ")
}

// GrowthCheck bounds a process's peak RSS growth over its baseline. An unknown RSS (< 0)
// misses the budget: the suite could not show it was kept.
func GrowthCheck(proc string, base, peak, limit int64) Check {
	c := Check{Budget: proc + " peak RSS growth", Limit: "≤ " + mib(limit)}
	if base < 0 || peak < 0 {
		c.Got = "unknown (process not running)"
		return c
	}
	c.Got = mib(peak-base) + " (" + mib(base) + " → " + mib(peak) + ")"
	c.Pass = peak-base <= limit
	return c
}

// SettleCheck requires a process's RSS after to be within frac above its baseline, plus
// drift: what its twin (the same role under the same load, without the fault; 0 when it
// has none) grew by over the same time, since serving the ordinary load alone keeps
// growing a young process for a while.
func SettleCheck(proc string, base, after, drift int64, frac float64, after30 time.Duration) Check {
	drift = max(drift, 0)
	limit := int64(float64(base)*(1+frac)) + drift
	how := "baseline +" + strconv.Itoa(int(frac*100)) + " %"
	if drift > 0 {
		how += " + its twin's growth " + mib(drift)
	}
	c := Check{Budget: proc + " RSS " + after30.String() + " later", Limit: "≤ " + mib(limit) + " (" + how + ")"}
	if base < 0 || after < 0 {
		c.Got = "unknown (process not running)"
		return c
	}
	c.Got = mib(after)
	c.Pass = after <= limit
	return c
}

// ShareCheck requires got of total to be at least min.
func ShareCheck(budget string, got, total int, minShare float64) Check {
	share := 0.0
	if total > 0 {
		share = float64(got) / float64(total)
	}
	return Check{
		Budget: budget, Got: fmt.Sprintf("%.0f %% (%d of %d)", 100*share, got, total),
		Limit: fmt.Sprintf("≥ %.0f %%", 100*minShare), Pass: total > 0 && share >= minShare,
	}
}

// StreamEnd is how one stream open on a killed backend ended.
type StreamEnd struct {
	Kind Kind
	// After is the time from the kill to the stream's end (its last byte or error).
	After time.Duration
}

// StreamEndsCheck requires every stream on a killed backend to end with an error event
// within limit of the kill. No stream at all misses the budget: nothing was shown.
func StreamEndsCheck(ends []StreamEnd, limit time.Duration) Check {
	c := Check{Budget: "streams on the killed backend ending with an SSE error event", Limit: "all, each ≤ " + ms(limit) + " after the kill"}
	good := 0
	var slowest time.Duration
	kinds := make([]string, 0, len(ends))
	for _, e := range ends {
		kinds = append(kinds, e.Kind.String())
		slowest = max(slowest, e.After)
		if e.Kind == KindStreamError && e.After <= limit {
			good++
		}
	}
	c.Got = fmt.Sprintf("%d of %d (%s; slowest end %s after the kill)", good, len(ends), Tally(kinds), ms(slowest))
	c.Pass = len(ends) > 0 && good == len(ends)
	return c
}

// ClosedCheck requires all stalled connections to be closed, the last within limit of
// its partial headers.
func ClosedCheck(closed, total int, last, limit time.Duration) Check {
	c := Check{Budget: "stalled connections closed by the read-header timeout", Limit: "all " + strconv.Itoa(total) + ", each ≤ " + ms(limit)}
	c.Got = strconv.Itoa(closed) + " of " + strconv.Itoa(total)
	if closed > 0 {
		c.Got += ", the last after " + ms(last)
	}
	c.Pass = total > 0 && closed == total && last <= limit
	return c
}

// HeapGrowthCheck bounds the growth from the first to the last heap sample.
func HeapGrowthCheck(proc string, first, last, limit float64) Check {
	c := Check{Budget: proc + " heap growth after warm-up", Limit: fmt.Sprintf("≤ %.0f %%", 100*limit)}
	if first <= 0 || last < 0 {
		c.Got = "unknown (no samples)"
		return c
	}
	g := last/first - 1
	c.Got = fmt.Sprintf("%+.1f %% (%s → %s)", 100*g, mib(int64(first)), mib(int64(last)))
	c.Pass = last <= first*(1+limit)
	return c
}

// GoroutineCheck requires a process's goroutines at the end to be back near its idle
// baseline: at most the larger of slack and frac × baseline above it.
func GoroutineCheck(proc string, base, end, slack int, frac float64) Check {
	allowed := base + max(slack, int(frac*float64(base)))
	c := Check{Budget: proc + " goroutines after the load stopped", Limit: "≤ " + strconv.Itoa(allowed) + " (baseline " + strconv.Itoa(base) + ")"}
	if base < 0 || end < 0 {
		c.Got = "unknown"
		return c
	}
	c.Got = strconv.Itoa(end)
	c.Pass = end <= allowed
	return c
}

// BalancedCheck requires every request to have exactly one outcome.
func BalancedCheck(a Accounting) Check {
	return Check{Budget: "requests with exactly one outcome", Got: a.String(), Limit: "all " + strconv.Itoa(a.Sent), Pass: a.Balanced()}
}

func ms(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
}

func mib(b int64) string {
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
}
