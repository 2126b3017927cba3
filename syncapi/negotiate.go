package syncapi

import (
	"strconv"
	"strings"
)

// Media types of a sync stream's response.
const (
	ndjsonType = "application/x-ndjson"
	bsonType   = "application/vnd.powersync.bson-stream"
)

// Content codings of a sync stream's response.
const (
	codingIdentity = "identity"
	codingGzip     = "gzip"
	codingZstd     = "zstd"
)

// qValues are the parsed entries of an Accept or Accept-Encoding header
// (RFC 9110 §12.4.2): lower-cased names with their weights, in order.
type qValues []qValue

type qValue struct {
	name string
	q    float64
}

// parseQValues parses the values of one such header. An entry with a
// weight that does not parse counts as refused (q=0): a malformed header
// cannot make the server pick something the client did not ask for.
func parseQValues(values []string) qValues {
	var out qValues
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
					continue
				}
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || f < 0 || f > 1 {
					f = 0
				}
				q = f
			}
			out = append(out, qValue{name: name, q: q})
		}
	}
	return out
}

// weight is the weight the entries give name: its own entry, else the
// first wildcard that matches it (patterns, most specific first), else
// fallback.
func (qs qValues) weight(name string, fallback float64, patterns ...string) float64 {
	for _, e := range qs {
		if e.name == name {
			return e.q
		}
	}
	for _, p := range patterns {
		for _, e := range qs {
			if e.name == p {
				return e.q
			}
		}
	}
	return fallback
}

// negotiateType returns the response's media type for an Accept header:
// BSON when the client weighs it above NDJSON (the PowerSync SDKs send
// `bson-stream;q=0.9, x-ndjson;q=0.8`), NDJSON otherwise — also for a
// request without Accept, and when the client accepts neither (a sync
// stream has no other form; the SDKs check the Content-Type they get).
func negotiateType(accept []string) string {
	qs := parseQValues(accept)
	if len(qs) == 0 {
		return ndjsonType
	}
	b := qs.weight(bsonType, 0, "application/*", "*/*")
	n := qs.weight(ndjsonType, 0, "application/*", "*/*")
	if b > n {
		return bsonType
	}
	return ndjsonType
}

// negotiateCoding returns the response's content coding for an
// Accept-Encoding header: the acceptable coding with the highest weight,
// zstd before gzip before identity when weights tie (zstd compresses
// better and costs less CPU; PowerSync prefers it too). Identity not
// listed weighs less than any listed coding: `gzip;q=0.5` asks for gzip.
// A client that refuses everything still gets identity, the one coding
// every client reads (RFC 9110 allows that instead of a 415).
func negotiateCoding(acceptEncoding []string) string {
	qs := parseQValues(acceptEncoding)
	best, bestQ := codingIdentity, qs.weight(codingIdentity, 0.001, "*")
	for _, c := range []string{codingGzip, codingZstd} {
		if q := qs.weight(c, 0, "*"); q > 0 && q >= bestQ {
			best, bestQ = c, q
		}
	}
	return best
}
