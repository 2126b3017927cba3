package config

import (
	"strings"
	"testing"
)

// TestValidateServe: what `syncpipe run` refuses to serve without is
// reported with its position; other roles' keys are not required by it.
func TestValidateServe(t *testing.T) {
	const base = "source: {uri: \"postgres://u@h/a\"}\nstorage: {uri: \"postgres://u@h/s\"}\nsync_rules: {content: \"x\"}\n"
	c, err := LoadBytes("c.yaml", []byte(base+"api:\n  auth:\n    audience: []\n    hs256_secrets: [a-secret-of-32-bytes-or-more-xxxxx]\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = c.ValidateServe()
	if errs := AsErrors(err); len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "c.yaml:6:") || errs[0].Path != "api.auth.audience" {
		t.Fatalf("got %v", err)
	}
	c, err = LoadBytes("c.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if errs := AsErrors(c.ValidateServe()); len(errs) != 2 {
		t.Fatalf("got %v", errs)
	}
	c, err = LoadBytes("c.yaml", []byte(base+"api: {auth: {audience: [a], jwks_uri: \"https://example.test/jwks\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ValidateServe(); err != nil {
		t.Fatalf("complete auth rejected: %v", err)
	}
}
