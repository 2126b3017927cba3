package pipeline

// UnitCounts is the number of pending and running units in one group.
type UnitCounts struct {
	Pending int
	Running int
}

// SchedulerStats is a point-in-time view of a Scheduler, for tests that
// check what is pending and running. (The autoscaling counts of SPEC §5
// are cluster-wide and come from storage, not from one scheduler.)
type SchedulerStats struct {
	UnitCounts
	ByKind     map[string]UnitCounts // keyed by Unit.Kind
	ByPriority map[int]UnitCounts    // keyed by Unit.Priority
}

// Stats returns the current counts. A unit that was asked to yield counts as
// running until it has returned.
func (s *Scheduler) Stats() SchedulerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SchedulerStats{ByKind: map[string]UnitCounts{}, ByPriority: map[int]UnitCounts{}}
	add := func(u Unit, running bool) {
		k, p := st.ByKind[u.Kind], st.ByPriority[u.Priority]
		if running {
			st.Running++
			k.Running++
			p.Running++
		} else {
			st.Pending++
			k.Pending++
			p.Pending++
		}
		st.ByKind[u.Kind], st.ByPriority[u.Priority] = k, p
	}
	for _, e := range s.pending {
		add(e.unit, false)
	}
	for e := range s.running {
		add(e.unit, true)
	}
	return st
}
