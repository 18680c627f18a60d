package ringbuf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// model is the deliberately simple reference: a slice of records with the
// same limits and errors as Buffer.
type model struct {
	recs       [][]byte
	stamps     []int64
	nbytes     int
	maxRecords int
	maxBytes   int
	sealed     bool
}

func (m *model) fits(n int) bool {
	return !m.sealed && n >= 0 && len(m.recs) < m.maxRecords && m.nbytes+4+n <= m.maxBytes
}

func (m *model) append(p []byte, stamp int64) (int, error) {
	if m.sealed {
		return -1, ErrSealed
	}
	if !m.fits(len(p)) {
		return -1, ErrFull
	}
	m.recs = append(m.recs, bytes.Clone(p))
	m.stamps = append(m.stamps, stamp)
	m.nbytes += 4 + len(p)
	return len(m.recs) - 1, nil
}

func (m *model) get(i int) []byte {
	if i < 0 || i >= len(m.recs) {
		return nil
	}
	return m.recs[i]
}

func (m *model) stamp(i int) int64 {
	if i < 0 || i >= len(m.recs) {
		return 0
	}
	return m.stamps[i]
}

func (m *model) searchStamp(t int64) int {
	for i, s := range m.stamps {
		if s >= t {
			return i
		}
	}
	return len(m.stamps)
}

// run returns the expected AppendRun result as one encoded byte string.
func (m *model) run(from, to, maxBytes int) (enc []byte, end, nbytes int) {
	to = min(to, len(m.recs))
	if from < 0 || from >= to {
		return nil, from, 0
	}
	end = from
	for end < to {
		size := 4 + len(m.recs[end])
		if end > from && nbytes+size > maxBytes {
			break
		}
		enc = binary.BigEndian.AppendUint32(enc, uint32(len(m.recs[end])))
		enc = append(enc, m.recs[end]...)
		nbytes += size
		end++
	}
	return enc, end, nbytes
}

// heldSlice is a slice obtained under a reference together with the bytes it
// must keep showing until that reference is released.
type heldSlice struct {
	got, want []byte
}

// harness drives a Buffer and a model with the same operations and checks
// every result. It is shared by the randomized differential test and the
// fuzz target.
type harness struct {
	tb      testing.TB
	b       *Buffer
	m       *model
	stamp   int64
	freed   bool
	refs    int         // references this harness holds on b
	held    []heldSlice // slices obtained under those references
	old     []*Buffer   // freed buffers with references still held
	oldHeld [][]heldSlice
	seq     int // payload pattern counter
}

func newHarness(tb testing.TB, maxRecords, maxBytes int) *harness {
	h := &harness{tb: tb}
	h.reset(maxRecords, maxBytes)
	return h
}

func (h *harness) reset(maxRecords, maxBytes int) {
	h.b = New(maxRecords, maxBytes)
	h.m = &model{maxRecords: max(maxRecords, 0), maxBytes: max(maxBytes, 0)}
	h.freed = false
	h.refs = 0
	h.held = nil
}

// payload returns n pattern bytes that differ from record to record.
func (h *harness) payload(n int) []byte {
	h.seq++
	p := make([]byte, n)
	for k := 0; k < n; k += len(patternBase) - 256 {
		off := h.seq % 251
		copy(p[k:], patternBase[off:])
	}
	if n >= 8 {
		binary.BigEndian.PutUint64(p, uint64(h.seq))
	}
	return p
}

// patternBase is a period-251-free byte sequence payloads are cut from.
var patternBase = func() []byte {
	p := make([]byte, 64<<10)
	for k := range p {
		p[k] = byte(k*7 + k>>8 + k>>16)
	}
	return p
}()

func (h *harness) fatalf(format string, args ...any) {
	h.tb.Helper()
	h.tb.Fatalf(format, args...)
}

func (h *harness) opAppend(n int, stampStep int64) {
	h.tb.Helper()
	p := h.payload(n)
	h.stamp += stampStep
	wantFits := h.m.fits(n)
	if got := h.b.Fits(n); got != wantFits {
		h.fatalf("Fits(%d) = %v, model %v", n, got, wantFits)
	}
	wi, werr := h.m.append(p, h.stamp)
	gi, gerr := h.b.Append(p, h.stamp)
	if gi != wi || !errors.Is(gerr, werr) || (werr == nil) != (gerr == nil) {
		h.fatalf("Append(%d bytes) = %d, %v; model %d, %v", n, gi, gerr, wi, werr)
	}
	// Append copies p: scribbling on it must not change the record.
	if n > 0 {
		p[0] ^= 0xFF
		p[n/2] ^= 0xFF
		p[n-1] ^= 0xFF
	}
	h.checkSizes()
}

func (h *harness) checkSizes() {
	h.tb.Helper()
	if h.freed {
		return
	}
	if got, want := h.b.Len(), len(h.m.recs); got != want {
		h.fatalf("Len = %d, model %d", got, want)
	}
	if got, want := h.b.Bytes(), h.m.nbytes; got != want {
		h.fatalf("Bytes = %d, model %d", got, want)
	}
	if got, want := h.b.Sealed(), h.m.sealed; got != want {
		h.fatalf("Sealed = %v, model %v", got, want)
	}
}

func (h *harness) opGet(i int) {
	h.tb.Helper()
	if h.freed {
		return
	}
	got, want := h.b.Get(i), h.m.get(i)
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		h.fatalf("Get(%d) = %d bytes (nil %v), model %d bytes (nil %v)", i, len(got), got == nil, len(want), want == nil)
	}
	if cap(got) != len(got) {
		h.fatalf("Get(%d): cap %d != len %d", i, cap(got), len(got))
	}
	if got != nil && h.refs > 0 {
		h.held = append(h.held, heldSlice{got: got, want: want})
	}
	if gs, ws := h.b.Stamp(i), h.m.stamp(i); gs != ws {
		h.fatalf("Stamp(%d) = %d, model %d", i, gs, ws)
	}
}

func (h *harness) opSearch(t int64) {
	h.tb.Helper()
	if h.freed {
		return
	}
	if got, want := h.b.SearchStamp(t), h.m.searchStamp(t); got != want {
		h.fatalf("SearchStamp(%d) = %d, model %d", t, got, want)
	}
}

func (h *harness) opRun(from, to, maxBytes int) {
	h.tb.Helper()
	if h.freed {
		return
	}
	dst := make([][]byte, 1, 8)
	dst[0] = []byte("keep")
	out, end, nb := h.b.AppendRun(dst, from, to, maxBytes)
	wantEnc, wantEnd, wantNB := h.m.run(from, to, maxBytes)
	if end != wantEnd || nb != wantNB {
		h.fatalf("AppendRun(%d,%d,%d) end=%d nbytes=%d, model end=%d nbytes=%d", from, to, maxBytes, end, nb, wantEnd, wantNB)
	}
	if string(out[0]) != "keep" {
		h.fatalf("AppendRun clobbered dst[0]")
	}
	got := bytes.Join(out[1:], nil)
	if !bytes.Equal(got, wantEnc) {
		h.fatalf("AppendRun(%d,%d,%d): encoding differs (%d vs %d bytes)", from, to, maxBytes, len(got), len(wantEnc))
	}
	total := 0
	for _, s := range out[1:] {
		if len(s) == 0 || cap(s) != len(s) {
			h.fatalf("AppendRun: slice len %d cap %d", len(s), cap(s))
		}
		total += len(s)
	}
	if total != nb {
		h.fatalf("AppendRun: slices hold %d bytes, nbytes %d", total, nb)
	}
	if h.refs > 0 && len(out) > 1 {
		h.held = append(h.held, heldSlice{got: out[1], want: bytes.Clone(out[1])})
	}
}

func (h *harness) opSeal() {
	h.tb.Helper()
	if h.freed {
		return
	}
	h.b.Seal()
	h.m.sealed = true
	h.checkSizes()
}

func (h *harness) opAcquire() {
	h.tb.Helper()
	ok := h.b.Acquire()
	if ok == h.freed {
		h.fatalf("Acquire = %v after freed=%v", ok, h.freed)
	}
	if ok {
		h.refs++
	}
}

func (h *harness) opRelease() {
	h.tb.Helper()
	if h.refs > 0 {
		h.checkHeld(h.held)
		h.b.Release()
		h.refs--
		if h.refs == 0 {
			h.held = nil
		}
		return
	}
	// Release the oldest freed buffer's references.
	if len(h.old) > 0 {
		h.checkHeld(h.oldHeld[0])
		h.old[0].Release()
		h.old, h.oldHeld = h.old[1:], h.oldHeld[1:]
	}
}

// opFree frees the buffer and starts a new one with the given limits. If
// references are held, the freed buffer is kept with them so that later
// operations (which reuse pooled memory) can check their slices survived.
func (h *harness) opFree(maxRecords, maxBytes int) {
	h.tb.Helper()
	h.b.Free()
	h.b.Free() // idempotent
	h.m.sealed = true
	if h.b.Acquire() {
		h.fatalf("Acquire succeeded after Free")
	}
	if _, err := h.b.Append([]byte("x"), 0); !errors.Is(err, ErrSealed) {
		h.fatalf("Append after Free = %v, want ErrSealed", err)
	}
	if h.b.Fits(0) || !h.b.Sealed() {
		h.fatalf("Fits/Sealed wrong after Free")
	}
	if h.refs > 0 {
		// Our references keep the memory: the contents are intact.
		h.checkSizes()
		h.checkHeld(h.held)
		for range h.refs - 1 {
			h.b.Release()
		}
		h.old = append(h.old, h.b)
		h.oldHeld = append(h.oldHeld, h.held)
	} else if h.b.Footprint() != 0 || h.b.Len() != 0 || h.b.Get(0) != nil {
		h.fatalf("freed buffer still reports memory: footprint %d len %d", h.b.Footprint(), h.b.Len())
	}
	h.reset(maxRecords, maxBytes)
}

func (h *harness) checkHeld(hs []heldSlice) {
	h.tb.Helper()
	for k, s := range hs {
		if !bytes.Equal(s.got, s.want) {
			h.fatalf("held slice %d changed while a reference was held", k)
		}
	}
}

// finish releases everything.
func (h *harness) finish() {
	h.tb.Helper()
	for h.refs > 0 || len(h.old) > 0 {
		h.opRelease()
	}
	h.b.Free()
}

// exec decodes one operation from data and runs it; it returns the unread
// rest. Every byte string is a valid program.
func (h *harness) exec(data []byte) []byte {
	h.tb.Helper()
	rd := func(n int) uint64 {
		var v uint64
		for range n {
			v <<= 8
			if len(data) > 0 {
				v |= uint64(data[0])
				data = data[1:]
			}
		}
		return v
	}
	op := rd(1)
	n := h.m.nbytes
	_ = n
	cnt := len(h.m.recs)
	switch op % 16 {
	case 0, 1, 2, 3:
		h.opAppend(int(rd(1)), int64(rd(1)%3))
	case 4:
		h.opAppend(int(rd(2)), int64(rd(1)%3))
	case 5:
		// Sizes at the chunk boundaries.
		sizes := []int{0, stdChunkSize - 4, stdChunkSize - 3, stdChunkSize, 2*stdChunkSize - 4, 2*stdChunkSize + 1, 2048 - 4, 2048 - 3}
		h.opAppend(sizes[rd(1)%uint64(len(sizes))], 1)
	case 6:
		h.opAppend(int(rd(3)%(300<<10)), 1)
	case 7, 8:
		h.opGet(int(rd(2)%uint64(cnt+4)) - 2)
	case 9:
		h.opSearch(int64(rd(2)%uint64(h.stamp+4)) - 2)
	case 10, 11:
		from := int(rd(2)%uint64(cnt+3)) - 1
		to := int(rd(2) % uint64(cnt+3))
		h.opRun(from, to, int(rd(3)%(200<<10)))
	case 12:
		h.opSeal()
	case 13:
		h.opAcquire()
	case 14:
		h.opRelease()
	case 15:
		h.opFree(int(rd(2)), int(rd(3)))
	}
	return data
}

// TestDifferentialRandom runs random operation sequences against the model.
func TestDifferentialRandom(t *testing.T) {
	for seed := range 40 {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := newRand(uint64(seed))
			limits := [][2]int{{5000, 2 << 20}, {50, 1 << 20}, {1000, 20000}, {3, 1 << 30}, {0, 1000}, {100, 0}}
			l := limits[seed%len(limits)]
			h := newHarness(t, l[0], l[1])
			prog := make([]byte, 3000)
			for k := range prog {
				prog[k] = byte(rng.next())
			}
			// Bias towards appends early so that buffers fill up.
			for k := 0; k < 400; k += 5 {
				prog[k] = byte(rng.next() % 5)
			}
			for len(prog) > 0 {
				prog = h.exec(prog)
			}
			for k := range len(h.m.recs) {
				h.opGet(k)
			}
			h.opRun(0, len(h.m.recs), 1<<62)
			h.finish()
		})
	}
}

// rng is a small deterministic generator (splitmix64) for reproducible tests.
type rng struct{ s uint64 }

func newRand(seed uint64) *rng { return &rng{s: seed*0x9E3779B97F4A7C15 + 1} }

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// FuzzOps decodes the fuzzer's bytes into an operation sequence (appends of
// many sizes, reads, runs, seal, acquire/release, free and re-create) and
// checks every result against the slice model.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 10, 1, 7, 0, 0, 10, 0, 0, 10, 4, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 1, 5, 2, 5, 3, 0, 5, 0, 7, 0, 1, 10, 0, 0, 0, 9, 1, 0, 0})
	f.Add([]byte{13, 0, 40, 0, 0, 50, 0, 7, 0, 0, 15, 0, 10, 0, 1, 0, 6, 1, 0, 0, 0, 0, 7, 0, 0, 14})
	f.Add([]byte{12, 0, 1, 0, 8, 0, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			data = data[:4096]
		}
		h := newHarness(t, 200, 512<<10)
		for len(data) > 0 {
			data = h.exec(data)
		}
		h.opRun(0, len(h.m.recs), 1<<62)
		h.finish()
	})
}
