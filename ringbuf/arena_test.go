package ringbuf

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

// arenaModel is TestArenaModel's reference: for every live buffer, its
// records (the bytes appended) and whether it is freed, plus the readers
// holding a reference with the records they saw.
type arenaModel struct {
	t       testing.TB
	bufs    []*Buffer
	recs    [][][]byte
	freed   []bool
	readers []heldRead
	seq     int
}

// heldRead is a reader holding a reference: the slices it read under it
// and what they held then.
type heldRead struct {
	buf    int
	slices [][]byte
	want   [][]byte
}

// exec runs one operation decoded from data and returns the rest.
func (m *arenaModel) exec(data []byte) []byte {
	if len(data) < 3 {
		return nil
	}
	op, x, y := data[0]%6, int(data[1]), int(data[2])
	data = data[3:]
	switch op {
	case 0: // a new buffer
		m.bufs = append(m.bufs, New(64, 16<<20))
		m.recs = append(m.recs, nil)
		m.freed = append(m.freed, false)
	case 1, 2: // append, sizes across the heap and off-heap classes
		if len(m.bufs) == 0 {
			return data
		}
		i := x % len(m.bufs)
		size := []int{10, 3000, 5000, 40 << 10, 70 << 10, 300 << 10}[y%6]
		p := make([]byte, size)
		m.seq++
		fillPattern(p, m.seq)
		if _, err := m.bufs[i].Append(p, 0); err == nil {
			m.recs[i] = append(m.recs[i], p)
		}
	case 3: // a reader takes a reference and reads everything
		if len(m.bufs) == 0 {
			return data
		}
		i := x % len(m.bufs)
		b := m.bufs[i]
		if !b.Acquire() {
			if !m.freed[i] {
				m.t.Fatalf("Acquire of live buffer %d failed", i)
			}
			return data
		}
		var r heldRead
		r.buf = i
		for k := range b.Len() {
			r.slices = append(r.slices, b.Get(k))
			r.want = append(r.want, m.recs[i][k])
		}
		m.readers = append(m.readers, r)
	case 4: // the oldest reader releases
		if len(m.readers) == 0 {
			return data
		}
		m.checkReaders()
		m.bufs[m.readers[0].buf].Release()
		m.readers = m.readers[1:]
	case 5: // the owner frees; trim the free blocks
		if len(m.bufs) == 0 {
			return data
		}
		i := x % len(m.bufs)
		m.bufs[i].Free()
		m.freed[i] = true
		Trim(int64(y)<<14, 0)
	}
	m.check()
	return data
}

// check compares every live buffer with its records, checks that no two
// off-heap chunks or pages of live buffers overlap, and that every held
// reader still reads what it read.
func (m *arenaModel) check() {
	type span struct{ lo, hi uintptr }
	var spans []span
	for i, b := range m.bufs {
		if m.freed[i] && !slices.ContainsFunc(m.readers, func(r heldRead) bool { return r.buf == i }) {
			continue // recycled: nobody may read it
		}
		for k, want := range m.recs[i] {
			if got := b.Get(k); !bytes.Equal(got, want) {
				m.t.Fatalf("buffer %d record %d: %d bytes differ from the %d appended", i, k, len(got), len(want))
			}
		}
		for _, c := range b.wtab.chunks[:b.nchunks] {
			if c.off {
				lo := uintptr(unsafe.Pointer(unsafe.SliceData(c.b)))
				spans = append(spans, span{lo, lo + uintptr(cap(c.b))})
			}
		}
		for _, p := range b.wtab.pages[:b.npages] {
			if p.off {
				lo := uintptr(unsafe.Pointer(unsafe.SliceData(p.e)))
				spans = append(spans, span{lo, lo + uintptr(len(p.e)*entrySize)})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int {
		if a.lo < b.lo {
			return -1
		}
		if a.lo > b.lo {
			return 1
		}
		return 0
	})
	for k := 1; k < len(spans); k++ {
		// A chunk re-registered in several slots appears once per slot.
		if spans[k].lo < spans[k-1].hi && spans[k] != spans[k-1] {
			m.t.Fatalf("off-heap blocks of live buffers overlap: %#x-%#x and %#x-%#x", spans[k-1].lo, spans[k-1].hi, spans[k].lo, spans[k].hi)
		}
	}
	m.checkReaders()
}

// checkReaders checks that every slice a reader holds still has its bytes.
func (m *arenaModel) checkReaders() {
	for _, r := range m.readers {
		for k := range r.slices {
			if !bytes.Equal(r.slices[k], r.want[k]) {
				m.t.Fatalf("a reader of buffer %d holding a reference sees record %d changed", r.buf, k)
			}
		}
	}
}

// finish releases every reader and frees every buffer.
func (m *arenaModel) finish() {
	for _, r := range m.readers {
		m.bufs[r.buf].Release()
	}
	for _, b := range m.bufs {
		b.Free()
	}
}

// TestArenaModel runs random sequences of buffers created, appended to,
// read under references held across frees and reuse, freed and trimmed:
// every live buffer reads exactly what was appended (reuse never shows a
// block's old bytes), a reader holding a reference reads what it read
// while other buffers reuse and trim memory (no block is recycled under
// it), and no two live chunks or pages share memory. Under the
// ringbuf_invariants build tag freed blocks are also inaccessible, so an
// access after free faults.
func TestArenaModel(t *testing.T) {
	for seed := range 30 {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := newRand(uint64(seed))
			prog := make([]byte, 1500)
			for k := range prog {
				prog[k] = byte(r.next())
			}
			m := &arenaModel{t: t}
			for len(prog) > 0 {
				prog = m.exec(prog)
			}
			m.finish()
		})
	}
	Trim(0, 0)
}

// FuzzArena is TestArenaModel over the fuzzer's operation sequences.
func FuzzArena(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 4, 3, 0, 0, 5, 0, 0, 0, 0, 0, 1, 1, 4, 4, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 2, 0, 5, 2, 1, 3, 3, 1, 0, 5, 1, 0, 2, 0, 5, 3, 0, 0, 4, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3000 {
			data = data[:3000]
		}
		m := &arenaModel{t: t}
		for len(data) > 0 {
			data = m.exec(data)
		}
		m.finish()
	})
}
