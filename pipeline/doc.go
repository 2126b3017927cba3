// Package pipeline is the generic, typed stage framework that syncpipe's
// replication path is built from. It imports nothing else of syncpipe.
package pipeline
