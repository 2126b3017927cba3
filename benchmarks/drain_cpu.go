package benchmarks

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// The server's CPU per drain: what serving one new client costs the sync
// API process and the storage cluster, apart from the client's own CPU.
// The client runs in the harness; a drain served in-process would count
// the client's zstd decoding and BSON walk as the server's, so the sync
// API's CPU is measured only when it runs in a `syncpipe run --role api`
// child (DrainOptions.Harness) and is left unmeasured in-process.
//
// A 10k-todo drain costs the server some tens of milliseconds, while
// /proc/<pid>/stat counts CPU in 10 ms ticks truncated per process; the
// figures are read from /proc/<pid>/task/<tid>/schedstat (nanoseconds)
// instead, where the kernel has it.

// serverCPU is CPU time of the server side of a drain.
type serverCPU struct {
	syncpipe time.Duration // the sync API child (0 = not measured)
	storage  time.Duration // every process of the storage cluster
}

func (c serverCPU) sub(before serverCPU) serverCPU {
	return serverCPU{syncpipe: c.syncpipe - before.syncpipe, storage: c.storage - before.storage}
}

// drainMeter samples the CPU time of a drain server's processes.
type drainMeter struct {
	child      int // pid of the sync API child; 0 = in-process (not measured)
	postmaster int // the storage cluster's postmaster; 0 = not on this machine
}

// storagePostmaster finds the storage cluster's postmaster: the parent of
// one of the store's own backends. That needs no superuser (unlike
// data_directory) and works for the throwaway cluster and the tests'
// shared one alike; a server on another machine has no such process
// here, and 0 leaves its CPU unmeasured.
func storagePostmaster(ctx context.Context, store *bucketstore.Store) (int, error) {
	var backend int
	if err := store.Pool().QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, fmt.Errorf("find the storage backend: %w", err)
	}
	title, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", backend))
	if err != nil || !strings.HasPrefix(string(title), "postgres") {
		return 0, nil // another machine's pid, or a pid of some other process here
	}
	f := procStat(backend)
	if len(f) < 2 {
		return 0, nil
	}
	pm, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, nil
	}
	return pm, nil
}

// sample reads the processes' CPU time so far.
func (m drainMeter) sample() serverCPU {
	var c serverCPU
	if m.child > 0 {
		c.syncpipe = pidCPU(m.child)
	}
	if m.postmaster > 0 {
		c.storage = clusterCPUPrecise(m.postmaster)
	}
	return c
}

// settle waits until the processes are idle: a drain's server work does
// not end when the client has read checkpoint_complete (the stream is torn
// down, the child's garbage collector finishes its cycle, backends return
// their connections), and what is left over must not be counted into the
// next drain, which uses the other wire format. Idle is less than 1 ms of
// CPU in 25 ms; it gives up after a second, for a machine whose background
// never goes that quiet.
func (m drainMeter) settle(ctx context.Context) {
	const step, quiet = 25 * time.Millisecond, time.Millisecond
	last := m.sample()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(step)
		now := m.sample()
		d := now.sub(last)
		if d.syncpipe+d.storage < quiet {
			return
		}
		last = now
	}
}

// pidCPU is the CPU time of a process: the sum of its threads' run times
// from schedstat (nanoseconds), or user + system from stat (ticks) if
// that is larger — threads that have exited are only counted there — or
// schedstat is unavailable. Zero once the process is gone.
func pidCPU(pid int) time.Duration {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	return max(statTicks(f[11:13]), threadsCPU(pid))
}

// threadsCPU sums the first field (time on a CPU, ns) of the schedstat of
// each thread of pid; 0 if none is readable.
func threadsCPU(pid int) time.Duration {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(b), " ")
		n, _ := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
		ns += n
	}
	return time.Duration(ns)
}

// statTicks adds up tick counts of /proc/<pid>/stat fields.
func statTicks(fields []string) time.Duration {
	var ticks uint64
	for _, v := range fields {
		t, _ := strconv.ParseUint(v, 10, 64)
		ticks += t
	}
	return time.Duration(ticks) * clockTick
}

// clusterCPUPrecise is clusterCPU by the postmaster's pid, with each live
// process read by pidCPU: the postmaster's own time, that of every child
// alive now (backends, parallel workers, the checkpointer, autovacuum…),
// and of the children it has reaped (ticks: the only record an exited
// process leaves). Summing totals, not per-process differences, keeps a
// backend that exits between two samples counted: its time moves from
// its own line to the postmaster's reaped total.
func clusterCPUPrecise(postmaster int) time.Duration {
	pm := procStat(postmaster)
	if len(pm) < 15 {
		return 0
	}
	total := pidCPU(postmaster) + statTicks(pm[13:15]) // cutime, cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return total
	}
	parent := strconv.Itoa(postmaster)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if f := procStat(pid); len(f) >= 13 && f[1] == parent {
			total += pidCPU(pid)
		}
	}
	return total
}

// drainCPURun is the server's CPU of one drain with what it sent.
type drainCPURun struct {
	cpu       serverCPU
	wire, ops int64
}

// drainCPURow is one line of the server-CPU table: a data set drained in
// one wire format.
type drainCPURow struct {
	dataSet, wire   string
	runs            []drainCPURun
	childServed     bool // the sync API's CPU was measured
	storageMeasured bool // the storage cluster runs on this machine
}

// medianOfRuns is the median of f over the runs.
func (r drainCPURow) medianOfRuns(f func(drainCPURun) float64) float64 {
	xs := make([]float64, len(r.runs))
	for i, run := range r.runs {
		xs[i] = f(run)
	}
	return median(xs)
}

// drainCPUNote renders the server-CPU table: per data set and wire
// format, the medians of the runs' CPU seconds of the sync API child and
// of the storage cluster, and those per MiB the server sent (on the wire,
// after compression) and per 1,000 ops delivered. Empty if no row has a
// measurement.
func drainCPUNote(rows []drainCPURow, runs int) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Server CPU per drain of the LATERAL shape (medians of %d runs): CPU time of the sync API "+
		"(a `syncpipe run --role api` child; — where it ran in-process with the client) and of every process of the "+
		"storage cluster (backends, parallel workers, housekeeping; it serves nothing else meanwhile), from the request "+
		"until both are idle again; the client's decoding runs in the harness and is not counted. MiB sent is the "+
		"response body as the server sent it (after compression).\n\n", runs)
	b.WriteString("| data set | wire | MiB sent | server CPU s (syncpipe / storage) | CPU-ms per MiB sent (syncpipe / storage) | CPU-ms per 1k ops (syncpipe / storage) |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		mib := r.medianOfRuns(func(x drainCPURun) float64 { return float64(x.wire) / (1 << 20) })
		sp := func(f func(drainCPURun) float64) string {
			if !r.childServed {
				return "—"
			}
			return cpuFigure(r.medianOfRuns(f))
		}
		st := func(f func(drainCPURun) float64) string {
			if !r.storageMeasured {
				return "—"
			}
			return cpuFigure(r.medianOfRuns(f))
		}
		perMiB := func(d func(drainCPURun) time.Duration) func(drainCPURun) float64 {
			return func(x drainCPURun) float64 { return d(x).Seconds() * 1000 / (float64(max(x.wire, 1)) / (1 << 20)) }
		}
		perKOps := func(d func(drainCPURun) time.Duration) func(drainCPURun) float64 {
			return func(x drainCPURun) float64 { return d(x).Seconds() * 1000 / (float64(max(x.ops, 1)) / 1000) }
		}
		secs := func(d func(drainCPURun) time.Duration) func(drainCPURun) float64 {
			return func(x drainCPURun) float64 { return d(x).Seconds() }
		}
		spD := func(x drainCPURun) time.Duration { return x.cpu.syncpipe }
		stD := func(x drainCPURun) time.Duration { return x.cpu.storage }
		fmt.Fprintf(&b, "| %s | %s | %.2f | %s / %s | %s / %s | %s / %s |\n", r.dataSet, r.wire, mib,
			sp(secs(spD)), st(secs(stD)), sp(perMiB(spD)), st(perMiB(stD)), sp(perKOps(spD)), st(perKOps(stD)))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// cpuFigure prints x with about three significant digits, without the
// exponents %g falls back to.
func cpuFigure(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	case x >= 1:
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.3f", x)
}

// cpuText prints a CPU time, or "—" if it was not measured.
func cpuText(d time.Duration, measured bool) string {
	if !measured {
		return "—"
	}
	return fmt.Sprintf("%.3f s", d.Seconds())
}

// medianCPU is the median server CPU of the runs (each part on its own).
func medianCPU(runs []drainCPURun) serverCPU {
	sp := make([]time.Duration, len(runs))
	st := make([]time.Duration, len(runs))
	for i, r := range runs {
		sp[i], st[i] = r.cpu.syncpipe, r.cpu.storage
	}
	slices.Sort(sp)
	slices.Sort(st)
	if len(runs) == 0 {
		return serverCPU{}
	}
	return serverCPU{syncpipe: sp[len(sp)/2], storage: st[len(st)/2]}
}
