// Package tracing sets up OpenTelemetry tracing for a binary: an OTLP/HTTP exporter, a
// sampler and the W3C trace-context propagator, plus a header carrier for fasthttp.
// Tracing is off unless an endpoint is given; off, it creates nothing and the binaries
// keep a nil tracer (docs/tracing.md).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Flags are the tracing flags of a binary, embedded in its command-line struct with
// `embed:""`.
type Flags struct {
	OTLPEndpoint string  `name:"otlp-endpoint" placeholder:"URL" help:"OpenTelemetry traces: base URL of an OTLP/HTTP collector (http://collector:4318; spans are posted to /v1/traces below it). Empty: tracing off, unless OTEL_EXPORTER_OTLP_ENDPOINT is set. W3C traceparent/tracestate headers are forwarded either way."`
	TraceSample  float64 `name:"trace-sample" default:"1" help:"Share of new traces recorded when tracing is on, 0 to 1; a request that arrives with a traceparent follows its caller's sampling decision."`
}

// Validate rejects a sample ratio outside [0, 1] and an endpoint that is not an http(s) URL.
func (f *Flags) Validate() error {
	var errs []error
	if f.TraceSample < 0 || f.TraceSample > 1 {
		errs = append(errs, fmt.Errorf("--trace-sample %v must be between 0 and 1", f.TraceSample))
	}
	if f.OTLPEndpoint != "" {
		if err := checkEndpoint(f.OTLPEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("--otlp-endpoint: %w", err))
		}
	}
	return errors.Join(errs...)
}

func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err //nolint:wrapcheck // wrapped by the caller
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL", s)
	}
	return nil
}

// Endpoint is the collector URL in force: the flag, else OTEL_EXPORTER_OTLP_ENDPOINT
// ("" = tracing off).
func (f *Flags) Endpoint() string {
	if f.OTLPEndpoint != "" {
		return f.OTLPEndpoint
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// Start builds the tracer of service (gateway, pylon) that the flags describe. Off, it
// returns a nil tracer and a shutdown that does nothing. shutdown flushes the spans not yet
// exported and stops the exporter; call it on exit.
func (f *Flags) Start(service, version string) (tr trace.Tracer, shutdown func(context.Context) error, err error) {
	endpoint := f.Endpoint()
	if endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	if err := checkEndpoint(endpoint); err != nil {
		return nil, nil, fmt.Errorf("OTLP endpoint: %w", err)
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(strings.TrimSuffix(endpoint, "/")+"/v1/traces"))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	tp := NewProvider(sdktrace.NewBatchSpanProcessor(exp), f.TraceSample, service, version)
	return tp.Tracer("github.com/switchyard/switchyard/" + service), tp.Shutdown, nil
}

// NewProvider is a tracer provider that hands its spans to sp, records new traces with
// probability ratio and follows a remote parent's decision otherwise.
func NewProvider(sp sdktrace.SpanProcessor, ratio float64, service, version string) *sdktrace.TracerProvider {
	res := resource.NewSchemaless(attribute.String("service.name", "switchyard-"+service), attribute.String("service.version", version))
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(res),
	)
}

// Propagator reads and writes the W3C traceparent and tracestate headers.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// RequestHeader is a propagation.TextMapCarrier over a fasthttp request header.
type RequestHeader struct{ H *fasthttp.RequestHeader }

// Get implements propagation.TextMapCarrier.
func (c RequestHeader) Get(key string) string { return string(c.H.Peek(key)) }

// Set implements propagation.TextMapCarrier.
func (c RequestHeader) Set(key, value string) { c.H.Set(key, value) }

// Keys implements propagation.TextMapCarrier.
func (c RequestHeader) Keys() []string {
	var keys []string
	for k := range c.H.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// Extract is the context of the trace the request header h carries (none: ctx as is).
func Extract(ctx context.Context, h *fasthttp.RequestHeader) context.Context {
	return Propagator.Extract(ctx, RequestHeader{h})
}

// Inject writes the trace context of ctx to the request header h (replacing any).
func Inject(ctx context.Context, h *fasthttp.RequestHeader) {
	Propagator.Inject(ctx, RequestHeader{h})
}
