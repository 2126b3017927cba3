package syncapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// syncRequest is the body of POST /sync/stream.
type syncRequest struct {
	// buckets maps the buckets the client already has to the op id it has
	// them up to; order is the client's (kept for nothing but logs).
	buckets map[string]int64
	// rawData: send each op's data as a JSON string (what the SDKs ask
	// for) rather than a nested object.
	rawData bool
	// parameters is the client parameters object, JSON ("{}" when absent).
	parameters []byte
	clientID   string
	// streams is the Sync Streams part: defaults and subscriptions (nil
	// when the client sent none).
	streams *syncrules.StreamsRequest
}

// BodyReadTimeout is the default Config.BodyReadTimeout: how long a
// request's body may take to arrive, counted from the moment its handler
// starts (the headers are bounded by the HTTP server's
// ReadHeaderTimeout). Sync requests are small — the buckets a client
// has, a few KiB — so 10 s is generous even on a poor mobile link, and a
// client sending a byte a second no longer holds its connection for good.
const BodyReadTimeout = 10 * time.Second

// withBodyDeadline gives requests with a body a read deadline d from now,
// whatever the HTTP server's own timeouts. It also bounds a body the
// handler does not read: net/http reads up to 256 KiB of it after the
// handler, to reuse the connection, and without a deadline waits as long
// as the client takes. Requests without a body get none: net/http has
// already cleared the deadline to read ahead on the connection (which
// notices a client going away), and a deadline there would end that read
// and cancel the context of a handler running longer than d.
func withBodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			// ErrNotSupported (a ResponseRecorder, a wrapper) leaves the
			// body unbounded, as before: nothing better to do.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
}

// MaxHeaderBytes bounds a request's headers (a JWT and an SDK's headers
// are a few KiB). A request with more gets a 431 in the API's JSON error
// shape, naming the limit. The HTTP server must let such requests reach
// the handler: its own limit (http.Server.MaxHeaderBytes) should be
// HTTPMaxHeaderBytes, beyond which net/http answers a bare text 431 — a
// quarter of its 1 MiB default, which let every connection hold a
// megabyte of headers.
const (
	MaxHeaderBytes     = 64 << 10
	HTTPMaxHeaderBytes = 4 * MaxHeaderBytes
)

// withHeaderLimit answers 431 to a request whose headers exceed max bytes
// (as sent: name, ": ", value and CRLF per line, and the request line).
func withHeaderLimit(h http.Handler, max int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n <= max {
			h.ServeHTTP(w, r)
			return
		}
		closeUnread(w, r)
		writeError(w, &apiError{status: http.StatusRequestHeaderFieldsTooLarge, code: codeBadRequest,
			msg: fmt.Sprintf("the request's headers are %d bytes, over the limit of %d KiB: a token is a few KiB (check what the client puts in Authorization and cookies)", n, max>>10)})
	})
}

// closeUnread makes the connection close after this response, which is
// sent before (all of) the request body was read, and stops reading it:
// otherwise net/http would go on reading the body after the handler, at
// the client's pace, to reuse the connection (issue 17: slow bodies with
// invalid tokens each held a connection until the body's deadline).
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return // no body: the connection can serve the next request
	}
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// readSyncRequest reads and validates the request body (at most max
// bytes, within the deadline of withBodyDeadline, timeout). Unknown
// fields are ignored; wrong types give an *apiError (400, 413 for a body
// that is too large, 408 for one that did not arrive in time) naming the
// field.
func readSyncRequest(w http.ResponseWriter, r *http.Request, max int64, timeout time.Duration) (*syncRequest, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		closeUnread(w, r)
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: codeBadRequest,
				msg: fmt.Sprintf("request body is larger than max_request_bytes (%d bytes)", max)}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &apiError{status: http.StatusRequestTimeout, code: codeBadRequest,
				msg: fmt.Sprintf("the request body did not arrive within %s: send it whole with the request", timeout)}
		}
		return nil, &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf("read request body: %v", err)}
	}
	// The body is read: no deadline for what follows, net/http's read
	// ahead that notices the client going away (which would end the stream
	// on a timeout). net/http clears it too when it starts that read.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	req, err := parseSyncRequest(body)
	if err != nil {
		return nil, &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: "invalid sync request: " + err.Error()}
	}
	return req, nil
}

// isNull reports whether a raw JSON member is absent or null.
func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// jsonKind names a JSON value's type for error messages.
func jsonKind(m json.RawMessage) string {
	m = bytes.TrimSpace(m)
	if len(m) == 0 {
		return "nothing"
	}
	switch m[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func parseSyncRequest(body []byte) (*syncRequest, error) {
	req := &syncRequest{buckets: map[string]int64{}, parameters: []byte("{}")}
	if len(bytes.TrimSpace(body)) == 0 {
		return req, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf("the body must be a JSON object, got %s", typeErr.Value)
		}
		return nil, fmt.Errorf("the body is not valid JSON: %w", err)
	}
	if top == nil {
		return nil, errors.New("the body must be a JSON object, got null")
	}
	if m := top["buckets"]; !isNull(m) {
		var items []json.RawMessage
		if err := json.Unmarshal(m, &items); err != nil {
			return nil, fmt.Errorf("buckets must be an array of {name, after}, got %s", jsonKind(m))
		}
		for i, item := range items {
			name, after, err := parseBucketPosition(item)
			if err != nil {
				return nil, fmt.Errorf("buckets[%d]: %w", i, err)
			}
			req.buckets[name] = after
		}
	}
	if m := top["raw_data"]; !isNull(m) {
		if err := json.Unmarshal(m, &req.rawData); err != nil {
			return nil, fmt.Errorf("raw_data must be a boolean, got %s", jsonKind(m))
		}
	}
	if m := top["include_checksum"]; !isNull(m) {
		var b bool
		if err := json.Unmarshal(m, &b); err != nil {
			return nil, fmt.Errorf("include_checksum must be a boolean, got %s", jsonKind(m))
		}
	}
	if m := top["client_id"]; !isNull(m) {
		if err := json.Unmarshal(m, &req.clientID); err != nil {
			return nil, fmt.Errorf("client_id must be a string, got %s", jsonKind(m))
		}
	}
	if m := top["parameters"]; !isNull(m) {
		if !isJSONObject(m) {
			return nil, fmt.Errorf("parameters must be a JSON object, got %s", jsonKind(m))
		}
		req.parameters = bytes.TrimSpace(m)
	}
	if m := top["streams"]; !isNull(m) {
		var err error
		if req.streams, err = parseStreams(m); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// parseStreams reads {include_defaults, subscriptions: [{stream,
// parameters, override_priority}]}: include_defaults is true when absent,
// a subscription's parameters {} when absent or null, its
// override_priority none.
func parseStreams(m json.RawMessage) (*syncrules.StreamsRequest, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(m, &top); err != nil || top == nil {
		return nil, fmt.Errorf("streams must be an object {include_defaults, subscriptions}, got %s", jsonKind(m))
	}
	sr := &syncrules.StreamsRequest{IncludeDefaults: true}
	if d := top["include_defaults"]; !isNull(d) {
		if err := json.Unmarshal(d, &sr.IncludeDefaults); err != nil {
			return nil, fmt.Errorf("streams.include_defaults must be a boolean, got %s", jsonKind(d))
		}
	}
	if subs := top["subscriptions"]; !isNull(subs) {
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(subs, &items); err != nil {
			return nil, fmt.Errorf("streams.subscriptions must be an array of {stream, parameters, override_priority}, got %s", jsonKind(subs))
		}
		for i, it := range items {
			sub := syncrules.StreamSubscription{OverridePriority: -1}
			if err := json.Unmarshal(it["stream"], &sub.Stream); err != nil || it == nil {
				return nil, fmt.Errorf("streams.subscriptions[%d].stream must be a string, got %s", i, jsonKind(it["stream"]))
			}
			if p := it["parameters"]; !isNull(p) {
				if !isJSONObject(p) {
					return nil, fmt.Errorf("streams.subscriptions[%d].parameters must be a JSON object, got %s", i, jsonKind(p))
				}
				sub.Parameters = bytes.TrimSpace(p)
			}
			if o := it["override_priority"]; !isNull(o) {
				if err := json.Unmarshal(o, &sub.OverridePriority); err != nil || sub.OverridePriority < 0 || sub.OverridePriority > 3 {
					return nil, fmt.Errorf("streams.subscriptions[%d].override_priority must be an integer from 0 to 3, got %s", i, bytes.TrimSpace(o))
				}
			}
			sr.Subscriptions = append(sr.Subscriptions, sub)
		}
	}
	return sr, nil
}

// parseBucketPosition reads {"name": "...", "after": "123"}. after may
// also be a JSON integer; absent or null means 0 (from the start).
func parseBucketPosition(item json.RawMessage) (string, int64, error) {
	var pos map[string]json.RawMessage
	if err := json.Unmarshal(item, &pos); err != nil || pos == nil {
		return "", 0, fmt.Errorf("must be an object {name, after}, got %s", jsonKind(item))
	}
	var name string
	if err := json.Unmarshal(pos["name"], &name); err != nil || name == "" {
		return "", 0, fmt.Errorf("name must be a non-empty string, got %s", jsonKind(pos["name"]))
	}
	m := pos["after"]
	if isNull(m) {
		return name, 0, nil
	}
	var text string
	switch jsonKind(m) {
	case "a string":
		_ = json.Unmarshal(m, &text) // a valid JSON string
	case "a number":
		text = string(bytes.TrimSpace(m))
	default:
		return "", 0, fmt.Errorf("after of bucket %q must be a decimal string op id, got %s", name, jsonKind(m))
	}
	after, err := strconv.ParseInt(text, 10, 64)
	if err != nil || after < 0 {
		return "", 0, fmt.Errorf("after of bucket %q must be a decimal string op id, got %q", name, text)
	}
	return name, after, nil
}

// isJSONObject reports whether b (valid JSON) is an object.
func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// readCheckpointRequest reads the body of POST /sync/checkpoint-request:
// {"client_id": "...", "checkpoint_request_id": "<1 … 2^63-1>"} (the id
// as a decimal string, as the SDKs send it, or a JSON integer).
func readCheckpointRequest(w http.ResponseWriter, r *http.Request, max int64) (string, int64, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		closeUnread(w, r)
		return "", 0, &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf("read request body: %v", err)}
	}
	clientID, id, err := parseCheckpointRequest(body)
	if err != nil {
		return "", 0, &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: "invalid checkpoint request: " + err.Error()}
	}
	return clientID, id, nil
}

func parseCheckpointRequest(body []byte) (string, int64, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return "", 0, errors.New("the body must be a JSON object {client_id, checkpoint_request_id}")
	}
	var clientID string
	if err := json.Unmarshal(top["client_id"], &clientID); err != nil {
		return "", 0, fmt.Errorf("client_id must be a string, got %s", jsonKind(top["client_id"]))
	}
	m := top["checkpoint_request_id"]
	text := string(bytes.TrimSpace(m))
	switch jsonKind(m) {
	case "a string":
		_ = json.Unmarshal(m, &text) // a valid JSON string
	case "a number":
	default:
		return "", 0, fmt.Errorf("checkpoint_request_id must be a decimal string, got %s", jsonKind(m))
	}
	id, err := strconv.ParseInt(text, 10, 64)
	if err != nil || id < 1 {
		return "", 0, fmt.Errorf("checkpoint_request_id must be an integer from 1 to 2^63-1, got %q", text)
	}
	return clientID, id, nil
}
