package replication

import (
	"context"

	"github.com/jackc/pgx/v5"

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

// discover reads tables from the source catalog as rules decode them:
// with the rules' time style. Like postgres.Discover it returns the
// tables it found alongside an error about the others.
func discover(ctx context.Context, conn *pgx.Conn, names []string, rules *syncrules.Rules) ([]postgres.TableInfo, error) {
	infos, err := postgres.Discover(ctx, conn, names)
	st := timeStyle(rules)
	for i := range infos {
		infos[i] = infos[i].WithTimeStyle(st)
	}
	return infos, err
}
