package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/switchyard/switchyard/internal/echo"
	"github.com/switchyard/switchyard/internal/headerset"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/internal/wire"
)

// routing is the parsed routing contract of one request: the reference router's request
// headers, all optional for plain OpenAI clients (docs/gateway.md).
// model, routingKey and method read from headers view the request's header bytes (no copy
// on the hot path): they are valid until the request's headers change, which happens only
// after resolve, and resolve copies what it keeps.
type routing struct {
	newRequestID  string // generated: the request had no x-request-id ("" otherwise)
	model         string
	inputTokens   uint64
	estimated     bool // inputTokens estimated from the body
	modelFromBody bool // model read from the body (no x-model header)
	mayStream     bool // the body mentions "stream": relay the answer as a stream
	routingKey    string
	method        string
	hasMethod     bool
	affinityKey   string
	lastCluster   string // x-stargate-last-cluster-id (last_cluster_affinity)
	priority      uint32
	slo           time.Duration
	maxWait       time.Duration
	hasMaxWait    bool
	budget        time.Duration
	hasBudget     bool
}

// openAIBody is the part of an OpenAI request body the gateway reads when headers are absent.
type openAIBody struct {
	Model    string          `json:"model"`
	Messages []openAIMessage `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	Input    json.RawMessage `json:"input"`
}

type openAIMessage struct {
	Content json.RawMessage `json:"content"`
}

// estimateTokens is the documented estimator for requests without x-input-tokens: the
// bytes of the prompt text (message contents, prompt or input, JSON string escapes
// included) divided by 4, rounded up, at least 1.
func estimateTokens(b *openAIBody) uint64 {
	n := len(b.Prompt) + len(b.Input)
	for _, m := range b.Messages {
		n += len(m.Content)
	}
	return uint64(max((n+3)/4, 1))
}

// Routing headers, indexed for the single pass of parseRouting.
const (
	hRequestID = iota
	hModel
	hInputTokens
	hRoutingKey
	hRoutingMethod
	hAffinityKey
	hPriority
	hSLO
	hMaxWait
	hLastCluster
	hBudget
	nRoutingHeaders
)

var routingHeaderNames = [nRoutingHeaders]string{
	hRequestID: wire.HeaderRequestID, hModel: wire.HeaderModel, hInputTokens: wire.HeaderInputTokens,
	hRoutingKey: wire.HeaderRoutingKey, hRoutingMethod: wire.HeaderRoutingMethod,
	hAffinityKey: wire.HeaderCacheAffinityKey, hPriority: wire.HeaderPriority,
	hSLO: wire.HeaderRequestSLOMs, hMaxWait: wire.HeaderMaxWaitMs, hLastCluster: wire.HeaderLastClusterID,
}

// routingNames matches the routing headers but the configurable retry budget.
var routingNames = headerset.New(routingHeaderNames[:hBudget]...)

// routingHeaders holds the first value of each routing header (nil = absent).
type routingHeaders [nRoutingHeaders][]byte

// collect reads every routing header in one pass over the request's headers (fasthttp's
// Peek would normalize the name and scan the headers once per header). budgetHeader is
// the retry-budget header's name ("" disables it).
func (rh *routingHeaders) collect(h *fasthttp.RequestHeader, budgetHeader string) {
	for k, v := range h.All() {
		if i, ok := routingNames.Lookup(k); ok && rh[i] == nil {
			rh[i] = nonNil(v)
		}
		if budgetHeader != "" && len(k) == len(budgetHeader) && bytes.EqualFold(k, bytesOf(budgetHeader)) && rh[hBudget] == nil {
			rh[hBudget] = nonNil(v)
		}
	}
}

// nonNil keeps an empty header value distinguishable from an absent header.
func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

func (rh *routingHeaders) name(i int, budgetHeader string) string {
	if i == hBudget {
		return budgetHeader
	}
	return routingHeaderNames[i]
}

// str returns header i's value as a copy ("" when absent).
func (rh *routingHeaders) str(i int) (string, error) {
	v, _, err := rh.valid(i)
	return string(v), err
}

// view is str without the copy: the string views the header's bytes (see routing).
func (rh *routingHeaders) view(i int) (string, bool, error) {
	v, ok, err := rh.valid(i)
	return unsafe.String(unsafe.SliceData(v), len(v)), ok, err
}

// valid returns header i's value, which must be UTF-8.
func (rh *routingHeaders) valid(i int) ([]byte, bool, error) {
	v := rh[i]
	if v == nil {
		return nil, false, nil
	}
	if !utf8.Valid(v) {
		return nil, true, fmt.Errorf("%w: header %s is not valid UTF-8", ErrBadRequest, routingHeaderNames[i])
	}
	return v, true, nil
}

func (rh *routingHeaders) uint(i, bitSize int, budgetHeader string) (uint64, bool, error) {
	v := rh[i]
	if v == nil {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, bitSize)
	if err != nil {
		return 0, true, fmt.Errorf("%w: header %s must be an unsigned integer, got %s", ErrBadRequest, rh.name(i, budgetHeader), echo.Quote(v))
	}
	return n, true, nil
}

// parseRouting validates the routing headers of a request and fills what a plain OpenAI
// client leaves out: x-model from the body's model, x-input-tokens from the estimator, a
// generated x-request-id. budgetHeader is the retry-budget header name ("" disables it).
func parseRouting(h *fasthttp.RequestHeader, body []byte, budgetHeader string, newID func() string) (routing, error) {
	var r routing
	var err error
	var ok bool
	var rh routingHeaders
	rh.collect(h, budgetHeader)
	// The request id is only checked: it travels on in the header.
	id, ok, err := rh.valid(hRequestID)
	if err != nil {
		return r, err
	}
	if len(bytes.TrimSpace(id)) == 0 {
		if ok {
			return r, fmt.Errorf("%w: header %s is blank", ErrBadRequest, wire.HeaderRequestID)
		}
		r.newRequestID = newID()
	}
	if r.model, ok, err = rh.view(hModel); err != nil {
		return r, err
	}
	if ok && strings.TrimSpace(r.model) == "" {
		return r, fmt.Errorf("%w: header %s is blank", ErrBadRequest, wire.HeaderModel)
	}
	var tokOK bool
	if r.inputTokens, tokOK, err = rh.uint(hInputTokens, 64, budgetHeader); err != nil {
		return r, err
	}
	if r.model == "" || !tokOK {
		var b openAIBody
		if err := json.Unmarshal(body, &b); err != nil {
			return r, fmt.Errorf("%w: body is not a JSON object (%w) and the routing headers are missing", ErrBadRequest, err)
		}
		if r.model == "" {
			if strings.TrimSpace(b.Model) == "" {
				return r, fmt.Errorf("%w: no model: set the body's \"model\" or the %s header", ErrBadRequest, wire.HeaderModel)
			}
			r.model, r.modelFromBody = b.Model, true
		}
		if !tokOK {
			r.inputTokens, r.estimated = estimateTokens(&b), true
		}
	}
	if r.routingKey, _, err = rh.view(hRoutingKey); err != nil {
		return r, err
	}
	r.routingKey = strings.TrimSpace(r.routingKey)
	if r.method, r.hasMethod, err = rh.view(hRoutingMethod); err != nil {
		return r, err
	}
	if r.affinityKey, err = rh.str(hAffinityKey); err != nil {
		return r, err
	}
	if strings.TrimSpace(r.affinityKey) == "" {
		r.affinityKey = ""
	}
	if r.lastCluster, err = rh.str(hLastCluster); err != nil {
		return r, err
	}
	r.lastCluster = strings.TrimSpace(r.lastCluster)
	p, _, err := rh.uint(hPriority, 32, budgetHeader)
	if err != nil {
		return r, err
	}
	r.priority = uint32(p) //nolint:gosec // parsed with bitSize 32
	slo, _, err := rh.uint(hSLO, 63, budgetHeader)
	if err != nil {
		return r, err
	}
	r.slo = time.Duration(min(slo, uint64(time.Duration(1<<62)/time.Millisecond))) * time.Millisecond
	mw, hasMW, err := rh.uint(hMaxWait, 64, budgetHeader)
	if err != nil {
		return r, err
	}
	r.maxWait, r.hasMaxWait = time.Duration(min(mw, wire.MaxWaitMs))*time.Millisecond, hasMW
	if budgetHeader != "" {
		b, hasB, err := rh.uint(hBudget, 64, budgetHeader)
		if err != nil {
			return r, err
		}
		r.budget, r.hasBudget = time.Duration(min(b, 24*3600*1000))*time.Millisecond, hasB
	}
	return r, nil
}
