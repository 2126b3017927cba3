package bucketstore

import "hash/maphash"

// bucketSeed seeds BucketHash for the life of the process: hashes are
// compared only within it, never stored.
var bucketSeed = maphash.MakeSeed()

// BucketHash is the hash of a bucket name that ChangeSet.BucketChanged
// takes. A sync stream computes it once per bucket when its bucket list
// changes rather than hashing every name again at every checkpoint.
func BucketHash(bucket string) uint64 { return maphash.String(bucketSeed, bucket) }

// bucketFilter is a Bloom filter of the buckets of a change interval (two
// bits per name in 4096): a stream checking its fifty buckets against a
// checkpoint that changed a hundred others rules nearly all of them out
// with a bit test each. Map lookups by name, hashing every name, were a
// tenth of the CPU of a server streaming to a thousand clients.
type bucketFilter [64]uint64

const bucketFilterMask = 64*64 - 1

func (f *bucketFilter) add(h uint64) {
	a, b := h&bucketFilterMask, (h>>32)&bucketFilterMask
	f[a/64] |= 1 << (a % 64)
	f[b/64] |= 1 << (b % 64)
}

// mayHave reports whether a name of hash h may be in the filter (false:
// it is not).
func (f *bucketFilter) mayHave(h uint64) bool {
	a, b := h&bucketFilterMask, (h>>32)&bucketFilterMask
	return f[a/64]&(1<<(a%64)) != 0 && f[b/64]&(1<<(b%64)) != 0
}
