package postgres

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgauth"
)

// SessionParams returns the run-time parameters under which syncpipe reads
// source values, for snapshot and stream connections alike. Text output of
// several types depends on them (timestamptz inside ranges and arrays on
// TimeZone, date and timestamp on DateStyle, interval on IntervalStyle,
// float on extra_float_digits, bytea on bytea_output), so both paths must
// use the same values to produce identical rule values. Pass them as
// RuntimeParams when connecting (ConnConfig does); the snapshot reader also
// sets them on its session.
func SessionParams() map[string]string {
	return map[string]string{
		"TimeZone":           "UTC",
		"DateStyle":          "ISO, MDY",
		"IntervalStyle":      "postgres",
		"extra_float_digits": "1",
		"bytea_output":       "hex",
	}
}

// KeepAlive configures TCP keepalive probes on source connections, so a
// connection that sits idle while storage is slow survives NAT and firewall
// idle timeouts, and a dead peer is noticed. Zero fields use the defaults.
type KeepAlive struct {
	// Idle is the idle time before the first probe (default 30s).
	Idle time.Duration
	// Interval is the time between probes (default 10s).
	Interval time.Duration
	// Count is the number of unanswered probes before the connection is
	// dropped (default 6).
	Count int
}

// Connect opens a normal source connection (ConnConfig, default TCP
// keepalives) that gives up connecting after timeout (0: no bound).
func Connect(ctx context.Context, uri string, timeout time.Duration) (*pgx.Conn, error) {
	cc, err := ConnConfig(uri, KeepAlive{})
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		cc.ConnectTimeout = timeout
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		if advice := pgauth.Advice(err, "source.uri"); advice != "" {
			return nil, fmt.Errorf("connect to the source: %w: %s", err, advice)
		}
		return nil, fmt.Errorf("connect to the source: %w", err)
	}
	return conn, nil
}

// ConnConfig parses a source URI and prepares it for syncpipe: the
// SessionParams are sent at startup (explicit settings in the URI win),
// application_name defaults to "syncpipe", and TCP keepalives follow ka.
// It works for replication=database URIs too.
func ConnConfig(uri string, ka KeepAlive) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(uri)
	if err != nil {
		return nil, fmt.Errorf("parse source URI: %w", err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range SessionParams() {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "syncpipe"
	}
	if ka.Idle <= 0 {
		ka.Idle = 30 * time.Second
	}
	if ka.Interval <= 0 {
		ka.Interval = 10 * time.Second
	}
	if ka.Count <= 0 {
		ka.Count = 6
	}
	d := &net.Dialer{
		Timeout:         cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: ka.Idle, Interval: ka.Interval, Count: ka.Count},
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	return cfg, nil
}

// configureSession applies SessionParams, idle_session_timeout = 0 and
// statement_timeout (≤ 0: none) to conn's session. Settings the server does
// not know (idle_session_timeout before PostgreSQL 14) are skipped.
func configureSession(ctx context.Context, conn *pgx.Conn, statementTimeout time.Duration) error {
	params := SessionParams()
	params["idle_session_timeout"] = "0"
	params["statement_timeout"] = "0"
	if statementTimeout > 0 {
		params["statement_timeout"] = strconv.FormatInt(max(statementTimeout.Milliseconds(), 1), 10)
	}
	names := make([]string, 0, len(params))
	values := make([]string, 0, len(params))
	for k, v := range params {
		names = append(names, k)
		values = append(values, v)
	}
	_, err := conn.Exec(ctx, `
SELECT count(set_config(s.name, s.value, false))
FROM unnest($1::text[], $2::text[]) AS s(name, value)
WHERE EXISTS (SELECT 1 FROM pg_settings p WHERE lower(p.name) = lower(s.name))`, names, values)
	return err
}
