package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
)

// writePipelines prints one line per configured pipeline: its sink,
// tables, version, snapshot state, stream position, lag and last error.
// The bucketstore pipeline is described by its active (else newest)
// group; the others by their stored state. Sinks are not opened: a sink
// belongs to the running process.
func writePipelines(ctx context.Context, w io.Writer, cfg *config.Config, store statusCatalog, groups []bucketstore.Group, src *pgx.Conn, now time.Time) error {
	stored, err := store.SinkPipelines(ctx)
	if err != nil {
		return err
	}
	byName := map[string]bucketstore.SinkPipeline{}
	for _, p := range stored {
		byName[p.Name] = p
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tSINK\tTABLES\tVERSION\tSNAPSHOT\tSTREAM LSN\tLAG\tLAST ERROR")
	for _, pl := range cfg.EffectivePipelines() {
		tables := "all rule tables"
		if len(pl.Tables) > 0 {
			tables = strings.Join(pl.Tables, ",")
		}
		version, snap, lsn, lag, lastErr := "—", "not started", "—", "?", "—"
		if pl.Sink.Type == config.SinkBucketstore {
			if g, ok := servingGroup(groups); ok {
				version, snap, lsn, lastErr = fmt.Sprintf("group %d", g.ID), doneOrRunning(g.SnapshotDone), g.Stream.LSN.String(), errorCell(g, now)
				if src != nil {
					lag, _ = sourceLag(ctx, src, g)
				}
			}
		} else if st, ok := byName[pl.Name]; ok {
			version, snap = fmt.Sprint(st.Version), doneOrRunning(st.SnapshotDone)
			if st.StreamLSN != 0 {
				lsn = st.StreamLSN.String()
				if src != nil {
					if bytes, err := postgres.WALBehind(ctx, src, uint64(st.StreamLSN)); err == nil {
						lag = fmt.Sprintf("%d bytes", bytes)
					}
				}
			}
			if st.LastError != "" {
				lastErr = st.LastError
				if r := []rune(lastErr); len(r) > errorCellRunes {
					lastErr = string(r[:errorCellRunes]) + "…"
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pl.Name, pl.Sink.Type, tables, version, snap, lsn, lag, lastErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w)
	return err
}

// servingGroup is the active group, else the newest one.
func servingGroup(groups []bucketstore.Group) (bucketstore.Group, bool) {
	for _, g := range groups {
		if g.State == bucketstore.StateActive {
			return g, true
		}
	}
	if len(groups) == 0 {
		return bucketstore.Group{}, false
	}
	return groups[len(groups)-1], true
}

func doneOrRunning(done bool) string {
	if done {
		return "done"
	}
	return "running"
}
