package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// runCompact compacts the bucket storage of every serving group (ACTIVE
// or PROCESSING) online, while replication and the sync API keep running:
// superseded ops become MOVEs and each bucket's leading run of REMOVE and
// MOVE ops one CLEAR, checksums unchanged (bucketstore.Compact).
func runCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("compact", stderr)
	path := configFlag(fs)
	buckets := fs.String("buckets", "", "comma-separated bucket names to compact, as clients see them (default: every bucket)")
	batch := fs.Int("batch-ops", 10000, "ops read or rewritten per storage transaction")
	busy := fs.Float64("max-busy", 0, "share of the time compaction works, above 0 up to 1: it pauses between transactions to leave storage's CPU to replication and reads (1: full speed; default: replication.compaction.max_busy)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *batch <= 0 {
		return usagef("--batch-ops must be positive, not %d", *batch)
	}
	if !(*busy >= 0 && *busy <= 1) {
		return usagef("--max-busy must be above 0 and at most 1, not %g", *busy)
	}
	var names []string
	for b := range strings.SplitSeq(*buckets, ",") {
		if b = strings.TrimSpace(b); b != "" {
			names = append(names, b)
		}
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return err
	}
	if !cfg.UsesStorage() {
		return usagef("compact: %s has no storage section: there is no bucket storage to compact", *path)
	}
	if *busy == 0 {
		*busy = cfg.Replication.Compaction.MaxBusy
	}
	store, err := openToolStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	groups, err := store.Catalog().Groups(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if !g.Serving() {
			continue
		}
		began := time.Now()
		st, err := store.Compactor().Compact(ctx, g.ID, bucketstore.CompactOptions{Buckets: names, BatchOps: *batch, MaxBusy: *busy})
		if err != nil {
			return fmt.Errorf("compact group %d: %w", g.ID, err)
		}
		fmt.Fprintf(stdout, "group %d: %s in %s\n", g.ID, describeCompaction(st), time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// describeCompaction says what a compaction did, for compact and status.
func describeCompaction(st bucketstore.CompactStats) string {
	if st.UpTo == 0 {
		return "nothing to compact (no checkpoint published yet)"
	}
	return fmt.Sprintf("%d buckets up to op %d: %d ops moved, %d merged into CLEARs (%d written), %s reclaimed",
		st.Buckets, st.UpTo, st.Moved, st.Cleared, st.Clears, formatBytes(st.Reclaimed))
}

// formatBytes gives n bytes in binary units with one decimal ("12.3
// MiB"), bytes below 1 KiB as they are ("512 B").
func formatBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for (v >= 1024 || v <= -1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
