// Package ringbuf holds one streamlet's messages: a bounded, append-only,
// single-writer / many-reader record log that readers access without locks.
//
// Storage layout. Every record is stored as
//
//	+----------------------+------------------+
//	| u32 BE payload len L |  L payload bytes |
//	+----------------------+------------------+
//
// where bit 31 of the length word is a flag the caller may set (AppendExt;
// the engine marks extended records, wire.RecordExt, with it) and L is the
// other 31 bits.
//
// and consecutive records of one chunk are contiguous, so the stored bytes of
// records [from, to) are exactly the record run of a wire DATA frame body
// (package wire, DATA frame) and can be written to a socket as they are.
// A record never spans two chunks; a run is therefore a short list of slices.
//
// Concurrency. One writer goroutine at a time calls Append, Fits, Seal and
// Free (the caller serializes them; the buffer takes no lock). Any number of
// reader goroutines call Len, Bytes, Sealed, Get, Stamp, SearchStamp,
// AppendRun, Acquire and Release concurrently with the writer. A record
// becomes visible only through the atomic store of the committed count, made
// after its bytes and index entry are fully written, so a reader never sees a
// partial record.
//
// Lifetime. The creator of a Buffer (the owner) holds one implicit reference.
// Readers take their own with Acquire and drop it with Release. Free drops the
// owner's reference and forbids new Acquires; chunks and index pages go back
// to package-level pools (the off-heap arena for chunks of 4 KiB and more,
// arena.go) when the last reference is gone. Slices returned by
// Get and AppendRun stay valid exactly as long as the caller holds a
// reference (the owner's, before Free, or an Acquired one).
package ringbuf

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"sync/atomic"
)

// ErrFull is returned by Append when the record would exceed the buffer's
// maxRecords or maxBytes limit (or a payload is longer than a u32 length
// prefix can describe). The buffer is unchanged. Append returns this sentinel
// unwrapped, so the hot path does not allocate; compare with errors.Is.
var ErrFull = errors.New("ringbuf: buffer full")

// ErrSealed is returned by Append after Seal or Free. The buffer is unchanged.
// Append returns this sentinel unwrapped; compare with errors.Is.
var ErrSealed = errors.New("ringbuf: buffer sealed")

// prefixLen is the size of the big-endian u32 length prefix of every record.
const prefixLen = 4

// maxPayload is the largest payload a 31-bit length (bit 31 is the ext
// flag) can describe.
const maxPayload = math.MaxInt32

// extBit is the length word's flag bit (AppendExt, GetExt).
const extBit = 1 << 31

// cacheLine is the cache line size: a Buffer's size is a multiple of it.
const cacheLine = 64

// entry is one record's index entry. It is written by the writer before the
// committed count covers it and never changed afterwards.
type entry struct {
	stamp int64  // caller's stamp (publish time in unix nanoseconds for the engine)
	end   int64  // cumulative stored bytes of records [0, i] incl. prefixes
	chunk uint32 // index into table.chunks
	off   uint32 // offset of the record's length prefix inside the chunk
}

// table is the published directory of chunks and index pages. Slots are
// filled by the writer in order; a slot is written before any committed
// record refers to it. When a slice is full the writer publishes a new table
// with a larger copy (the other slice is shared) before the commit that needs
// it. Unused slots are nil.
type table struct {
	chunks []*chunk
	pages  []*page
}

// emptyTable is published after recycling so that a stray reader finds no
// memory; it is never written.
var emptyTable = &table{}

// Buffer is one streamlet's record log. Create it with New. The zero value is
// not usable. Methods state which side (writer or reader) may call them; see
// the package comment for the lifetime contract.
type Buffer struct {
	// refs encodes the reference count and the freed flag: refs = 2*count | freed.
	// The owner's implicit reference is counted. Readers RMW it on
	// Acquire/Release (once per read batch, not per record).
	refs atomic.Int64
	// committed is the number of visible records. Stored only by the writer
	// (release), after the record's bytes, index entry and any table growth.
	//
	// No cache-line padding: the writer stores to this line at every append
	// (committed), so readers miss on it once per append whatever else lives
	// there, and their reference counting adds one miss per batch. Three
	// padded lines made a Buffer 424 bytes, the largest part of a small
	// channel (issue 14); unpadded it is bufferSize bytes, a size class whose
	// objects start on a cache line.
	committed atomic.Int64
	// Read-mostly, shared: changes only on table growth, Seal, Free.
	tab    atomic.Pointer[table]
	sealed atomic.Bool
	// held is fixed before the first Append (SetHeld): appends wait for
	// Commit to become visible. It sits in sealed's padding.
	held bool
	// footprint is the bytes of chunk and page memory held (for load reports).
	footprint atomic.Int64
	// acct, if set (Account), receives every change of footprint too.
	acct *atomic.Int64

	// Writer-only state (and the recycler, which runs after the writer is done).
	maxBytes   int64
	nbytes     int64 // stored bytes written
	wtab       *table
	cur        *chunk // current standard chunk (nil before the first)
	maxRecords int32
	n          int32  // records written (== committed unless held)
	nchunks    int32  // filled slots of wtab.chunks
	npages     int32  // filled slots of wtab.pages
	curIdx     uint32 // cur's slot in wtab.chunks
	curOff     int32  // first free byte in cur
	nextClass  int32  // size class of the next standard chunk
	// written is the number of records written, in held mode only (else
	// committed is): ahead of committed until Commit. Stored only by the
	// writer (release), after the record's bytes and index entry; it fills
	// the padding after the int32s.
	written atomic.Int32

	// Inline first slots keep a small buffer free of extra allocations.
	inlineTab    table
	inlineChunks [2]*chunk
	inlinePages  [2]*page
}

// bufferSize is unsafe.Sizeof(Buffer{}) (TestBufferLayout): a multiple of
// the cache line, so the allocator's size class aligns every Buffer to one.
const bufferSize = 192

// New returns an empty buffer holding at most maxRecords records and at most
// maxBytes stored bytes, the latter INCLUDING the 4-byte length prefix of
// every record. A non-positive limit makes every Append fail with ErrFull.
// An empty buffer allocates only the Buffer itself (a few hundred bytes);
// chunks and index pages are taken from the pools as records arrive.
// The caller becomes the owner and holds one reference (see Free).
func New(maxRecords, maxBytes int) *Buffer {
	b := &Buffer{maxRecords: int32(min(max(maxRecords, 0), math.MaxInt32)), maxBytes: int64(max(maxBytes, 0))}
	b.inlineTab.chunks = b.inlineChunks[:]
	b.inlineTab.pages = b.inlinePages[:]
	b.wtab = &b.inlineTab
	b.tab.Store(b.wtab)
	b.refs.Store(2) // owner's reference, not freed
	return b
}

// Append copies p into the buffer as record number index, with the given
// stamp, and makes it visible to readers. Stamps must be non-decreasing for
// SearchStamp to be meaningful. It returns ErrSealed after Seal or Free and
// ErrFull if the record would exceed maxRecords or maxBytes; on error the
// buffer is unchanged and index is -1.
//
// Writer side only: at most one goroutine at a time may call Append, Fits,
// Seal and Free. Safe concurrently with any number of readers.
func (b *Buffer) Append(p []byte, stamp int64) (index int, err error) {
	return b.AppendExt(p, false, stamp)
}

// AppendExt is Append with the length word's flag bit set when ext is true
// (a record whose body is an extended record body, wire.RecordExt). The
// flag travels with the record in AppendRun's bytes; Get returns the body
// without it and GetExt reports it.
func (b *Buffer) AppendExt(p []byte, ext bool, stamp int64) (index int, err error) {
	if b.sealed.Load() {
		return -1, ErrSealed
	}
	if !b.fits(len(p)) {
		return -1, ErrFull
	}
	need := prefixLen + len(p)
	c, ci, off := b.place(need)
	w := uint32(len(p))
	if ext {
		w |= extBit
	}
	binary.BigEndian.PutUint32(c.b[off:], w)
	copy(c.b[off+prefixLen:], p)

	i := int(b.n)
	pg, j := pageOf(i)
	if j == 0 {
		b.addPage(pg)
	}
	b.nbytes += int64(need)
	b.wtab.pages[pg].e[j] = entry{stamp: stamp, end: b.nbytes, chunk: ci, off: uint32(off)}
	if invariants {
		b.checkAppend(i, need)
	}
	b.n = int32(i + 1)
	// Release: everything above happens before a reader that loads n+1.
	if b.held {
		b.written.Store(b.n)
	} else {
		b.committed.Store(int64(b.n))
	}
	return i, nil
}

// SetHeld puts the buffer in held mode: appended records are written but
// become visible to readers (Len, Get, AppendRun, ...) only when Commit
// covers them. A replicated streamlet's copy holds records until every
// replica has them. Writer side, before the first Append.
func (b *Buffer) SetHeld() { b.held = true }

// Written returns the number of records written, visible or not (an
// atomic load). Any goroutine. In held mode it may exceed Len; records
// [0, Written()) can be read with AppendHeldRun and HeldStamp.
func (b *Buffer) Written() int {
	if !b.held {
		return int(b.committed.Load())
	}
	return int(b.written.Load())
}

// Commit makes records [0, n) visible to readers; n is clamped to Written
// and a smaller n than the present count changes nothing. Any goroutine
// (the committed count only grows, by compare-and-swap); only held mode
// needs it.
func (b *Buffer) Commit(n int) {
	n = min(n, b.Written())
	for {
		c := b.committed.Load()
		if int64(n) <= c || b.committed.CompareAndSwap(c, int64(n)) {
			return
		}
	}
}

// Truncate drops the records from index n on, which must not be visible
// (n >= Len): recovery of a replicated streamlet keeps only what every
// surviving replica holds. Their memory stays until Free. The caller must
// append nothing more and seals the buffer (once it committed what it
// keeps). Writer side.
func (b *Buffer) Truncate(n int) {
	if !b.held || n < 0 || n >= int(b.n) || int64(n) < b.committed.Load() {
		return
	}
	b.n = int32(n)
	b.nbytes = 0
	if n > 0 {
		e, _ := b.entry(b.wtab, n-1)
		b.nbytes = e.end
	}
	b.written.Store(int32(n))
}

// Fits reports whether Append of an n-byte payload would succeed right now:
// the buffer is not sealed, has room for one more record, and its stored bytes
// plus 4+n stay within maxBytes. Writer side only.
func (b *Buffer) Fits(n int) bool {
	return !b.sealed.Load() && b.fits(n)
}

func (b *Buffer) fits(n int) bool {
	return n >= 0 && uint64(n) <= maxPayload && int(b.n) < int(b.maxRecords) &&
		b.nbytes+prefixLen+int64(n) <= b.maxBytes
}

// Seal stops further appends: later Appends return ErrSealed. Once a reader
// sees Sealed() == true, Len() is final. Writer side only; idempotent.
func (b *Buffer) Seal() {
	b.sealed.Store(true)
}

// place reserves need bytes and returns the chunk, its slot and the offset.
//
// Invariant (slot order): slots are non-decreasing along record indices, and
// records with the same slot are contiguous in their chunk. A dedicated chunk
// takes the next slot; the standard chunk that stays current is then
// registered again in a new slot, so AppendRun can find the end of a
// contiguous segment by binary search instead of a walk.
func (b *Buffer) place(need int) (*chunk, uint32, int) {
	if need > stdChunkSize {
		c := getChunk(need)
		return c, b.addChunk(c), 0
	}
	if b.cur == nil || len(b.cur.b)-int(b.curOff) < need {
		class := max(int(b.nextClass), smallClass(need))
		b.nextClass = int32(min(class+1, numSmallClasses-1))
		b.cur = getChunkClass(class)
		b.curIdx = b.addChunk(b.cur)
		b.curOff = 0
	} else if int(b.curIdx) != int(b.nchunks)-1 {
		// A dedicated chunk came in between: re-register cur (same memory).
		b.curIdx = b.addChunk(b.cur)
	}
	off := int(b.curOff)
	b.curOff += int32(need)
	return b.cur, b.curIdx, off
}

// addChunk stores c in the next chunk slot, publishing a grown table first if
// needed, and returns the slot. c.slots counts the slots naming c, so that
// recycle returns it to its pool exactly once.
func (b *Buffer) addChunk(c *chunk) uint32 {
	if int(b.nchunks) == len(b.wtab.chunks) {
		chunks := make([]*chunk, 2*len(b.wtab.chunks))
		copy(chunks, b.wtab.chunks)
		b.publish(&table{chunks: chunks, pages: b.wtab.pages})
	}
	b.wtab.chunks[b.nchunks] = c
	b.nchunks++
	if c.slots == 0 {
		b.grow(int64(cap(c.b)))
	}
	c.slots++
	return uint32(b.nchunks - 1)
}

// addPage allocates index page pg (pages are added in order).
func (b *Buffer) addPage(pg int) {
	if pg == len(b.wtab.pages) {
		pages := make([]*page, 2*len(b.wtab.pages))
		copy(pages, b.wtab.pages)
		b.publish(&table{chunks: b.wtab.chunks, pages: pages})
	}
	p := getPage(pageClass(pg))
	b.wtab.pages[pg] = p
	b.npages = int32(pg + 1)
	b.grow(int64(len(p.e)) * entrySize)
}

// grow adds n bytes to the footprint (writer side).
func (b *Buffer) grow(n int64) {
	b.footprint.Add(n)
	if b.acct != nil {
		b.acct.Add(n)
	}
}

// publish makes t the table readers load. It happens before the commit of
// any record that needs the new slot, so a reader that loaded committed == n
// then loads a table holding every slot records < n refer to.
func (b *Buffer) publish(t *table) {
	b.wtab = t
	b.tab.Store(t)
}

// Len returns the number of committed records (an atomic load). Reader side:
// any goroutine, lock-free. Records [0, Len()) are complete and immutable.
func (b *Buffer) Len() int {
	return int(b.committed.Load())
}

// Bytes returns the stored bytes (length prefixes included) of the records
// committed at the instant of the call; it is consistent with one value of
// Len. Reader side: any goroutine holding a reference.
func (b *Buffer) Bytes() int {
	n := int(b.committed.Load())
	if n == 0 {
		return 0
	}
	e, ok := b.entry(b.tab.Load(), n-1)
	if !ok {
		return 0
	}
	return int(e.end)
}

// MaxRecords returns the record limit the buffer was created with (at
// most math.MaxInt32). Any goroutine.
func (b *Buffer) MaxRecords() int { return int(b.maxRecords) }

// Sealed reports whether Seal (or Free) has been called. Once it returns
// true, Len no longer changes. Reader side: any goroutine.
func (b *Buffer) Sealed() bool {
	return b.sealed.Load()
}

// Account makes the buffer add every change of its footprint to *total as
// well, so that one counter sums the memory of many buffers (a node's
// retention budget) without visiting them; the buffer's memory leaves the
// sum when it is recycled. Writer side, before the first Append; total must
// stay valid as long as the buffer.
func (b *Buffer) Account(total *atomic.Int64) { b.acct = total }

// Footprint returns the bytes of chunk and index-page memory the buffer holds
// (0 after its memory was recycled). It is meant for load reports. Any
// goroutine.
func (b *Buffer) Footprint() int {
	return int(b.footprint.Load())
}

// entry returns record i's index entry from t. The caller has checked
// 0 <= i < committed with a load made before loading t. ok is false only when
// t does not cover i, which happens only to a caller without a reference.
func (b *Buffer) entry(t *table, i int) (entry, bool) {
	pg, j := pageOf(i)
	if pg >= len(t.pages) {
		return entry{}, false
	}
	p := t.pages[pg]
	if p == nil || j >= len(p.e) {
		return entry{}, false
	}
	return p.e[j], true
}

// Get returns the payload of committed record i, or nil if i is not in
// [0, Len()). A zero-length payload is returned as a non-nil empty slice.
// The slice aliases the buffer (capacity capped at its length) and must not
// be modified; it stays valid while the caller holds a reference.
// Reader side: any goroutine holding a reference, lock-free.
func (b *Buffer) Get(i int) []byte {
	p, _ := b.GetExt(i)
	return p
}

// GetExt is Get that also reports the record's flag bit (AppendExt).
func (b *Buffer) GetExt(i int) (p []byte, ext bool) { return b.getExt(i, int(b.committed.Load())) }

func (b *Buffer) getExt(i, n int) (p []byte, ext bool) {
	if i < 0 || i >= n {
		return nil, false
	}
	t := b.tab.Load()
	e, ok := b.entry(t, i)
	if !ok || int(e.chunk) >= len(t.chunks) || t.chunks[e.chunk] == nil {
		return nil, false
	}
	c := t.chunks[e.chunk].b
	off := int(e.off)
	w := binary.BigEndian.Uint32(c[off:])
	l := int(w &^ extBit)
	start := off + prefixLen
	return c[start : start+l : start+l], w&extBit != 0
}

// Stamp returns the stamp of committed record i, or 0 if i is not in
// [0, Len()). Reader side: any goroutine holding a reference.
func (b *Buffer) Stamp(i int) int64 {
	if i < 0 || i >= int(b.committed.Load()) {
		return 0
	}
	e, _ := b.entry(b.tab.Load(), i)
	return e.stamp
}

// SearchStamp returns the smallest committed index i with Stamp(i) >= t, or
// the committed count if there is none. It relies on stamps being
// non-decreasing (binary search). Reader side: any goroutine holding a
// reference.
func (b *Buffer) SearchStamp(t int64) int {
	n := int(b.committed.Load())
	tab := b.tab.Load()
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		e, ok := b.entry(tab, mid)
		if !ok {
			return n
		}
		if e.stamp < t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// AppendRun appends to dst the stored bytes (length prefixes included) of
// committed records [from, end), where end <= to is as large as possible with
// nbytes <= maxBytes, except that at least one record is taken when from < to
// even if it alone exceeds maxBytes. to is clamped to Len(). Records that are
// contiguous in one chunk share one slice, so the concatenation of the
// appended slices is the u32-length-prefixed encoding of the records (the
// record run of a DATA frame). If from < 0 or from >= min(to, Len()), dst is
// returned unchanged with end = from and nbytes = 0.
//
// The slices alias the buffer (capacity capped) and must not be modified;
// they stay valid while the caller holds a reference. No allocation when dst
// has enough capacity. Reader side: any goroutine holding a reference.
func (b *Buffer) AppendRun(dst [][]byte, from, to int, maxBytes int) (out [][]byte, end int, nbytes int) {
	return b.appendRun(dst, from, min(to, int(b.committed.Load())), maxBytes)
}

// AppendHeldRun is AppendRun over the records written, visible or not
// (held mode, SetHeld): to is clamped to Written instead of Len. The
// records' bytes are final once written. Reader side: any goroutine
// holding a reference.
func (b *Buffer) AppendHeldRun(dst [][]byte, from, to int, maxBytes int) (out [][]byte, end int, nbytes int) {
	return b.appendRun(dst, from, min(to, b.Written()), maxBytes)
}

// GetHeldExt is GetExt over the records written (Written), visible or
// not.
func (b *Buffer) GetHeldExt(i int) (p []byte, ext bool) { return b.getExt(i, b.Written()) }

// HeldStamp is Stamp over the records written (Written), visible or not.
func (b *Buffer) HeldStamp(i int) int64 {
	if i < 0 || i >= b.Written() {
		return 0
	}
	e, _ := b.entry(b.tab.Load(), i)
	return e.stamp
}

func (b *Buffer) appendRun(dst [][]byte, from, to int, maxBytes int) (out [][]byte, end int, nbytes int) {
	if from < 0 || from >= to {
		return dst, from, 0
	}
	t := b.tab.Load()
	base := int64(0) // cumulative bytes before record from
	if from > 0 {
		e, ok := b.entry(t, from-1)
		if !ok {
			return dst, from, 0
		}
		base = e.end
	}
	// end: the largest end in (from, to] with end(end-1)-base <= maxBytes,
	// at least from+1. Cumulative ends increase, so binary search.
	last, ok := b.entry(t, to-1)
	if !ok {
		return dst, from, 0
	}
	end = to
	if last.end-base > int64(maxBytes) {
		lo, hi := from+1, to-1 // answer in [lo, hi]; end(hi) is too far
		for lo < hi {
			mid := int(uint(lo+hi+1) >> 1)
			e, _ := b.entry(t, mid-1)
			if e.end-base <= int64(maxBytes) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		end = lo
		last, _ = b.entry(t, end-1)
	}
	// Segments: maximal ranges with one chunk slot (slot order invariant),
	// each contiguous in its chunk.
	for i := from; i < end; {
		first, _ := b.entry(t, i)
		segEnd := end // first index past the segment
		if last.chunk != first.chunk {
			lo, hi := i+1, end-1 // first index with a larger slot is in [lo, hi]
			for lo < hi {
				mid := int(uint(lo+hi) >> 1)
				e, _ := b.entry(t, mid)
				if e.chunk == first.chunk {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			segEnd = lo
		}
		stop := last
		if segEnd != end {
			stop, _ = b.entry(t, segEnd-1)
		}
		if int(first.chunk) >= len(t.chunks) || t.chunks[first.chunk] == nil {
			return dst, i, nbytes
		}
		c := t.chunks[first.chunk].b
		size := int(stop.end - base)
		start := int(first.off)
		if size < 0 || start+size > len(c) {
			return dst, i, nbytes // only a caller without a reference gets here
		}
		dst = append(dst, c[start:start+size:start+size])
		nbytes += size
		base = stop.end
		i = segEnd
	}
	return dst, end, nbytes
}

// Acquire takes a reader reference and reports whether it succeeded; it fails
// once Free has been called. On success the caller must call Release exactly
// once; until then, memory behind slices returned by Get and AppendRun is not
// recycled. Any goroutine, lock-free.
func (b *Buffer) Acquire() bool {
	for {
		v := b.refs.Load()
		if v&1 != 0 {
			return false
		}
		if b.refs.CompareAndSwap(v, v+2) {
			return true
		}
	}
}

// Release drops a reference taken by a successful Acquire. If Free was called
// and this was the last reference, the buffer's chunks and index pages are
// returned to the pools by this call; slices obtained under the reference must
// not be used afterwards. Calling Release without a matching Acquire is a
// programming error and panics, like a negative sync.WaitGroup counter.
// Any goroutine.
func (b *Buffer) Release() {
	v := b.refs.Add(-2)
	switch {
	case v == 1:
		b.recycle()
	case v < 0:
		panic("ringbuf: Release without matching Acquire")
	}
}

// Free marks the buffer freed and drops the owner's reference: later Appends
// return ErrSealed, Sealed reports true, and Acquire fails. The memory is
// recycled once the last reader reference is released (immediately if there
// is none). Free is idempotent. It is a writer-side call: the owner calls it
// after its last Append/Fits/Seal has returned, never concurrently with them,
// and does not use slices it obtained itself afterwards.
func (b *Buffer) Free() {
	b.sealed.Store(true)
	for {
		v := b.refs.Load()
		if v&1 != 0 {
			return
		}
		nv := (v - 2) | 1
		if b.refs.CompareAndSwap(v, nv) {
			if nv == 1 {
				b.recycle()
			}
			return
		}
	}
}

// recycle returns all memory to the pools. It runs exactly once, in the
// goroutine that dropped the last reference; every reader's accesses happen
// before its Release, which this goroutine observed, and the writer's happen
// before Free.
func (b *Buffer) recycle() {
	b.tab.Store(emptyTable)
	b.committed.Store(0)
	b.written.Store(0)
	t := b.wtab
	for i := range b.nchunks {
		c := t.chunks[i]
		c.slots--
		if c.slots == 0 {
			putChunk(c)
		}
		t.chunks[i] = nil
	}
	for i := range b.npages {
		putPage(t.pages[i])
		t.pages[i] = nil
	}
	b.wtab = emptyTable
	b.inlineChunks = [2]*chunk{}
	b.inlinePages = [2]*page{}
	b.cur, b.curIdx, b.curOff, b.nchunks, b.npages = nil, 0, 0, 0, 0
	b.n, b.nbytes = 0, 0
	if fp := b.footprint.Swap(0); b.acct != nil {
		b.acct.Add(-fp)
	}
}

// Index pages grow geometrically so that a buffer with few records holds
// little memory: pages 0..10 hold 1, 2, 4, ..., 1024 entries (2047 in all;
// the first is 24 bytes, so a channel with one message holds 48 bytes of
// index with the page's header, not 120: issue 14), every later page 1024.
const (
	firstPageShift = 0
	numPageClasses = 11
	maxPageEntries = 1 << (firstPageShift + numPageClasses - 1)
	geoEntries     = (1<<numPageClasses - 1) << firstPageShift
	entrySize      = 24
)

// pageOf maps record index i to (page, slot).
func pageOf(i int) (pg, j int) {
	if i < geoEntries {
		k := bits.Len(uint(i>>firstPageShift+1)) - 1
		return k, i - (1<<k-1)<<firstPageShift
	}
	r := i - geoEntries
	return numPageClasses + r/maxPageEntries, r % maxPageEntries
}

// pageClass is the size class of page pg.
func pageClass(pg int) int {
	return min(pg, numPageClasses-1)
}
