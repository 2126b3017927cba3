package syncapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
)

const (
	// healthTTL is how long one storage read answers /healthz and the
	// group error gauge: however many probes, load balancers and scrapers
	// ask, storage sees at most one health query per TTL.
	healthTTL = time.Second
	// healthReadTimeout bounds that read, so a probe gets its answer (503)
	// while storage hangs instead of hanging with it.
	healthReadTimeout = 5 * time.Second
)

// Health statuses of GET /healthz.
const (
	healthOK          = "ok"
	healthDegraded    = "degraded"
	healthUnavailable = "unavailable"
)

// groupError is a serving group's stored fatal replication error: one
// reason for /healthz to say "degraded".
type groupError struct {
	Group int       `json:"group"`
	State string    `json:"state"`
	Error string    `json:"error"`
	Since time.Time `json:"since"`
}

// healthState is one read of storage's health.
type healthState struct {
	err    error        // storage did not answer
	errors []groupError // ACTIVE or PROCESSING groups with a stored error
}

// healthBody is the /healthz document. OK is true exactly when the status
// code is 200: the API can serve what storage holds.
type healthBody struct {
	OK      bool         `json:"ok"`
	Status  string       `json:"status"`
	Reasons []groupError `json:"reasons,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// healthCache shares one storage read among everyone asking within
// healthTTL, and among everyone asking while a read runs.
type healthCache struct {
	mu     sync.Mutex
	valid  bool
	at     time.Time // when state was read (Config.Now)
	state  healthState
	flight chan struct{} // closed when the running read is stored; nil if none runs
}

// health returns storage's health, read at most healthTTL ago. It fails
// only when ctx ends while another caller's read is still running.
func (s *Server) health(ctx context.Context) (healthState, error) {
	h := &s.healthc
	h.mu.Lock()
	if now := s.cfg.Now(); h.valid && !now.Before(h.at) && now.Sub(h.at) < healthTTL {
		st := h.state
		h.mu.Unlock()
		return st, nil
	}
	fl := h.flight
	lead := fl == nil
	if lead {
		fl = make(chan struct{})
		h.flight = fl
	}
	h.mu.Unlock()
	if lead {
		// Not the caller's cancellation: the callers waiting for this read
		// must not fail because the first of them went away.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthReadTimeout)
		st := s.readHealth(rctx)
		cancel()
		h.mu.Lock()
		h.valid, h.at, h.state, h.flight = true, s.cfg.Now(), st, nil
		h.mu.Unlock()
		close(fl)
		return st, nil
	}
	select {
	case <-fl:
	case <-ctx.Done():
		return healthState{}, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state, nil
}

// readHealth reads the groups that serve or will serve (ACTIVE and
// PROCESSING) and keeps those with a stored error: the replication side
// stores only errors that need an operator (ReportError: retrying will
// not heal them, or they have lasted for minutes), and clears them when
// the group recovers. STOP groups are on their way out, so their
// errors no longer matter to anyone.
func (s *Server) readHealth(ctx context.Context) healthState {
	gs, err := s.groups.Groups(ctx)
	if err != nil {
		return healthState{err: err}
	}
	var st healthState
	for _, g := range gs {
		if g.LastError == "" || !g.Serving() {
			continue
		}
		st.errors = append(st.errors, groupError{Group: g.ID, State: string(g.State), Error: g.LastError, Since: g.LastErrorAt.UTC()})
	}
	return st
}

// handleHealth answers GET /healthz:
//
//   - 200 {"ok":true,"status":"ok"} while storage answers and no serving
//     group has a stored replication error;
//   - 200 {"ok":true,"status":"degraded","reasons":[{group, state, error,
//     since}]} when one has;
//   - 503 {"ok":false,"status":"unavailable","error":…} when storage does
//     not answer within healthReadTimeout.
//
// Degraded is 200 on purpose. This endpoint is what Kubernetes probes, and
// a stored error is one that retrying does not heal (a dropped
// publication, a table without a replica identity, wrong credentials):
// restarting the pod (liveness) cannot fix it, and taking every pod out of
// the Service (readiness; they all read the same storage, so all would
// fail together) would stop clients from syncing the data storage still
// holds, turning stale data into no sync at all. The API keeps serving, and
// the operator learns of the error from this body, the
// syncpipe_replication_group_errors gauge (alert on it) and the logs.
// Unreachable storage is 503: this process cannot serve anything then, so
// readiness should take it out of rotation.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	st, err := s.health(r.Context())
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: healthUnavailable, Error: "health check abandoned: " + err.Error()})
	case st.err != nil:
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: healthUnavailable, Error: "storage unreachable: " + st.err.Error()})
	case len(st.errors) > 0:
		writeJSON(w, http.StatusOK, healthBody{OK: true, Status: healthDegraded, Reasons: st.errors})
	default:
		writeJSON(w, http.StatusOK, healthBody{OK: true, Status: healthOK})
	}
}

// registerGroupErrorGauge exposes the number of serving groups with a
// stored replication error, from the same cached read as /healthz (a
// scrape costs no extra query). While storage does not answer the gauge
// reports nothing rather than a reassuring 0.
func (s *Server) registerGroupErrorGauge(meter metric.Meter) (metric.Registration, error) {
	g, err := meter.Int64ObservableGauge("syncpipe_replication_group_errors",
		metric.WithDescription("Replication groups (ACTIVE or PROCESSING) stopped by an error that needs an operator, as stored in bucket storage."),
		metric.WithUnit("{group}"))
	if err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := s.health(ctx)
		if err != nil || st.err != nil {
			return nil
		}
		o.ObserveInt64(g, int64(len(st.errors)))
		return nil
	}, g)
}
