// Package checksum computes PowerSync-compatible operation checksums and
// replica ids.
package checksum
