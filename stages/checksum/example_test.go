package checksum_test

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/stages/checksum"
)

// A sink of its own that writes PowerSync ops gives each one the subkey
// PowerSync gives it: the source table's id and the row's replica id. A
// REMOVE op's checksum is computed over it, and clients receive it as the
// op's subkey.
func ExampleSubkey() {
	id := uuid.MustParse("6ba7b810-9dad-51d1-80b4-00c04fd430c8")
	fmt.Println(checksum.Subkey("t1", id))
	// Output: t1/6ba7b810-9dad-51d1-80b4-00c04fd430c8
}
