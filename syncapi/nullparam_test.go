package syncapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestStaticNullParameterServesEmptyBucket is SPEC §3's NULL rule on the
// wire: a static parameter query whose value is NULL (a token without the
// tenant claim) still yields its row, so the client is entitled to the
// bucket …tenant_items[null], which PowerSync serves empty with checksum 0.
// A row whose tenant is NULL is not in it (NULL never matches =).
func TestStaticNullParameterServesEmptyBucket(t *testing.T) {
	t.Parallel()
	const rules = `bucket_definitions:
  tenant_items:
    parameters: SELECT request.jwt() ->> 'tenant' AS tenant
    data:
      - SELECT id, tenant FROM items WHERE tenant = bucket.tenant
`
	e := newEnv(t, rules, map[string][]string{"items": {"id", "tenant"}}, nil)
	nullRow := e.upsert("items", "i0", "x")
	nullRow.Puts = nil // the row's tenant is NULL: in no bucket
	e.commit(e.upsert("items", "i1", "t1"), nullRow)
	nullBucket := fmt.Sprintf("%d#tenant_items[null]", e.group.ID)

	s := e.open(token(t, "u1", nil), nil)
	ls := s.untilComplete()
	s.close()
	if len(ls) == 0 || ls[0].Checkpoint == nil {
		t.Fatalf("first line is not a checkpoint: %v", kinds(ls))
	}
	cp := ls[0].Checkpoint
	if len(cp.Buckets) != 1 || cp.Buckets[0] != (bucketJSON{Bucket: nullBucket, Checksum: 0, Count: 0, Priority: 3}) {
		t.Fatalf("checkpoint buckets %+v, want only the empty %s with checksum 0", cp.Buckets, nullBucket)
	}
	if want := `{"bucket":"` + nullBucket + `","checksum":0,`; !strings.Contains(ls[0].Raw, want) {
		t.Fatalf("raw checkpoint line %s lacks %s", ls[0].Raw, want)
	}
	for _, l := range ls {
		if l.Data != nil && len(l.Data.Data) > 0 {
			t.Fatalf("the [null] bucket must be empty, got data %s", l.Raw)
		}
	}

	// The claim set: the tenant's bucket, with its row.
	s = e.open(token(t, "u1", func(c jwt.MapClaims) { c["tenant"] = "t1" }), nil)
	ls = s.untilComplete()
	s.close()
	cp = ls[0].Checkpoint
	if len(cp.Buckets) != 1 || cp.Buckets[0].Bucket != e.b("tenant_items", "t1") || cp.Buckets[0].Count != 1 || cp.Buckets[0].Checksum == 0 {
		t.Fatalf("checkpoint buckets %+v, want %s with one op", cp.Buckets, e.b("tenant_items", "t1"))
	}
}
