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
// the JSON produced by the sync rules, embedded as is. A streamed change
// also has "lsn" (the commit LSN of its source transaction) and "i" (its
// index in the transaction): together they identify the change, and the
// same change always gets the same pair. Snapshot rows have neither.
// AppendChanges encodes changes as a JSON array of these objects, for
// programs that deliver them elsewhere (examples/httpsink).
//
// # Exactly once
//
// Writers only encode: each batch's lines are staged in memory, and Commit
// appends them to the files in commit order, fsyncs the files, and then
// replaces <dir>/_progress.json — the committed position of every snapshot
// range and of the stream, and every file's size — atomically. A crash
// before the replace leaves lines past the recorded sizes: the next Open
// cuts every file back to its recorded size, and the source sends those
// batches again. So no line is lost or written twice, whatever the number
// of writers; lines of one file are in commit order (per snapshot range,
// and the stream in source order). A file the progress does not know is
// emptied at Open, so the directory belongs to the sink: one pipeline per
// directory (Open fails otherwise, within one process).
//
// Reset (a new pipeline version) moves the files and the progress into
// <dir>/superseded-<UTC time>/.
package jsonl
