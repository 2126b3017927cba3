package pipeline

// UnitCounts is the number of pending and running units in one group.
type UnitCounts struct {
	Pending int
	Running int
}

// SchedulerStats is a point-in-time view of a Scheduler for autoscaling
// gauges (SPEC §5: pending/active snapshot and stream counts). It is a
// snapshot rather than a stream of events so that metrics exporters can read
// it from their collection callback.
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
