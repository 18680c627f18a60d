package ringbuf

import (
	"runtime"
	"testing"
)

// TestKeptChunksSurviveGC: recycled chunks up to the keep limit are reused
// after garbage collections (a sync.Pool would have dropped them), and past
// the limit they are not kept.
func TestKeptChunksSurviveGC(t *testing.T) {
	defer SetKeepLimit(DefaultKeepLimit)
	class := smallClass(stdChunkSize)
	drain := func() {
		keepMu.Lock()
		for i := range keepList {
			clear(keepList[i])
			keepList[i] = keepList[i][:0]
		}
		keptBytes = 0
		keepMu.Unlock()
	}
	drain()
	SetKeepLimit(2 * stdChunkSize)
	a, b, c := getChunkClass(class), getChunkClass(class), getChunkClass(class)
	for _, x := range []*chunk{a, b, c} {
		putChunk(x)
	}
	keepMu.Lock()
	kept, n := keptBytes, len(keepList[class])
	keepMu.Unlock()
	if kept != 2*stdChunkSize || n != 2 {
		t.Fatalf("kept %d bytes in %d chunks, want the limit: 2 chunks", kept, n)
	}
	runtime.GC()
	runtime.GC()
	got := map[*chunk]bool{getChunkClass(class): true, getChunkClass(class): true}
	if !got[a] || !got[b] {
		t.Fatal("the kept chunks were not reused after two collections")
	}
	SetKeepLimit(0)
	putChunk(a)
	keepMu.Lock()
	kept = keptBytes
	keepMu.Unlock()
	if kept != 0 {
		t.Fatalf("kept %d bytes with a limit of 0", kept)
	}
	drain()
}

// TestKeepListSkipsSmallChunksAndTrims: a recycled chunk under a page is
// not kept on the free list (it would pin memory the allocator reuses
// anyway), and TrimKept drops kept chunks down to its argument, largest
// first.
func TestKeepListSkipsSmallChunksAndTrims(t *testing.T) {
	defer SetKeepLimit(DefaultKeepLimit)
	TrimKept(0)
	SetKeepLimit(1 << 30)
	small := getChunkClass(smallClass(64))
	putChunk(small)
	if got := KeptBytes(); got != 0 {
		t.Fatalf("a 64 B chunk was kept (%d bytes on the free list)", got)
	}
	page, big := getChunkClass(smallClass(keepMinSize)), getChunkClass(smallClass(stdChunkSize))
	putChunk(page)
	putChunk(big)
	if got := KeptBytes(); got != keepMinSize+stdChunkSize {
		t.Fatalf("kept %d bytes, want %d", got, keepMinSize+stdChunkSize)
	}
	if got := TrimKept(keepMinSize); got != stdChunkSize || KeptBytes() != keepMinSize {
		t.Fatalf("TrimKept(%d) dropped %d, %d left", keepMinSize, got, KeptBytes())
	}
	if got := TrimKept(0); got != keepMinSize || KeptBytes() != 0 {
		t.Fatalf("TrimKept(0) dropped %d, %d left", got, KeptBytes())
	}
	if c := getChunkClass(smallClass(stdChunkSize)); c == big {
		t.Fatal("a trimmed chunk was handed out again")
	}
}
