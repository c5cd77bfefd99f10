// Package otlptest is an in-process OTLP/HTTP trace receiver for tests: it accepts what an
// OpenTelemetry exporter posts to /v1/traces (protobuf, gzip-compressed or not), decodes
// it and keeps the spans, so a test can check what a real exporter sent — the binaries'
// --otlp-endpoint pointed at Receiver.URL.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Version  string // the resource's service.version
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; "" for a root span
	Attrs    map[string]string
	Error    bool // the span's status is an error
}

// Receiver is an OTLP/HTTP trace receiver on a loopback port.
type Receiver struct {
	// URL is the receiver's base URL (http://127.0.0.1:port), what --otlp-endpoint takes;
	// spans are posted to URL/v1/traces.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	requests int
	header   http.Header // of the last export request
	problems []string
}

// Start starts a receiver, closed when the test ends.
func Start(tb testing.TB) *Receiver {
	tb.Helper()
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	tb.Cleanup(r.srv.Close)
	return r
}

// Spans returns a copy of the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is the number of export requests received.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Header is the header of the last export request received (nil: none yet).
func (r *Receiver) Header() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header.Clone()
}

// Problems lists the requests the receiver refused (wrong path, method, content type or an
// undecodable body) and why.
func (r *Receiver) Problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.problems...)
}

func (r *Receiver) refuse(w http.ResponseWriter, status int, format string, args ...any) {
	r.mu.Lock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	http.Error(w, fmt.Sprintf(format, args...), status)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.refuse(w, http.StatusNotFound, "%s %s: want POST /v1/traces", req.Method, req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		r.refuse(w, http.StatusUnsupportedMediaType, "content type %q: want application/x-protobuf", ct)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.refuse(w, http.StatusBadRequest, "gzip: %v", err)
			return
		}
		defer func() { _ = zr.Close() }()
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		r.refuse(w, http.StatusBadRequest, "reading the body: %v", err)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &msg); err != nil {
		r.refuse(w, http.StatusBadRequest, "decoding ExportTraceServiceRequest: %v", err)
		return
	}
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: res["service.name"], Version: res["service.version"], Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attrs: attrs(s.GetAttributes()), Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentID = hex.EncodeToString(p)
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.requests++
	r.header = req.Header.Clone()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// attrs flattens OTLP attributes to strings (numbers and booleans formatted).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
