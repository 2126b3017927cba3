package benchmarks

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The machine is shared: "CPU busy" counts the neighbours too. To say
// whether a configuration is CPU-bound, the harness also adds up the CPU
// time of its own processes: the syncpipe child (from its rusage) and the
// throwaway cluster's postmaster with all its backends.

// clockTick is the kernel's USER_HZ; 100 on every Linux platform Go
// supports for this harness.
const clockTick = time.Second / 100

// clusterCPU is the CPU time used so far by the cluster in dataDir: the
// postmaster's own and its reaped children's time plus that of its live
// (or exited, not yet reaped) children. Children are found by parent pid:
// backends call setsid, so the process group does not find them. Zero
// when unreadable or dataDir is "".
func clusterCPU(dataDir string) time.Duration {
	if dataDir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks uint64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(pid)
		// Fields after "(comm)": [0] state, [1] ppid, [11] utime, [12]
		// stime, [13] cutime, [14] cstime.
		if len(f) < 15 || (pid != pm && f[1] != strconv.Itoa(pm)) {
			continue
		}
		n := 2
		if pid == pm {
			n = 4 // the postmaster has reaped the exited backends
		}
		for _, v := range f[11 : 11+n] {
			t, _ := strconv.ParseUint(v, 10, 64)
			ticks += t
		}
	}
	return time.Duration(ticks) * clockTick
}

// selfCPU is the harness process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat returns the fields of /proc/pid/stat after the command name
// (which may contain spaces).
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procCPU is the CPU time of each live process of a cluster, by pid, with
// the role its command line names.
type procCPU map[int]struct {
	role string
	cpu  time.Duration
}

// clusterProcs samples the live processes of the cluster in dataDir (none
// for ""). A
// role is "walsender", "backend <database>" or "auxiliary" (postmaster,
// checkpointer, WAL writer, autovacuum…): it tells whether the CPU a
// scenario costs goes into decoding, writing storage or housekeeping.
func clusterProcs(dataDir string) procCPU {
	out := procCPU{}
	if dataDir == "" {
		return out
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return out
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm := strings.TrimSpace(first)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(pid)
		if len(f) < 15 || (e.Name() != pm && f[1] != pm) {
			continue
		}
		out[pid] = struct {
			role string
			cpu  time.Duration
		}{procRole(pid), procCPUTime(pid, f)}
	}
	return out
}

// procCPUTime is pid's CPU time: from /proc/<pid>/schedstat, in
// nanoseconds, else from its stat fields f (utime + stime, in clock ticks
// of 10 ms). A small run's backend may use less than a tick between two
// samples: in ticks its CPU read as 0 now and then (TestStreamingSmoke,
// "storage backends:0").
func procCPUTime(pid int, f []string) time.Duration {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		first, _, _ := strings.Cut(string(b), " ")
		if ns, err := strconv.ParseUint(first, 10, 64); err == nil {
			return time.Duration(ns)
		}
	}
	var ticks uint64
	for _, v := range f[11:13] {
		t, _ := strconv.ParseUint(v, 10, 64)
		ticks += t
	}
	return time.Duration(ticks) * clockTick
}

// procRole classifies a Postgres process by its title, which is
// "postgres: walsender …", "postgres: <user> <database> <client> …" or
// "postgres: <auxiliary process name>".
func procRole(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return titleRole(strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
}

func titleRole(title string) string {
	rest, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return "auxiliary"
	}
	f := strings.Fields(rest)
	switch {
	case len(f) > 0 && f[0] == "walsender":
		return "walsender"
	case len(f) >= 3 && (strings.ContainsAny(f[2], "(:") || f[2] == "[local]"):
		return "backend " + f[1]
	default:
		return "auxiliary"
	}
}

// since is the CPU each role used between an earlier sample and p, counting
// only processes alive at p (a process started in between counts whole).
func (p procCPU) since(before procCPU) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, now := range p {
		d := now.cpu
		if was, ok := before[pid]; ok && was.role == now.role {
			d -= was.cpu
		}
		out[now.role] += d
	}
	return out
}
