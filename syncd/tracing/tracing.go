package tracing

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Tracer. Only Endpoint is required.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's URL, http:// or https://: spans are posted to its
	// path, or to /v1/traces when it has none (TracesURL), as OTEL_EXPORTER_OTLP_ENDPOINT is
	// read. "" turns tracing off. The exporter honours the other standard variables
	// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _CERTIFICATE, _COMPRESSION) and the batch
	// processor OTEL_BSP_* (OTEL_BSP_SCHEDULE_DELAY: how long spans wait to be sent, 5s).
	Endpoint string
	// SampleRatio is the share of sends traced, in (0, 1]; every later step of a message
	// follows its send's decision. Default (0) 1.
	SampleRatio float64
	// NodeID and Version name the node in the spans' resource (service.instance.id,
	// service.version); service.name is "syncd".
	NodeID, Version string
	// ConvKey keys the conversation references (syncd.conv_ref): a secret every node of the
	// cluster shares, so that one conversation has one reference on every node. syncd derives
	// it from the token secret (the key is hashed again here, so that the reference reveals
	// nothing of it).
	ConvKey []byte
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// CheckEndpoint reports what is wrong with an Endpoint, or nil ("" is fine: off).
func CheckEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("tracing: endpoint %q: %v", endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("tracing: endpoint %q: want an http:// or https:// URL of an OTLP/HTTP collector, such as http://127.0.0.1:4318", endpoint)
	case u.Host == "":
		return fmt.Errorf("tracing: endpoint %q names no host", endpoint)
	case u.User != nil:
		return fmt.Errorf("tracing: endpoint %q: put credentials in OTEL_EXPORTER_OTLP_HEADERS, not in the URL (it is logged)", endpoint)
	}
	return nil
}

// TracesURL is the URL spans are posted to for endpoint: endpoint itself when it has a path,
// else endpoint/v1/traces (the OTLP/HTTP default path).
func TracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// Tracer records the steps of messages through this node (the package comment) and exports
// them. The zero of *Tracer, nil, is tracing off: every method then returns at once. Safe for
// concurrent use.
type Tracer struct {
	cfg     Config
	logger  *slog.Logger
	convKey []byte
	reg     *registry
	run     atomic.Pointer[running] // set by Start, cleared by Stop: spans are recorded in between
}

// running is a started Tracer's provider and its tracer.
type running struct {
	tp *sdktrace.TracerProvider
	tr trace.Tracer
}

// New returns a Tracer for cfg, nil when cfg.Endpoint is "" (tracing off): nothing is created.
// It starts nothing either: spans are recorded between Start and Stop. cfg.Endpoint must pass
// CheckEndpoint (syncd.Config.Validate checks it).
func New(cfg Config) *Tracer {
	if cfg.Endpoint == "" {
		return nil
	}
	if cfg.SampleRatio <= 0 || cfg.SampleRatio > 1 {
		cfg.SampleRatio = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	k := sha256.Sum256(append([]byte("syncd tracing conv_ref v1\x00"), cfg.ConvKey...))
	return &Tracer{cfg: cfg, logger: cfg.Logger.With("component", "tracing"), convKey: k[:], reg: newRegistry(registrySize)}
}

// Enabled reports whether t records spans (it was given an endpoint and is started).
func (t *Tracer) Enabled() bool { return t.tracer() != nil }

// Start creates the exporter and the batch span processor (one goroutine), after which spans
// are recorded. A nil t does nothing. The exporter connects lazily: an unreachable collector
// costs failed exports (logged), never a failed start.
func (t *Tracer) Start() error {
	if t == nil {
		return nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(TracesURL(t.cfg.Endpoint)))
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "syncd"),
		attribute.String("service.instance.id", t.cfg.NodeID), attribute.String("service.version", t.cfg.Version))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(&loggingExporter{SpanExporter: exp, logger: t.logger}),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.cfg.SampleRatio))),
		sdktrace.WithResource(res))
	t.run.Store(&running{tp: tp, tr: tp.Tracer("github.com/syncd-dev/syncd/syncd")})
	t.logger.Info("tracing: exporting spans over OTLP/HTTP", "url", TracesURL(t.cfg.Endpoint), "sample_ratio", t.cfg.SampleRatio)
	return nil
}

// Stop sends the spans still queued (within ctx) and stops the exporter's goroutine; spans are
// no longer recorded. A nil or stopped t does nothing.
func (t *Tracer) Stop(ctx context.Context) error {
	if t == nil {
		return nil
	}
	r := t.run.Swap(nil)
	if r == nil {
		return nil
	}
	return r.tp.Shutdown(ctx)
}

// tracer returns the running tracer, nil when t is nil or not started.
func (t *Tracer) tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	if r := t.run.Load(); r != nil {
		return r.tr
	}
	return nil
}

// convRef is the conversation reference of conv: 16 hex digits of an HMAC under the Tracer's
// key, the same on every node of a cluster, which does not give the id (a direct
// conversation's names its users) to whoever reads the spans.
func (t *Tracer) convRef(conv string) string {
	m := hmac.New(sha256.New, t.convKey)
	m.Write([]byte(conv))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// loggingExporter logs failed exports itself, at most once a minute, instead of handing them to
// OpenTelemetry's process-wide error handler (a global, which two servers in one test process
// would share, and which writes outside the node's logger).
type loggingExporter struct {
	sdktrace.SpanExporter
	logger *slog.Logger
	last   atomic.Int64 // Unix ns of the last failure logged
	failed atomic.Int64 // spans not exported since then
}

// ExportSpans exports spans; a failure is logged and the spans dropped (the batch processor
// would drop them too), never retried past the exporter's own retries.
func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	n := e.failed.Add(int64(len(spans)))
	now := time.Now().UnixNano()
	if last := e.last.Load(); now-last >= int64(time.Minute) && e.last.CompareAndSwap(last, now) {
		e.failed.Add(-n)
		e.logger.Warn("tracing: spans not exported (logged at most once a minute)", "spans", n, "err", err)
	}
	return nil
}
