package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// noEnv is a Loader that sees an empty environment.
var noEnv = Loader{Environ: func() []string { return nil }}

func withEnv(kv ...string) Loader { return Loader{Environ: func() []string { return kv }} }

func mustLoad(t *testing.T, l Loader, name, yaml string) *Config {
	t.Helper()
	c, err := l.LoadBytes(name, []byte(yaml))
	if err != nil {
		t.Fatalf("load failed:\n%v", err)
	}
	return c
}

func loadErrs(t *testing.T, l Loader, yaml string) Errors {
	t.Helper()
	_, err := l.LoadBytes("t.yaml", []byte(yaml))
	if err == nil {
		t.Fatal("load succeeded; want errors")
	}
	return AsErrors(err)
}

// minimal is the smallest valid config; tests append to it.
const minimal = `
source: {uri: "postgres://u@127.0.0.1/app"}
storage: {uri: "postgres://u@127.0.0.1/syncpipe"}
sync_rules: {content: "bucket_definitions: {}"}
`

func TestSpecSampleLoadsWithDefaults(t *testing.T) {
	c, err := noEnv.Load("testdata/spec_sample.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Source.URI = "postgres://user@127.0.0.1:5432/app"
	want.Storage.URI = "postgres://user@127.0.0.1:5432/syncpipe"
	want.SyncRules.Path = filepath.Join("testdata", "rules.yaml")
	want.API.Auth.Audience = []string{"syncpipe"}
	want.API.Auth.HS256Secrets = []string{"a-long-random-secret-of-32-bytes-or-more"}
	want.meta = c.meta
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	rules, err := c.SyncRules.Read()
	if err != nil || !strings.Contains(string(rules), "bucket_definitions") {
		t.Errorf("SyncRules.Read = %q, %v", rules, err)
	}
}

func TestGoodYAML(t *testing.T) {
	c, err := noEnv.Load("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.ConnectTimeout != 15*time.Second || c.Storage.MaxConns != 16 {
		t.Errorf("source/storage: %+v %+v", c.Source, c.Storage)
	}
	if c.Replication.Stream.BatchMaxBytes != 8*MiB || c.Replication.Stream.BatchMaxWait != 100*time.Millisecond {
		t.Errorf("stream: %+v", c.Replication.Stream)
	}
	if c.API.MaxRequestBytes != 2*MiB || len(c.API.Auth.JWKS.Keys) != 1 || c.API.Auth.JWKS.Keys[0]["kid"] != "k1" {
		t.Errorf("api: %+v", c.API)
	}
	if c.Telemetry.Tracing.SampleRatio != 0.25 || c.Log.Format != "json" {
		t.Errorf("telemetry/log: %+v %+v", c.Telemetry, c.Log)
	}
	ps := c.EffectivePipelines()
	if len(ps) != 2 {
		t.Fatalf("pipelines: %+v", ps)
	}
	main, audit := ps[0], ps[1]
	// main: merge key from the x- anchor plus its own flush_writers; rest inherited.
	wantStages := Stages{ChunkRows: 5000, DecodeWorkers: 2, EvalWorkers: 0, FlushWriters: 4,
		ChannelDepth: 4, BatchMaxRows: 10000, BatchMaxBytes: 8 * MiB}
	if main.Stages != wantStages || main.Sink.Type != SinkBucketstore || main.Source.URI != c.Source.URI {
		t.Errorf("main = %+v", main)
	}
	if audit.Source.URI != "postgresql://audit@127.0.0.1:5432/app" || audit.Source.Publication != "audit_pub" ||
		audit.Source.SlotPrefix != "syncpipe_" || audit.Stages.BatchMaxBytes != MiB || audit.Stages.ChannelDepth != 2 {
		t.Errorf("audit = %+v", audit)
	}
	if audit.Sink.Type != "jsonl" || audit.Sink.Settings["file.mode"] != "0644" || !reflect.DeepEqual(audit.Tables, []string{"public.todos", "lists"}) {
		t.Errorf("audit sink/tables = %+v %v", audit.Sink, audit.Tables)
	}
	if err := c.CheckSinks([]string{"bucketstore", "jsonl"}); err != nil {
		t.Errorf("CheckSinks: %v", err)
	}
}

func TestDefaultPipeline(t *testing.T) {
	c := mustLoad(t, noEnv, "t.yaml", minimal+"replication: {snapshot: {eval_workers: 3}}\n")
	ps := c.EffectivePipelines()
	if len(ps) != 1 || ps[0].Name != DefaultPipelineName || ps[0].Sink.Type != SinkBucketstore ||
		ps[0].Tables != nil || ps[0].Stages.EvalWorkers != 3 || ps[0].Source.Publication != "syncpipe" {
		t.Errorf("default pipeline = %+v", ps)
	}
	ps[0].Name = "changed"
	if c.Pipelines != nil {
		t.Error("EffectivePipelines must not change the Config")
	}
}

func TestCheckSinks(t *testing.T) {
	c := mustLoad(t, noEnv, "t.yaml", minimal+"pipelines:\n  - name: a\n    sink: {type: jsnol}\n")
	err := c.CheckSinks([]string{"bucketstore", "jsonl"})
	want := `t.yaml:7:12: pipelines[0].sink.type: unknown sink type "jsnol" (did you mean "jsonl"?); registered: bucketstore, jsonl`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

func TestEnvOverrides(t *testing.T) {
	l := withEnv(
		"SYNCPIPE_SOURCE__URI=postgres://env@127.0.0.1/app",
		"SYNCPIPE_REPLICATION__WORKERS_PER_PROCESS=6",
		"SYNCPIPE_REPLICATION__STREAM__BATCH_MAX_BYTES=4MiB",
		"SYNCPIPE_REPLICATION__STREAM__BATCH_MAX_WAIT=1s",
		"SYNCPIPE_API__AUTH__HS256_SECRETS=one-secret-of-32-bytes-or-more-xxx, two-secret-of-32-bytes-or-more-xxx ,three-secret-of-32-bytes-or-more-x",
		"SYNCPIPE_API__AUTH__AUDIENCE=[x, y]",
		"SYNCPIPE_API__AUTH__JWKS={\"keys\": [{\"kty\": \"EC\", \"kid\": \"e1\"}]}",
		"SYNCPIPE_TELEMETRY__METRICS_LISTEN=",
		"SYNCPIPE_TELEMETRY__TRACING__SAMPLE_RATIO=0.5",
		"SYNCPIPE_PIPELINES=[{name: p1, tables: [todos]}]",
		"SYNCPIPE_CONFIG=ignored.yaml",
		"OTHER__VAR=ignored",
	)
	c := mustLoad(t, l, "t.yaml", minimal+"replication: {workers_per_process: 1}\napi: {auth: {hs256_secrets: [yaml]}}\n")
	if c.Source.URI != "postgres://env@127.0.0.1/app" || c.Replication.WorkersPerProcess != 6 {
		t.Errorf("scalars: %+v %+v", c.Source, c.Replication)
	}
	if c.Replication.Stream.BatchMaxBytes != 4*MiB || c.Replication.Stream.BatchMaxWait != time.Second {
		t.Errorf("stream: %+v", c.Replication.Stream)
	}
	if !reflect.DeepEqual(c.API.Auth.HS256Secrets, []string{"one-secret-of-32-bytes-or-more-xxx", "two-secret-of-32-bytes-or-more-xxx", "three-secret-of-32-bytes-or-more-x"}) ||
		!reflect.DeepEqual(c.API.Auth.Audience, []string{"x", "y"}) {
		t.Errorf("lists: %+v", c.API.Auth)
	}
	if len(c.API.Auth.JWKS.Keys) != 1 || c.API.Auth.JWKS.Keys[0]["kid"] != "e1" {
		t.Errorf("jwks: %+v", c.API.Auth.JWKS)
	}
	if c.Telemetry.MetricsListen != "" || c.Telemetry.Tracing.SampleRatio != 0.5 {
		t.Errorf("telemetry: %+v", c.Telemetry)
	}
	if len(c.Pipelines) != 1 || c.Pipelines[0].Name != "p1" || c.Pipelines[0].Tables[0] != "todos" {
		t.Errorf("pipelines: %+v", c.Pipelines)
	}
	if loc := c.Location("replication.workers_per_process"); loc.Env != "SYNCPIPE_REPLICATION__WORKERS_PER_PROCESS" || loc.Line != 0 {
		t.Errorf("location of env value = %+v", loc)
	}
	if loc := c.Location("pipelines[0].name"); loc.Env != "SYNCPIPE_PIPELINES" {
		t.Errorf("location inside env YAML = %+v", loc)
	}
}

func TestProcessEnvironment(t *testing.T) {
	t.Setenv("SYNCPIPE_TEST_DB", "postgres://u@127.0.0.1/fromenv")
	t.Setenv("SYNCPIPE_LOG__LEVEL", "debug")
	c, err := LoadBytes("t.yaml", []byte(strings.Replace(minimal, "postgres://u@127.0.0.1/app", "${SYNCPIPE_TEST_DB}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.URI != "postgres://u@127.0.0.1/fromenv" || c.Log.Level != "debug" {
		t.Errorf("got %+v %+v", c.Source, c.Log)
	}
}

func TestInterpolation(t *testing.T) {
	l := withEnv("HOST=db.internal", "EMPTY=", "PORT=5433")
	c := mustLoad(t, l, "t.yaml", `
# commented: ${UNSET_IN_COMMENT}
source: {uri: "postgres://u@${HOST}:${PORT}/app"}
storage: {uri: "postgres://u@${MISSING:-localhost}/s${EMPTY}"}
sync_rules: {content: "x"}
api:
  auth:
    hs256_secrets: ["$${NOT_A_VAR}-padded-to-32-bytes-or-more-xxxxxxx", "pa$$w$rd-padded-to-32-bytes-or-more-xxxxxxx", "${EMPTY:-fallback-padded-to-32-bytes-or-more-xxxxxxx}"]
`)
	if c.Source.URI != "postgres://u@db.internal:5433/app" || c.Storage.URI != "postgres://u@localhost/s" {
		t.Errorf("uris: %q %q", c.Source.URI, c.Storage.URI)
	}
	const pad = "-padded-to-32-bytes-or-more-xxxxxxx" // HS256 secrets are ≥ 32 bytes
	want := []string{"${NOT_A_VAR}" + pad, "pa$$w$rd" + pad, "fallback" + pad}
	if !reflect.DeepEqual(c.API.Auth.HS256Secrets, want) {
		t.Errorf("secrets = %q, want %q", c.API.Auth.HS256Secrets, want)
	}
}

func TestUnsetVariableSuppressesFollowOnErrors(t *testing.T) {
	errs := loadErrs(t, noEnv, strings.Replace(minimal, `"postgres://u@127.0.0.1/app"`, "${DB}", 1))
	if len(errs) != 1 || errs[0].Kind != KindInterpolation || errs[0].Path != "source.uri" || errs[0].Line != 2 {
		t.Errorf("want only the interpolation error at source.uri, got:\n%v", errs)
	}
}

func TestYAMLFeatures(t *testing.T) {
	// Anchors in an x- key, merge keys, empty and null values, quoted numbers,
	// numbers in string fields, fractional sizes, a scalar for a list.
	c := mustLoad(t, noEnv, "t.yaml", `
source: {uri: "postgres://u@127.0.0.1/app"}
sync_rules: {content: "bucket_definitions: {}"}
x-common: &timeouts {connect_timeout: 3s}
telemetry:
  metrics_listen:          # empty: keeps the default
  tracing: {service_name: 123}   # a number in a string field stays a string
storage:
  <<: *timeouts
  uri: "postgres://u@127.0.0.1/syncpipe"
api:
  max_buckets_per_connection: "50"
  max_request_bytes: 1.5KiB
  auth: {audience: single}
log: {level: ~}
`)
	if c.Log.Level != "info" || c.Telemetry.MetricsListen != "127.0.0.1:9464" || c.Storage.ConnectTimeout != 3*time.Second || c.Telemetry.Tracing.ServiceName != "123" {
		t.Errorf("got %+v %+v", c.Telemetry, c.Storage)
	}
	if c.API.MaxBucketsPerConnection != 50 || c.API.MaxRequestBytes != 1536 || !reflect.DeepEqual(c.API.Auth.Audience, []string{"single"}) {
		t.Errorf("api = %+v", c.API)
	}
}

func TestRelativeRulesPath(t *testing.T) {
	c := mustLoad(t, noEnv, "testdata/x.yaml", strings.Replace(minimal, `{content: "bucket_definitions: {}"}`, "{path: rules.yaml}", 1))
	if c.SyncRules.Path != filepath.Join("testdata", "rules.yaml") {
		t.Errorf("path = %q", c.SyncRules.Path)
	}
	// From the environment, a relative path is relative to the working directory.
	l := withEnv("SYNCPIPE_SYNC_RULES__PATH=testdata/rules.yaml", "SYNCPIPE_SYNC_RULES__CONTENT=")
	c = mustLoad(t, l, "elsewhere/x.yaml", minimal)
	if c.SyncRules.Path != "testdata/rules.yaml" {
		t.Errorf("env path = %q", c.SyncRules.Path)
	}
}

func TestMissingFiles(t *testing.T) {
	_, err := noEnv.Load("testdata/does-not-exist.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing config: %v", err)
	}
	_, err = noEnv.LoadBytes("t.yaml", []byte(strings.Replace(minimal, `{content: "bucket_definitions: {}"}`, "{path: nope.yaml}", 1)))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "t.yaml:4:14: sync_rules.path: sync rules file nope.yaml does not exist") {
		t.Errorf("missing rules: %v", err)
	}
}

func TestPasswordsNeverEchoed(t *testing.T) {
	for _, uri := range []string{"mysql://u:hunter2@h/db", "postgres://u:hunter2@h:port/db", "host=h password=hunter2", "postgres:u:hunter2@h"} {
		errs := loadErrs(t, withEnv("SYNCPIPE_STORAGE__URI="+uri), minimal)
		if len(errs) != 1 || errs[0].Kind != KindURI {
			t.Errorf("%s: got %v", uri, errs)
		}
		if strings.Contains(errs.Error(), "hunter2") {
			t.Errorf("password echoed: %v", errs)
		}
	}
}

func TestValidateProgrammatic(t *testing.T) {
	c := Default()
	err := c.Validate()
	errs := AsErrors(err)
	if len(errs) != 3 || countKinds(errs)[KindRequired] != 3 {
		t.Fatalf("Default() should miss exactly source.uri, storage.uri, sync_rules:\n%v", err)
	}
	if errs[0].Error() != "source.uri: required: the postgres:// URI of the database to replicate" {
		t.Errorf("positionless format: %q", errs[0].Error())
	}
	c.Source.URI = "postgres://127.0.0.1/app"
	c.Storage.URI = "postgresql:///syncpipe?host=/var/run/postgresql"
	c.SyncRules.Content = "bucket_definitions: {}"
	if err := c.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	c.Replication.WorkersPerProcess = 0
	if err := c.Validate(); err == nil || err.Error() != "replication.workers_per_process: must be ≥ 1 (got 0)" {
		t.Errorf("got %v", err)
	}
	if loc := c.Location("api.listen"); loc != (Location{}) {
		t.Errorf("programmatic config has a location: %+v", loc)
	}
}

func TestLocationAndErrorAt(t *testing.T) {
	c := mustLoad(t, noEnv, "t.yaml", minimal+"api:\n  listen: 127.0.0.1:0\n")
	if got := c.Location("api.listen").String(); got != "t.yaml:6:3" {
		t.Errorf("api.listen at %s", got)
	}
	if got := c.Location("api.auth.audience").String(); got != "t.yaml:5:1" {
		t.Errorf("absent key falls back to its section: %s", got)
	}
	if got := c.Location("log.level").String(); got != "t.yaml" {
		t.Errorf("absent section falls back to the file: %s", got)
	}
	cause := errors.New("port in use")
	e := c.ErrorAt("api.listen", cause)
	if e.Error() != "t.yaml:6:3: api.listen: port in use" || !errors.Is(e, cause) {
		t.Errorf("ErrorAt = %v", e)
	}
}

func TestErrorsSortAndUnwrap(t *testing.T) {
	es := Errors{
		{Location: Location{Env: "SYNCPIPE_B"}, Path: "b", Msg: "m"},
		{Location: Location{File: "f", Line: 9, Column: 1}, Path: "z", Msg: "m"},
		{Location: Location{File: "f"}, Path: "a", Msg: "m"},
		{Location: Location{File: "f", Line: 2, Column: 7}, Path: "y", Msg: "m", Err: fs.ErrPermission},
	}
	es.Sort()
	want := "f:2:7: y: m\nf:9:1: z: m\nf: a: m\nenv SYNCPIPE_B: b: m"
	if es.Error() != want {
		t.Errorf("got\n%s\nwant\n%s", es.Error(), want)
	}
	if !errors.Is(es, fs.ErrPermission) {
		t.Error("errors.Is must see causes inside Errors")
	}
	if Errors(nil).orNil() != nil {
		t.Error("empty Errors must be a nil error")
	}
}

// TestSyntaxErrorPosition: a YAML syntax error names the line and column
// where the fix belongs (go-yaml itself reports neither reliably).
func TestSyntaxErrorPosition(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unclosed brace", "source:\n  uri: x\nstorage: {uri: \"postgres://h/db\"\nsync_rules: {path: r.yaml}\n", "t.yaml:3:10: YAML syntax error: "},
		{"unclosed quote", "source:\n  uri: \"postgres://h/db\nstorage: {uri: y}\n", "t.yaml:2:8: YAML syntax error: "},
		{"an apostrophe is not a quote", "api:\n  tags: [it's, here\n", "t.yaml:2:9: YAML syntax error: "},
		{"bad indentation", "source:\n  uri: x\n   bad: y\n", "t.yaml:3:4: YAML syntax error: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := loadErrs(t, noEnv, tc.yaml)
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tc.want) {
				t.Fatalf("got %v, want one error starting %q", errs, tc.want)
			}
		})
	}
}
