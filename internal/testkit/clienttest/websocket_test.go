package clienttest

import "testing"

// The SDK's transports, as the driver's --connection-method names them
// (its connectionMethod): HTTP streaming, and WebSocket (RSocket on GET
// /sync/stream).
const (
	httpStream = "http"
	webSocket  = "web-socket"
)

// onBothTransports runs a real-client test once per transport, in
// parallel.
func onBothTransports(t *testing.T, test func(t *testing.T, method string)) {
	for _, method := range []string{httpStream, webSocket} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			test(t, method)
		})
	}
}

// connect is the driver's arguments for method: --connection-method,
// and httpOnly over HTTP (options of the HTTP transport, such as
// --accept-encoding).
func connect(method string, httpOnly ...string) []string {
	if method == httpStream {
		return append([]string{"--connection-method", method}, httpOnly...)
	}
	return []string{"--connection-method", method}
}
