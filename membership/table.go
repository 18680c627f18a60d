package membership

import (
	"slices"
	"strings"
	"sync"
)

// maxDeparted bounds how many Dead/Left members the table remembers for All.
// A cluster whose node names change on every restart (containers) would
// otherwise grow the table forever; beyond the bound the member that departed
// longest ago is forgotten.
const maxDeparted = 256

// table is this node's view of the cluster, fed by memberlist's event
// delegate. memberlist hands its delegate pointers into its own node structs,
// which it keeps mutating under a lock we cannot take; the table therefore
// stores copies, and Members/All read only the table.
//
// Invariants: every entry's Meta is owned by the table and never modified
// after it is stored (readers clone before returning); seq is strictly
// increasing; departedAt is non-zero exactly for Dead/Left entries.
type table struct {
	mu       sync.Mutex
	entries  map[string]*entry
	seq      uint64 // departure counter; orders departed entries by age
	departed int    // entries whose State is Dead or Left
	// leaving holds live members that announced a graceful leave whose
	// departure has not been applied yet; only names of live entries, so it
	// is bounded by the table.
	leaving map[string]struct{}
}

type entry struct {
	m          Member
	departedAt uint64
}

func newTable() *table {
	return &table{entries: make(map[string]*entry), leaving: make(map[string]struct{})}
}

// apply records one change and returns a snapshot of the member after it.
// meta is copied. For EventLeave, st must be Dead or Left, and a member that
// announced its leave (markLeaving) is Left regardless; for other kinds st is
// ignored and the member is Alive.
func (t *table) apply(kind EventKind, name, addr string, meta []byte, local bool, st State) Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[name]
	if !ok {
		e = &entry{}
		t.entries[name] = e
	}
	wasDeparted := e.departedAt != 0
	e.m = Member{Name: name, Addr: addr, Meta: append([]byte(nil), meta...), Local: local}
	_, announced := t.leaving[name]
	delete(t.leaving, name)
	if kind == EventLeave {
		if announced {
			st = Left
		}
		e.m.State = st
		if !wasDeparted {
			t.departed++
		}
		t.seq++
		e.departedAt = t.seq
		t.trimLocked()
	} else {
		e.m.State = Alive
		if wasDeparted {
			t.departed--
		}
		e.departedAt = 0
		if kind == EventUpdate && announced {
			t.leaving[name] = struct{}{} // still leaving; a meta update does not cancel it
		}
	}
	return e.m.clone()
}

// markLeaving applies a member's announcement that it is leaving gracefully.
// The announcement and memberlist's departure notice travel separately and
// may arrive in either order: if the departure came first the member is
// relabelled Left, otherwise the label is applied when it arrives. Unknown
// names are ignored.
func (t *table) markLeaving(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[name]
	switch {
	case !ok || e.m.Local:
	case e.m.State == Dead:
		e.m.State = Left
	case e.m.live():
		t.leaving[name] = struct{}{}
	}
}

// trimLocked forgets the oldest departed entries beyond maxDeparted.
func (t *table) trimLocked() {
	for t.departed > maxDeparted {
		var oldest string
		var at uint64
		for name, e := range t.entries {
			if e.departedAt != 0 && (at == 0 || e.departedAt < at) {
				oldest, at = name, e.departedAt
			}
		}
		delete(t.entries, oldest)
		t.departed--
	}
}

// snapshot returns copies of the entries sorted by name; with liveOnly, only
// Alive and Suspect members. All Meta copies share one allocation, each
// capped (b[:n:n]) so that appending to one cannot overwrite another.
func (t *table) snapshot(liveOnly bool) []Member {
	t.mu.Lock()
	out := make([]Member, 0, len(t.entries))
	size := 0
	for _, e := range t.entries {
		if liveOnly && !e.m.live() {
			continue
		}
		out = append(out, e.m)
		size += len(e.m.Meta)
	}
	buf := make([]byte, 0, size)
	for i := range out {
		if m := out[i].Meta; m != nil {
			start := len(buf)
			buf = append(buf, m...)
			out[i].Meta = buf[start:len(buf):len(buf)]
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// liveCount returns the number of Alive and Suspect members, this node
// included.
func (t *table) liveCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries) - t.departed
}
