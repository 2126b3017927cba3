package bucketstore_test

import (
	"fmt"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// A checksum source of its own (one serving the sync API from another
// store) answers what changed between two checkpoints with KnownChanges;
// the zero ChangeSet says that anything may have changed.
func ExampleKnownChanges() {
	changes := bucketstore.KnownChanges([]string{`1#by_list["a"]`}, [][]byte{[]byte("owner:u1")})
	for _, b := range []string{`1#by_list["a"]`, `1#by_list["b"]`} {
		fmt.Println(b, changes.BucketChanged(b, bucketstore.BucketHash(b)))
	}
	fmt.Println("lookups of u2:", changes.LookupsChanged([][]byte{[]byte("owner:u2")}))
	fmt.Println("unknown:", bucketstore.ChangeSet{}.BucketChanged(`1#by_list["b"]`, bucketstore.BucketHash(`1#by_list["b"]`)))
	// Output:
	// 1#by_list["a"] true
	// 1#by_list["b"] false
	// lookups of u2: false
	// unknown: true
}
