package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pgURI checks the shape of a PostgreSQL URI without connecting. Messages
// never echo the URI, which may hold a password.
func (v *validator) pgURI(path, s string) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URI, password included
		}
		e := v.add(KindURI, path, "invalid URI: %v", err)
		e.Err = err
		return
	}
	switch {
	case u.Scheme == "":
		v.add(KindURI, path, "must be a postgres:// or postgresql:// URI (key=value connection strings are not supported)")
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		v.add(KindURI, path, "must be a postgres:// or postgresql:// URI (got scheme %q)", u.Scheme)
	case u.Opaque != "":
		v.add(KindURI, path, "must be a postgres:// or postgresql:// URI (missing // after the scheme)")
	}
}

// httpURL checks an http(s) URL such as a JWKS or OTLP endpoint.
func (v *validator) httpURL(path, s string) {
	u, err := url.Parse(s)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return
	}
	v.add(KindURI, path, "must be an http:// or https:// URL (got %q)", s)
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// listen checks a host:port listen address; an empty host means all
// interfaces and port 0 picks a free port (handy in tests).
func (v *validator) listen(path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		msg := err.Error()
		if errors.As(err, &ae) {
			msg = ae.Err
		}
		v.add(KindAddress, path, "invalid listen address %q: %s (want host:port, e.g. 127.0.0.1:8080)", addr, msg)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(KindAddress, path, "invalid listen address %q: port must be a number from 0 to 65535", addr)
		return
	}
	if host != "" && net.ParseIP(host) == nil && !hostnameRE.MatchString(host) {
		v.add(KindAddress, path, "invalid listen address %q: bad host %q", addr, host)
	}
}

// nonEmptyItems rejects empty list entries, usually a stray comma in an env
// value or an unset ${VAR}.
func (v *validator) nonEmptyItems(path string, items []string) {
	for i, s := range items {
		if strings.TrimSpace(s) == "" {
			v.add(KindRequired, fmt.Sprintf("%s[%d]", path, i), "must not be empty")
		}
	}
}

// fmtDuration prints a duration the way an operator writes it: "5m", not "5m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Read returns the sync rules YAML: the inline content, or the file at Path
// (already resolved against the config file's directory by Load).
func (r SyncRules) Read() ([]byte, error) {
	if r.Path == "" {
		return []byte(r.Content), nil
	}
	b, err := os.ReadFile(r.Path)
	if err != nil {
		return nil, fmt.Errorf("config: reading sync rules: %w", err)
	}
	return b, nil
}
