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
