package benchmarks

import "testing"

func TestTitleRole(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: walsender postgres 127.0.0.1(40112) START_REPLICATION": "walsender",
		"postgres: postgres storage 127.0.0.1(40100) idle":                "backend storage",
		"postgres: bob app [local] SELECT":                                "backend app",
		"postgres: checkpointer":                                          "auxiliary",
		"postgres: autovacuum worker app":                                 "auxiliary",
		"/usr/lib/postgresql/15/bin/postgres -D /tmp/x":                   "auxiliary",
	} {
		if got := titleRole(title); got != want {
			t.Errorf("titleRole(%q) = %q, want %q", title, got, want)
		}
	}
}
