package ringbuf

import "fmt"

// checkAppend verifies, after record i was written and before it is
// committed, the invariants readers rely on (see the design notes): the
// written count trails by exactly one (the committed count by at least one), cumulative ends grow by the record
// size, slots are non-decreasing, records sharing a slot are adjacent, and
// the published table holds the record's page and chunk. It runs only when
// built with the ringbuf_invariants tag and panics on a violation, which
// would be a bug in this package.
func (b *Buffer) checkAppend(i int, need int) {
	t := b.tab.Load()
	if t != b.wtab || b.Written() != i || b.committed.Load() > int64(i) {
		panic(fmt.Sprintf("ringbuf invariant: record %d: table published %v, written %d, committed %d", i, t == b.wtab, b.written.Load(), b.committed.Load()))
	}
	e, ok := b.entry(t, i)
	if !ok || int(e.chunk) >= int(b.nchunks) || t.chunks[e.chunk] == nil {
		panic(fmt.Sprintf("ringbuf invariant: record %d not reachable from the published table", i))
	}
	if int(e.off)+need > len(t.chunks[e.chunk].b) {
		panic(fmt.Sprintf("ringbuf invariant: record %d overflows its chunk", i))
	}
	if i == 0 {
		if e.end != int64(need) {
			panic("ringbuf invariant: first record's cumulative end")
		}
		return
	}
	p, _ := b.entry(t, i-1)
	switch {
	case e.end != p.end+int64(need):
		panic(fmt.Sprintf("ringbuf invariant: record %d cumulative end %d after %d (+%d)", i, e.end, p.end, need))
	case e.chunk < p.chunk:
		panic(fmt.Sprintf("ringbuf invariant: record %d slot %d before slot %d", i, e.chunk, p.chunk))
	case e.chunk == p.chunk && int64(e.off) != int64(p.off)+p.end-b.endBefore(t, i-1):
		panic(fmt.Sprintf("ringbuf invariant: record %d not adjacent to record %d in slot %d", i, i-1, e.chunk))
	}
}

// endBefore returns the cumulative end of the records before i.
func (b *Buffer) endBefore(t *table, i int) int64 {
	if i == 0 {
		return 0
	}
	e, _ := b.entry(t, i-1)
	return e.end
}
