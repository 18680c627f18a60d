package ringbuf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// pattern fills a payload that is a pure function of its record index, so a
// reader can verify a record completely without sharing state: the length is
// derived from i, the first 8 bytes hold i, the rest is an i-keyed pattern.
func patternLen(i int) int {
	switch {
	case i%997 == 13:
		return stdChunkSize + i%5000 // dedicated chunk
	case i%101 == 7:
		return 3000 + i%2000
	case i%17 == 0:
		return 0
	default:
		return 8 + i%300
	}
}

func pattern(i int) []byte {
	p := make([]byte, patternLen(i))
	fillPattern(p, i)
	return p
}

func fillPattern(p []byte, i int) {
	for k := range p {
		p[k] = byte(i*7 + k*13 + k>>8)
	}
	if len(p) >= 8 {
		binary.BigEndian.PutUint64(p, uint64(i))
	}
}

// checkPattern reports whether p is exactly record i's payload.
func checkPattern(p []byte, i int) bool {
	if len(p) != patternLen(i) {
		return false
	}
	if len(p) >= 8 && binary.BigEndian.Uint64(p) != uint64(i) {
		return false
	}
	for k := 8; k < len(p); k++ {
		if p[k] != byte(i*7+k*13+k>>8) {
			return false
		}
	}
	return true
}

func TestPageOfMatchesLayout(t *testing.T) {
	// Brute force: walk the page sizes 64,128,...,1024,1024,...
	pg, j := 0, 0
	for i := range 20000 {
		gp, gj := pageOf(i)
		if gp != pg || gj != j {
			t.Fatalf("pageOf(%d) = (%d,%d), want (%d,%d)", i, gp, gj, pg, j)
		}
		j++
		if j == 1<<(firstPageShift+pageClass(pg)) {
			pg, j = pg+1, 0
		}
	}
}

func TestSizeClasses(t *testing.T) {
	for need := 1; need <= stdChunkSize; need += 37 {
		c := smallClass(need)
		if chunkSize(c) < need || (c > 0 && chunkSize(c-1) >= need) {
			t.Fatalf("smallClass(%d) = %d (size %d)", need, c, chunkSize(c))
		}
	}
	for _, need := range []int{stdChunkSize + 1, 2 * stdChunkSize, 2*stdChunkSize + 1, maxPooledUnits * stdChunkSize} {
		c, size := largeClass(need)
		if c == unpooled || size < need || size-need >= stdChunkSize || chunkSize(c) != size || c >= numChunkClasses {
			t.Fatalf("largeClass(%d) = %d, %d", need, c, size)
		}
	}
	if c, size := largeClass(maxPooledUnits*stdChunkSize + 1); c != unpooled || size != maxPooledUnits*stdChunkSize+1 {
		t.Fatalf("largeClass beyond pooled range = %d, %d", c, size)
	}
}

// TestManyRecordsAcrossPages fills past several index pages and chunks and
// checks every read path on every record.
func TestManyRecordsAcrossPages(t *testing.T) {
	const n = 9000
	b := New(n, 1<<30)
	for i := range n {
		if idx, err := b.Append(pattern(i), int64(i/3)); err != nil || idx != i {
			t.Fatalf("Append %d = %d, %v", i, idx, err)
		}
	}
	if _, err := b.Append(nil, n); !errors.Is(err, ErrFull) {
		t.Fatalf("Append past maxRecords = %v, want ErrFull", err)
	}
	var enc []byte
	total := 0
	for i := range n {
		if !checkPattern(b.Get(i), i) || b.Stamp(i) != int64(i/3) {
			t.Fatalf("record %d wrong", i)
		}
		enc = binary.BigEndian.AppendUint32(enc, uint32(patternLen(i)))
		enc = append(enc, pattern(i)...)
		total += 4 + patternLen(i)
	}
	if b.Bytes() != total {
		t.Fatalf("Bytes = %d, want %d", b.Bytes(), total)
	}
	for _, ts := range []int64{-5, 0, 1, 1000, n/3 - 1, n / 3, n} {
		want := min(max(int(ts)*3, 0), n)
		if got := b.SearchStamp(ts); got != want {
			t.Fatalf("SearchStamp(%d) = %d, want %d", ts, got, want)
		}
	}
	// Walk the whole buffer in runs of at most 64 KiB: the concatenation is
	// the u32-length-prefixed encoding of all records.
	var got []byte
	var run [][]byte
	for from := 0; from < n; {
		var end, nb int
		run, end, nb = b.AppendRun(run[:0], from, n, 64<<10)
		if end <= from || (nb > 64<<10 && end != from+1) {
			t.Fatalf("AppendRun(%d) end %d nbytes %d", from, end, nb)
		}
		for _, s := range run {
			got = append(got, s...)
		}
		from = end
	}
	if !bytes.Equal(got, enc) {
		t.Fatalf("concatenated runs differ from the record encoding")
	}
	b.Free()
}

func TestErrFullOnBytesLimit(t *testing.T) {
	b := New(100, 4+10+4+0)
	if _, err := b.Append(make([]byte, 10), 1); err != nil {
		t.Fatal(err)
	}
	if b.Fits(1) || !b.Fits(0) {
		t.Fatalf("Fits wrong at the byte limit")
	}
	if _, err := b.Append(make([]byte, 1), 2); !errors.Is(err, ErrFull) {
		t.Fatalf("Append over maxBytes = %v, want ErrFull", err)
	}
	if b.Len() != 1 || b.Bytes() != 14 {
		t.Fatalf("buffer changed by a failed Append: len %d bytes %d", b.Len(), b.Bytes())
	}
	if i, err := b.Append(nil, 2); err != nil || i != 1 || b.Bytes() != 18 {
		t.Fatalf("Append of an exactly fitting empty payload = %d, %v", i, err)
	}
	if b.Fits(-1) {
		t.Fatalf("Fits(-1) = true")
	}
	b.Seal()
	if _, err := b.Append(nil, 3); !errors.Is(err, ErrSealed) {
		t.Fatalf("Append after Seal = %v, want ErrSealed", err)
	}
	b.Free()
}

// TestEmptyBufferIsSmall checks memory proportional to contents: an empty
// buffer holds no chunk or page, one small record the smallest chunk that
// holds it (32 B for 20 stored bytes) and a 1-entry page.
func TestEmptyBufferIsSmall(t *testing.T) {
	if allocs := testing.AllocsPerRun(10, func() { New(5000, 2<<20).Free() }); allocs != 1 {
		t.Fatalf("New+Free allocates %.1f times, want 1 (the Buffer)", allocs)
	}
	b := New(5000, 2<<20)
	if b.Footprint() != 0 {
		t.Fatalf("empty footprint %d", b.Footprint())
	}
	if _, err := b.Append(make([]byte, 16), 0); err != nil {
		t.Fatal(err)
	}
	if got, want := b.Footprint(), 32+1*entrySize; got != want {
		t.Fatalf("footprint with one record = %d, want %d", got, want)
	}
	for range 4999 {
		if _, err := b.Append(make([]byte, 16), 0); err != nil {
			t.Fatal(err)
		}
	}
	// 5000*20 bytes of records: chunks 32 B, 64 B, ..., 64 KiB plus 64 KiB ones.
	if got, limit := b.Footprint(), 2*b.Bytes()+stdChunkSize+5000*entrySize*2; got > limit {
		t.Fatalf("footprint %d over %d for %d stored bytes", got, limit, b.Bytes())
	}
	b.Free()
}

func TestAcquireAfterFreeFails(t *testing.T) {
	b := New(10, 1000)
	if !b.Acquire() {
		t.Fatal("Acquire on a live buffer failed")
	}
	if _, err := b.Append([]byte("hello"), 1); err != nil {
		t.Fatal(err)
	}
	p := b.Get(0)
	b.Free()
	if b.Acquire() {
		t.Fatal("Acquire after Free succeeded")
	}
	// The reader's reference keeps the record alive.
	if string(p) != "hello" || b.Len() != 1 || b.Footprint() == 0 {
		t.Fatalf("memory recycled while a reader holds a reference")
	}
	b.Release()
	if b.Footprint() != 0 || b.Len() != 0 || b.Get(0) != nil || b.Bytes() != 0 {
		t.Fatalf("memory not recycled after the last Release")
	}
	b.Free() // idempotent, no double recycle
	if b.Acquire() {
		t.Fatal("Acquire after second Free succeeded")
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	b := New(10, 1000)
	b.Free()
	defer func() {
		if recover() == nil {
			t.Fatal("unbalanced Release did not panic")
		}
	}()
	b.Release()
}

// TestMemoryReusedAfterFree shows that chunks and pages of a freed buffer are
// handed to later buffers. sync.Pool may drop items (always under -race for
// a quarter of Puts, and at GC), so the test repeats and asks for some reuse.
func TestMemoryReusedAfterFree(t *testing.T) {
	before := ReadPoolStats()
	for range 50 {
		b := New(100, 1<<20)
		for i := range 100 {
			if _, err := b.Append(pattern(i), 0); err != nil {
				t.Fatal(err)
			}
		}
		if !b.Acquire() {
			t.Fatal("Acquire failed")
		}
		b.Free()
		b.Release()
	}
	after := ReadPoolStats()
	if after.ChunkReuses == before.ChunkReuses || after.PageReuses == before.PageReuses {
		t.Fatalf("no reuse: before %+v after %+v", before, after)
	}
	if after.ChunkFrees-before.ChunkFrees != (after.ChunkAllocs-before.ChunkAllocs)+(after.ChunkReuses-before.ChunkReuses) {
		t.Fatalf("chunks taken and returned differ: before %+v after %+v", before, after)
	}
}

// TestRecycledMemoryNotVisibleThroughHeldSlices: a reader holding a reference
// across Free keeps its slices intact while other buffers churn the pools.
func TestRecycledMemoryNotVisibleThroughHeldSlices(t *testing.T) {
	b := New(1000, 1<<22)
	for i := range 300 {
		if _, err := b.Append(pattern(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if !b.Acquire() {
		t.Fatal("Acquire failed")
	}
	run, end, _ := b.AppendRun(nil, 0, 300, 1<<30)
	held := make([][]byte, len(run))
	for k, s := range run {
		held[k] = bytes.Clone(s)
	}
	b.Free()
	for range 20 {
		o := New(1000, 1<<22)
		for i := range 300 {
			p := pattern(i)
			for k := range p {
				p[k] ^= 0x5A
			}
			if _, err := o.Append(p, 0); err != nil {
				t.Fatal(err)
			}
		}
		o.Free()
	}
	for k := range run {
		if !bytes.Equal(run[k], held[k]) {
			t.Fatalf("slice %d of [0,%d) changed while referenced", k, end)
		}
	}
	b.Release()
}

// TestConcurrentReaders runs one writer and 16 readers under the race
// detector. Every record a reader sees must be complete and correct: its
// length and bytes are functions of its index, so a partial or torn write
// would be detected. Readers also walk runs and check the encoding.
func TestConcurrentReaders(t *testing.T) {
	const (
		readers = 16
		n       = 6000
	)
	b := New(n, 1<<30)
	var wg sync.WaitGroup
	var failures atomic.Int64
	var seen atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !b.Acquire() {
				failures.Add(1)
				return
			}
			defer b.Release()
			next := 0
			var run [][]byte
			for {
				sealed := b.Sealed() // read before Len: if true, Len is final
				l := b.Len()
				if l < next || b.Bytes() < 0 {
					failures.Add(1)
					return
				}
				for ; next < l; next++ {
					if !checkPattern(b.Get(next), next) || b.Stamp(next) != int64(next) {
						failures.Add(1)
						return
					}
				}
				if r%2 == 0 && l > 0 {
					from := (l * 7919) % l
					var end int
					run, end, _ = b.AppendRun(run[:0], from, l, 1<<(10+r%8))
					if !checkRun(run, from, end) {
						failures.Add(1)
						return
					}
				}
				if got := b.SearchStamp(int64(l / 2)); l > 0 && got != l/2 {
					failures.Add(1)
					return
				}
				if sealed {
					seen.Add(int64(next))
					return
				}
				runtime.Gosched()
			}
		}()
	}
	for i := range n {
		if _, err := b.Append(pattern(i), int64(i)); err != nil {
			t.Fatal(err)
		}
		if i%64 == 0 {
			runtime.Gosched()
		}
	}
	b.Seal()
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d readers saw a wrong record", failures.Load())
	}
	if seen.Load() != readers*n {
		t.Fatalf("readers saw %d records, want %d", seen.Load(), readers*n)
	}
	b.Free()
}

// checkRun decodes a run's records and checks each against its pattern.
func checkRun(run [][]byte, from, end int) bool {
	i := from
	for _, s := range run {
		for len(s) > 0 {
			if len(s) < 4 {
				return false
			}
			l := int(binary.BigEndian.Uint32(s))
			if len(s) < 4+l || !checkPattern(s[4:4+l], i) {
				return false
			}
			s = s[4+l:]
			i++
		}
	}
	return i == end
}

// TestConcurrentFreeWhileReading: readers acquire and release repeatedly
// while the owner frees the buffer; none may see a recycled record and
// Acquire must fail once Free has returned.
func TestConcurrentFreeWhileReading(t *testing.T) {
	for round := range 20 {
		b := New(500, 1<<22)
		for i := range 500 {
			if _, err := b.Append(pattern(i), int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var bad atomic.Int64
		start := make(chan struct{})
		for r := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := 0; ; k++ {
					if !b.Acquire() {
						return
					}
					i := (k*31 + r) % 500
					if b.Len() != 500 || !checkPattern(b.Get(i), i) {
						bad.Add(1)
					}
					b.Release()
				}
			}()
		}
		close(start)
		// Churn the pools from another buffer meanwhile.
		o := New(500, 1<<22)
		for i := range 200 {
			if _, err := o.Append(pattern(i), 0); err != nil {
				t.Fatal(err)
			}
		}
		b.Free()
		if b.Acquire() {
			t.Fatalf("round %d: Acquire after Free succeeded", round)
		}
		o.Free()
		wg.Wait()
		if bad.Load() != 0 {
			t.Fatalf("round %d: %d reads saw a wrong record", round, bad.Load())
		}
		if b.Footprint() != 0 {
			t.Fatalf("round %d: memory not recycled after all readers left", round)
		}
	}
}

func TestAppendRunZeroAllocs(t *testing.T) {
	b := New(1000, 1<<22)
	for i := range 1000 {
		if _, err := b.Append(pattern(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	dst := make([][]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _, _ = b.AppendRun(dst[:0], 10, 900, 256<<10)
		_ = b.Get(5)
		_ = b.SearchStamp(500)
	})
	if allocs != 0 {
		t.Fatalf("AppendRun/Get/SearchStamp allocate %.1f times", allocs)
	}
	b.Free()
}

func TestAppendRunMergesContiguousRecords(t *testing.T) {
	b := New(100, 1<<20)
	b.nextClass = int32(smallClass(64)) // one chunk for all ten records
	for i := range 10 {
		if _, err := b.Append([]byte(fmt.Sprint(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	run, end, nb := b.AppendRun(nil, 2, 8, 1<<20)
	if len(run) != 1 || end != 8 || nb != 6*5 {
		t.Fatalf("run of 6 small records = %d slices, end %d, nbytes %d", len(run), end, nb)
	}
	// A single record larger than maxBytes is still returned.
	run, end, nb = b.AppendRun(run[:0], 3, 8, 1)
	if len(run) != 1 || end != 4 || nb != 5 || string(run[0]) != "\x00\x00\x00\x013" {
		t.Fatalf("oversized single record: %q end %d nbytes %d", run, end, nb)
	}
}

// TestDedicatedChunkSplitsRun: a record larger than a standard chunk gets its
// own chunk; the small records after it continue the same standard chunk
// (re-registered in a new slot), and runs split exactly at the dedicated one.
func TestDedicatedChunkSplitsRun(t *testing.T) {
	b := New(100, 1<<22)
	b.nextClass = int32(smallClass(64)) // the small records share one chunk
	big := make([]byte, stdChunkSize+10)
	for _, p := range [][]byte{[]byte("a"), []byte("bb"), big, []byte("c"), []byte("dd")} {
		if _, err := b.Append(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	run, end, nb := b.AppendRun(nil, 0, 5, 1<<30)
	if len(run) != 3 || end != 5 || nb != 5+6+4+len(big)+5+6 {
		t.Fatalf("run = %d slices, end %d, nbytes %d", len(run), end, nb)
	}
	if len(run[0]) != 11 || len(run[1]) != 4+len(big) || len(run[2]) != 11 {
		t.Fatalf("segment sizes %d %d %d", len(run[0]), len(run[1]), len(run[2]))
	}
	c0 := b.wtab.chunks[0]
	// "c" follows "bb" in the same chunk memory.
	if &c0.b[len(run[0])] != &run[2][0] || &c0.b[0] != &run[0][0] {
		t.Fatalf("records after the dedicated chunk left the standard chunk")
	}
	if b.nchunks != 3 || b.wtab.chunks[2] != c0 || c0.slots != 2 {
		t.Fatalf("standard chunk not re-registered: nchunks %d slots %d", b.nchunks, c0.slots)
	}
	if got, want := b.Footprint(), 64+2*stdChunkSize+(1+2+4)*entrySize; got != want {
		t.Fatalf("footprint %d, want %d (re-registered chunk counted once)", got, want)
	}
	before := ReadPoolStats()
	b.Free()
	if got := ReadPoolStats().ChunkFrees - before.ChunkFrees; got != 2 {
		t.Fatalf("recycled %d chunks, want 2", got)
	}
}

func TestNonPositiveLimits(t *testing.T) {
	for _, l := range [][2]int{{0, 100}, {-1, 100}, {10, 0}, {10, -5}, {10, 3}} {
		b := New(l[0], l[1])
		if b.Fits(0) {
			t.Fatalf("New(%d,%d).Fits(0) = true", l[0], l[1])
		}
		if _, err := b.Append(nil, 0); !errors.Is(err, ErrFull) {
			t.Fatalf("New(%d,%d).Append = %v", l[0], l[1], err)
		}
		b.Free()
	}
}

// TestLiveEdgeAcrossTableGrowth has readers spin on the newest committed
// record while the writer fills fresh buffers, whose chunk and page tables
// grow many times. A reader that saw count n must find record n-1 in the
// table it loads next; publishing a grown table after the commit (instead of
// before) makes this test fail within a few rounds.
func TestLiveEdgeAcrossTableGrowth(t *testing.T) {
	const rounds = 100
	var cur atomic.Pointer[Buffer]
	var done atomic.Bool
	var bad, checks atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				b := cur.Load()
				if b == nil || !b.Acquire() {
					runtime.Gosched()
					continue
				}
				for range 2000 {
					l := b.Len()
					if l == 0 {
						continue
					}
					checks.Add(1)
					if !checkPattern(b.Get(l-1), l-1) {
						bad.Add(1)
					}
				}
				b.Release()
			}
		}()
	}
	for range rounds {
		b := New(3000, 1<<30)
		cur.Store(b)
		for i := range 3000 {
			if _, err := b.Append(pattern(i), 0); err != nil {
				t.Fatal(err)
			}
		}
		b.Free()
	}
	done.Store(true)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d live-edge reads saw a missing or wrong record", bad.Load(), checks.Load())
	}
	if checks.Load() == 0 {
		t.Fatalf("readers never saw a record")
	}
}

// TestHugeRecordUnpooled: a record above the largest pooled class gets a
// chunk of its exact size that is left to the GC on recycle.
func TestHugeRecordUnpooled(t *testing.T) {
	size := maxPooledUnits*stdChunkSize + 1
	b := New(10, size+100)
	p := make([]byte, size)
	fillPattern(p, 42)
	if _, err := b.Append(p, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append([]byte("after"), 2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Get(0), p) || string(b.Get(1)) != "after" || b.Footprint() != size+4+16+(1+2)*entrySize {
		t.Fatalf("huge record: footprint %d", b.Footprint())
	}
	run, end, nb := b.AppendRun(nil, 0, 2, 10)
	if len(run) != 1 || end != 1 || nb != size+4 {
		t.Fatalf("run over the huge record: %d slices end %d nbytes %d", len(run), end, nb)
	}
	before := ReadPoolStats()
	b.Free()
	if got := ReadPoolStats().ChunkFrees - before.ChunkFrees; got != 2 {
		t.Fatalf("recycled %d chunks, want 2", got)
	}
}

// TestStrayReaderDoesNotPanic simulates a caller without a reference that
// loaded the committed count before the memory was recycled and the table
// after: every read method returns nil/0/empty instead of panicking.
func TestStrayReaderDoesNotPanic(t *testing.T) {
	b := New(100, 1<<20)
	for i := range 50 {
		if _, err := b.Append(pattern(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	tab := b.tab.Load()
	b.tab.Store(emptyTable)
	if b.Get(3) != nil || b.Stamp(3) != 0 || b.Bytes() != 0 || b.SearchStamp(10) != 50 {
		t.Fatalf("stray reads returned data")
	}
	if run, end, nb := b.AppendRun(nil, 3, 50, 1<<20); len(run) != 0 || end != 3 || nb != 0 {
		t.Fatalf("stray AppendRun = %d slices, end %d, nbytes %d", len(run), end, nb)
	}
	if run, end, nb := b.AppendRun(nil, 0, 50, 1<<20); len(run) != 0 || end != 0 || nb != 0 {
		t.Fatalf("stray AppendRun from 0 = %d slices, end %d, nbytes %d", len(run), end, nb)
	}
	// A table whose chunk slots were cleared (recycle in progress).
	b.tab.Store(&table{chunks: make([]*chunk, len(tab.chunks)), pages: tab.pages})
	if b.Get(3) != nil {
		t.Fatalf("Get with a cleared chunk slot returned data")
	}
	if run, _, nb := b.AppendRun(nil, 3, 50, 1<<20); len(run) != 0 || nb != 0 {
		t.Fatalf("AppendRun with cleared chunk slots returned data")
	}
	b.tab.Store(tab)
	b.Free()
}

// TestAccountSumsFootprints: buffers sharing an account add up to their
// footprints while they hold memory, and leave it when recycled (after the
// last reader's Release, not at Free).
func TestAccountSumsFootprints(t *testing.T) {
	var total atomic.Int64
	a, b := New(1000, 1<<20), New(1000, 1<<20)
	a.Account(&total)
	b.Account(&total)
	p := make([]byte, 300)
	for i := 0; i < 400; i++ {
		if _, err := a.Append(p, 0); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := b.Append(p, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := total.Load(), int64(a.Footprint()+b.Footprint()); got != want || got <= 0 {
		t.Fatalf("account %d, footprints %d", got, want)
	}
	if !b.Acquire() {
		t.Fatal("acquire")
	}
	a.Free()
	b.Free()
	if got, want := total.Load(), int64(b.Footprint()); got != want || got <= 0 {
		t.Fatalf("after Free with a reader on b: account %d, want b's %d", got, want)
	}
	b.Release()
	if got := total.Load(); got != 0 {
		t.Fatalf("after the last Release: account %d, want 0", got)
	}
}

// TestAppendExt: the flag bit travels in the stored length word (so
// AppendRun's bytes are a wire record run with extended records marked),
// Get returns the body without it, GetExt reports it.
func TestAppendExt(t *testing.T) {
	b := New(10, 1<<10)
	defer b.Free()
	b.nextClass = int32(smallClass(64)) // one chunk: the run is one slice
	if _, err := b.Append([]byte("plain"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendExt([]byte("ext"), true, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendExt([]byte(""), false, 3); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		p   string
		ext bool
	}{{"plain", false}, {"ext", true}, {"", false}} {
		p, ext := b.GetExt(i)
		if string(p) != want.p || ext != want.ext || string(b.Get(i)) != want.p {
			t.Fatalf("record %d: %q %v, want %q %v", i, p, ext, want.p, want.ext)
		}
	}
	run, end, n := b.AppendRun(nil, 0, 3, 1<<10)
	want := []byte{0, 0, 0, 5, 'p', 'l', 'a', 'i', 'n', 0x80, 0, 0, 3, 'e', 'x', 't', 0, 0, 0, 0}
	if end != 3 || n != len(want) || len(run) != 1 || !bytes.Equal(run[0], want) {
		t.Fatalf("run % x (end %d, %d bytes), want % x", run, end, n, want)
	}
	big := New(1, 1<<40)
	defer big.Free()
	if big.Fits(1<<31) || !big.Fits(1<<31-1) {
		t.Fatal("a 31-bit length bounds a record")
	}
}

// TestBufferLayout: a Buffer is bufferSize bytes, a multiple of the cache
// line, so its size class aligns it to one (issue 14: three padded lines
// made a Buffer 424 bytes, the largest part of a small channel).
func TestBufferLayout(t *testing.T) {
	if size := unsafe.Sizeof(Buffer{}); size != bufferSize || size%cacheLine != 0 {
		t.Fatalf("Buffer is %d bytes, want bufferSize %d (a multiple of %d)", size, bufferSize, cacheLine)
	}
}

// TestSmallChunkClasses: the first chunk of a buffer is the smallest class
// that holds its first record, from 16 B up; later chunks double.
func TestSmallChunkClasses(t *testing.T) {
	for _, c := range []struct{ payload, chunk int }{
		{0, 16}, {12, 16}, {13, 32}, {28, 32}, {29, 64}, {1000, 1024}, {stdChunkSize - 4, stdChunkSize},
	} {
		b := New(10, 1<<20)
		if _, err := b.Append(make([]byte, c.payload), 0); err != nil {
			t.Fatal(err)
		}
		if got := len(b.cur.b); got != c.chunk {
			t.Errorf("payload %d: first chunk %d B, want %d", c.payload, got, c.chunk)
		}
		b.Free()
	}
	b := New(100, 1<<20)
	defer b.Free()
	var sizes []int
	for range 20 {
		if _, err := b.Append(make([]byte, 4), 0); err != nil { // 8 stored bytes
			t.Fatal(err)
		}
		if n := len(b.cur.b); len(sizes) == 0 || sizes[len(sizes)-1] != n {
			sizes = append(sizes, n)
		}
	}
	if fmt.Sprint(sizes) != "[16 32 64 128]" {
		t.Fatalf("chunk sizes %v, want [16 32 64 128]", sizes)
	}
}
