package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
)

func TestMetricsServedInPrometheusFormat(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, Options{MetricsListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)

	m := tel.MeterProvider.Meter("test")
	rows, err := m.Int64Counter("syncpipe_rows_replicated")
	if err != nil {
		t.Fatal(err)
	}
	rows.Add(ctx, 7)
	lag, err := m.Float64Gauge("syncpipe_replication_lag", metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	lag.Record(ctx, 0.25)

	resp, err := http.Get("http://" + tel.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"syncpipe_rows_replicated_total 7", "syncpipe_replication_lag_seconds 0.25", "go_goroutines", "go_gc_heap_live_bytes", "go_memstats_stack_inuse_bytes", "go_gc_duration_seconds_count"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func TestStdoutTracesFlushedOnShutdown(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	tel, err := Setup(ctx, Options{TraceExporter: "stdout", SampleRatio: 1, TraceWriter: &buf})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("test").Start(ctx, "flush-chunk")
	span.End()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var got struct{ Name string }
	if err := json.NewDecoder(&buf).Decode(&got); err != nil || got.Name != "flush-chunk" {
		t.Fatalf("exported span = %+v (%v), want name flush-chunk; output %q", got, err, buf.String())
	}
}

func TestUnknownExporterRejected(t *testing.T) {
	if _, err := Setup(context.Background(), Options{TraceExporter: "zipkin"}); err == nil ||
		!strings.Contains(err.Error(), "zipkin") {
		t.Fatalf("err = %v, want unknown exporter error", err)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "warn", "auto")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "table", "todos")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("auto format on a non-terminal must be JSON: %v: %q", err, buf.String())
	}
	if rec["msg"] != "shown" || rec["table"] != "todos" {
		t.Fatalf("record = %v", rec)
	}
	if _, err := NewLogger(&buf, "loud", "text"); err == nil {
		t.Fatal("bad level accepted")
	}
	if _, err := NewLogger(&buf, "info", "xml"); err == nil {
		t.Fatal("bad format accepted")
	}
}
