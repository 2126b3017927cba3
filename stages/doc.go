// Package stages holds the built-in pipeline stages of the replication path
// (decode, bucket eval, op build) and, in sub-packages, the sync rules engine
// and checksum functions they use.
package stages
