//go:build linux && ringbuf_invariants

package ringbuf

import (
	"runtime/debug"
	"testing"
)

// TestFreedChunkFaults (go test -tags ringbuf_invariants): a slice of an
// off-heap chunk read after its buffer was recycled faults instead of
// returning bytes, which is what lets the invariants build catch a reader
// that breaks the lifetime contract.
func TestFreedChunkFaults(t *testing.T) {
	b := New(10, 1<<20)
	if _, err := b.Append(make([]byte, 50<<10), 0); err != nil { // a 64 KiB chunk: off-heap
		t.Fatal(err)
	}
	p := b.Get(0)
	b.Free()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() == nil {
			t.Fatal("reading a freed chunk did not fault")
		}
	}()
	guardSink = p[len(p)/2]
}

// guardSink keeps the read above from being optimized away.
var guardSink byte
