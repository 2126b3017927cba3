package syncapi

import (
	"net/http"
	"strings"
)

// Browser clients (the PowerSync web SDK) call the API from the app's own
// origin, so every request is cross-origin: the browser first sends a
// preflight OPTIONS (the sync request carries Authorization and a JSON
// body), then reads the response only if it names an allowed origin.
// Tokens travel in Authorization, never in cookies, so allowing any origin
// ("*", the PowerSync service's choice) exposes nothing a page could not
// already get with the token it holds; credentials are never allowed.
const (
	corsAllowMethods = "GET, POST, OPTIONS"
	// The SDKs send Authorization ("Token …"), Content-Type JSON, an Accept
	// listing the BSON and NDJSON types, and x-user-agent (browsers forbid
	// setting User-Agent); X-Request-Id is what proxies and tracing add.
	corsAllowHeaders = "Authorization, Content-Type, Accept, Accept-Encoding, X-User-Agent, User-Agent, X-Request-Id"
	// Content-Type decides NDJSON vs BSON in the SDKs; listed explicitly so
	// that it stays readable even if a proxy adds parameters.
	corsExposeHeaders = "Content-Type, Content-Encoding"
	// corsMaxAge lets a browser reuse a preflight for an hour instead of
	// sending one before every reconnect.
	corsMaxAge = "3600"
)

// corsPolicy is the set of allowed origins.
type corsPolicy struct {
	any     bool
	origins map[string]bool // lower-case, no trailing slash
}

// withCORS wraps next with CORS for origins ("*" = any). With no origins
// it returns next unchanged: no CORS headers, same-origin browsers only.
func withCORS(origins []string, next http.Handler) http.Handler {
	if len(origins) == 0 {
		return next
	}
	p := corsPolicy{origins: map[string]bool{}}
	for _, o := range origins {
		if o == "*" {
			p.any = true
		}
		p.origins[normOrigin(o)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		origin := r.Header.Get("Origin")
		allowed := p.any || (origin != "" && p.origins[normOrigin(origin)])
		if !p.any {
			// The answer depends on the Origin: caches must keep them apart.
			h.Add("Vary", "Origin")
		}
		if allowed {
			if p.any {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
			}
			h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		}
		if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
			next.ServeHTTP(w, r)
			return
		}
		// A preflight: answered here, it never reaches a route.
		if !allowed {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Max-Age", corsMaxAge)
		w.WriteHeader(http.StatusNoContent)
	})
}

// normOrigin makes a configured origin and an Origin header comparable:
// scheme and host are case-insensitive and a configured URL may end in /.
func normOrigin(o string) string {
	return strings.ToLower(strings.TrimRight(strings.TrimSpace(o), "/"))
}
