// Package jsonl is an example sink that writes one JSON-lines file per
// table. It proves that the sinks library is enough to write a sink, and it
// is handy for inspecting what the sync rules produce. A blank import
// registers it under the sink type "jsonl":
//
//	import _ "github.com/syncpipe/syncpipe/sinks/jsonl"
//
//	pipelines:
//	  - name: audit
//	    sink: {type: jsonl, settings: {dir: out, fsync: true}}
//
// Settings: dir (required; created if missing) and fsync (default true;
// false trades crash safety for speed).
//
// # Files
//
// Every change becomes one line of <dir>/<schema>.<table>.jsonl ('/', '\',
// '%' and control characters in names are written as %XX):
//
//	{"kind":"upsert","table":"public.todos","key":"<row uuid>",
//	 "puts":[{"bucket":"1#by_list[\"a\"]","object_type":"todos","object_id":"…","checksum":123,"data":{…}}],
//	 "lookups":[{"key":"…","params":[…]}]}
//
// kind is "upsert" or "delete" (a delete has no puts); data and params are
// the JSON produced by the sync rules, embedded as is. Lines are never torn
// or interleaved, even with several writers: the lines a batch adds to a
// file are contiguous. With flush_writers > 1,
// batches can land in a file out of source order, and after a crash the
// batches after the last committed position are written again (at least
// once): use one writer and de-duplicate by key when that matters.
//
// <dir>/_progress.json holds the committed position of every snapshot range
// and of the stream; it is replaced atomically on every commit. A directory
// belongs to one open sink at a time (Open fails otherwise, within one
// process).
package jsonl
