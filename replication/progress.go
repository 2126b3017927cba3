package replication

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/syncpipe/syncpipe/sinks"
)

// progress follows committed snapshot progress per table, for periodic log
// lines and a live terminal display (rows done / estimated, rows/s, ETA).
type progress struct {
	mu     sync.Mutex
	start  time.Time
	tables map[string]*tableProgress
}

type tableProgress struct {
	estimated int64
	ranges    map[int]int64 // committed rows per key range
	started   time.Time
	base      int64 // rows already done when this process started
	done      bool
}

func newProgress() *progress {
	return &progress{start: time.Now(), tables: map[string]*tableProgress{}}
}

// track registers a table before its ranges run.
func (p *progress) track(table string, estimated int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tables[table] == nil {
		p.tables[table] = &tableProgress{estimated: estimated, ranges: map[int]int64{}, started: time.Now(), base: -1}
	}
}

// seed records progress committed by earlier runs (a resumed snapshot).
func (p *progress) seed(table string, rangeNo int, rows int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tables[table]; t != nil {
		t.ranges[rangeNo] = rows
	}
}

// committed records a snapshot position once it is committed.
func (p *progress) committed(pos sinks.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tables[pos.Table]
	if t == nil {
		return
	}
	if t.base < 0 {
		t.base = sum(t.ranges)
	}
	t.ranges[pos.Range] = pos.RowsDone
}

func (p *progress) tableDone(table string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tables[table]; t != nil {
		t.done = true
	}
}

func sum(m map[int]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// line describes one table's progress.
type line struct {
	table           string
	rows, estimated int64
	rate            float64
	eta             time.Duration
	done            bool
	percent         float64
}

func (p *progress) lines() []line {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []line
	for name, t := range p.tables {
		l := line{table: name, rows: sum(t.ranges), estimated: max(t.estimated, 0), done: t.done}
		if secs := time.Since(t.started).Seconds(); secs > 0 && t.base >= 0 {
			l.rate = float64(l.rows-t.base) / secs
		}
		if l.estimated > 0 {
			l.percent = min(100, 100*float64(l.rows)/float64(l.estimated))
			if l.rate > 0 && l.rows < l.estimated {
				l.eta = time.Duration(float64(l.estimated-l.rows) / l.rate * float64(time.Second))
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].table < out[j].table })
	return out
}

// run reports progress until ctx ends: a log line per unfinished table
// every logEvery, and on a terminal a live line every second.
func (p *progress) run(ctx context.Context, log *slog.Logger, term io.Writer, logEvery time.Duration) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			if term != nil {
				fmt.Fprint(term, "\r\033[K")
			}
			return
		case <-tick.C:
		}
		ls := p.lines()
		if term != nil {
			fmt.Fprint(term, "\r\033[K"+liveLine(ls))
		}
		if time.Since(lastLog) >= logEvery {
			lastLog = time.Now()
			for _, l := range ls {
				if !l.done {
					log.Info("snapshot progress", "table", l.table, "rows", l.rows, "estimated", l.estimated,
						"percent", fmt.Sprintf("%.1f", l.percent), "rows_per_s", int64(l.rate), "eta", l.eta.Round(time.Second).String())
				}
			}
		}
	}
}

// liveLine is the one-line terminal display: the busiest unfinished tables.
func liveLine(ls []line) string {
	var parts []string
	var total, totalEst int64
	var rate float64
	for _, l := range ls {
		total += l.rows
		totalEst += l.estimated
		rate += l.rate
		if !l.done {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", l.table, l.percent))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("+%d", len(parts)-3))
	}
	s := fmt.Sprintf("snapshot %d/%d rows, %.0f rows/s", total, totalEst, rate)
	if rate > 0 && totalEst > total {
		s += ", ETA " + time.Duration(float64(totalEst-total)/rate*float64(time.Second)).Round(time.Second).String()
	}
	return s + " — " + strings.Join(parts, ", ")
}
