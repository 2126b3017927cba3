// Package telemetry sets up syncpipe's logs, traces and metrics from
// configuration: slog (text on a terminal, JSON otherwise), an OpenTelemetry
// tracer provider (exporter none, stdout or otlp) and an OpenTelemetry meter
// provider whose instruments are exposed in the Prometheus text format at
// /metrics. Shutdown flushes buffered spans, so a run that ends cleanly never
// loses its last batch of traces.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Options is what telemetry needs from the configuration.
type Options struct {
	// ServiceName is reported as the OTel resource's service.name.
	ServiceName string
	// MetricsListen is the address of the /metrics endpoint; empty disables it.
	MetricsListen string
	// TraceExporter is none, stdout or otlp.
	TraceExporter string
	// OTLPEndpoint is host:port of an OTLP/HTTP collector (default from the
	// standard OTEL_EXPORTER_OTLP_* environment variables).
	OTLPEndpoint string
	// SampleRatio is the fraction of root traces sampled, 0..1.
	SampleRatio float64
	// TraceWriter receives stdout-exported spans (os.Stdout if nil).
	TraceWriter io.Writer
}

// Telemetry holds the providers a process uses; pass its fields to the
// components that create spans and instruments.
type Telemetry struct {
	// TracerProvider creates tracers; a no-op provider when tracing is off.
	TracerProvider trace.TracerProvider
	// MeterProvider creates instruments that appear at /metrics.
	MeterProvider metric.MeterProvider
	// Registry is the Prometheus registry behind /metrics.
	Registry *prometheus.Registry

	listener  net.Listener
	server    *http.Server
	shutdowns []func(context.Context) error
}

// Setup builds the providers and, when MetricsListen is set, starts serving
// /metrics. It also installs the providers as the OTel globals so libraries
// that use otel.GetTracerProvider pick them up.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	if opts.ServiceName == "" {
		opts.ServiceName = "syncpipe"
	}
	res := resource.NewSchemaless(semconv.ServiceName(opts.ServiceName))
	t := &Telemetry{Registry: prometheus.NewRegistry()}
	// go_gc_heap_live_bytes (the heap the last GC found live) besides
	// the defaults: unlike the heap in use, it leaves out garbage not yet
	// collected, so memory per connection or per cached bucket can be
	// read from it.
	goMetrics := collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})
	t.Registry.MustRegister(collectors.NewGoCollector(goMetrics), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	exp, err := otelprom.New(
		otelprom.WithRegisterer(t.Registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("create prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	t.MeterProvider = mp
	t.shutdowns = append(t.shutdowns, mp.Shutdown)

	tp, err := tracerProvider(ctx, opts, res)
	if err != nil {
		return nil, err
	}
	t.TracerProvider = tp
	if sdk, ok := tp.(*sdktrace.TracerProvider); ok {
		// Shut traces down first so spans ended during shutdown are flushed.
		t.shutdowns = append([]func(context.Context) error{sdk.Shutdown}, t.shutdowns...)
	}
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	if opts.MetricsListen != "" {
		l, err := net.Listen("tcp", opts.MetricsListen)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("listen for metrics on %s: %w", opts.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", t.Handler())
		t.listener = l
		t.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = t.server.Serve(l) }()
	}
	return t, nil
}

func tracerProvider(ctx context.Context, opts Options, res *resource.Resource) (trace.TracerProvider, error) {
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio))
	var exporter sdktrace.SpanExporter
	switch strings.ToLower(opts.TraceExporter) {
	case "", "none":
		return noop.NewTracerProvider(), nil
	case "stdout":
		w := opts.TraceWriter
		if w == nil {
			w = os.Stdout
		}
		e, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("create stdout trace exporter: %w", err)
		}
		exporter = e
	case "otlp":
		var o []otlptracehttp.Option
		if opts.OTLPEndpoint != "" {
			o = append(o, otlptracehttp.WithEndpoint(opts.OTLPEndpoint), otlptracehttp.WithInsecure())
		}
		e, err := otlptracehttp.New(ctx, o...)
		if err != nil {
			return nil, fmt.Errorf("create otlp trace exporter: %w", err)
		}
		exporter = e
	default:
		return nil, fmt.Errorf("unknown trace exporter %q (want none, stdout or otlp)", opts.TraceExporter)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
	), nil
}

// Handler serves the Prometheus exposition of Registry, for mounting on
// another mux (the API server serves /metrics too).
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.Registry, promhttp.HandlerOpts{})
}

// MetricsAddr is the address /metrics listens on (useful with port 0), or "".
func (t *Telemetry) MetricsAddr() string {
	if t.listener == nil {
		return ""
	}
	return t.listener.Addr().String()
}

// Shutdown stops the metrics server and flushes and closes the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.server != nil {
		errs = append(errs, t.server.Shutdown(ctx))
	}
	for _, f := range t.shutdowns {
		errs = append(errs, f(ctx))
	}
	t.shutdowns = nil
	return errors.Join(errs...)
}

// NewLogger returns a slog logger writing to w. Format "auto" picks text when
// w is a terminal and JSON otherwise, so humans read text and log pipelines
// get stable keys.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(orDefault(level, "info"))); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(orDefault(format, "auto")) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "auto":
		if IsTerminal(w) {
			return slog.New(slog.NewTextHandler(w, hopts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want auto, text or json", format)
	}
}

// IsTerminal reports whether w is a character device (a TTY).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
