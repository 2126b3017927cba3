package replication

import (
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// timeStyle is how rules want temporal values rendered: their
// timestamps_iso8601 and timestamp_max_precision options (edition 1
// keeps the historical text). The style lives on the discovered columns, so
// the snapshot, the stream and row re-reads of a group decode alike.
func timeStyle(rules *syncrules.Rules) postgres.TimeStyle {
	c := rules.Compatibility()
	return postgres.TimeStyleFor(c.TimestampsISO8601, c.TimestampDigits)
}

// styled gives discovered tables the rules' time style, in place.
func styled(infos []postgres.TableInfo, rules *syncrules.Rules) []postgres.TableInfo {
	st := timeStyle(rules)
	for i := range infos {
		infos[i] = infos[i].WithTimeStyle(st)
	}
	return infos
}
