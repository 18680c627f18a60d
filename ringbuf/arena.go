package ringbuf

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Retained history off the Go heap.
//
// Chunks of 4 KiB and more and the large index pages (512 and 1,024
// entries) live in memory this package maps from the operating system
// itself (arena_linux.go), in blocks of whole 4 KiB pages, not on the Go
// heap. So the history a node holds (up to its retention budget, 1 GiB by
// default) is no work for the garbage collector and no part of the heap
// the runtime's memory limit paces it against: with the history on the
// heap, a server at its budget ran its heap within a few hundred MB of the
// limit, and the engine forced collections (debug.FreeOSMemory) to hand
// expired history back to the OS, stopping the world under load.
//
// A freed block goes on a free list of its size, still resident, and is
// the first to be handed out again (it needs no page faults); Trim gives
// the pages of free blocks back to the OS (madvise MADV_DONTNEED), and a
// block so trimmed is handed out after the resident ones. Address space is
// never unmapped: it grows to the peak of each block size, and costs no
// memory while trimmed. Smaller chunks and pages (the first few of every
// buffer, all of a small channel's history) stay on the Go heap, in its
// size classes.
//
// Safety, the same contract as before: a block belongs to one chunk or
// page from arenaAlloc to arenaFree; Buffer.recycle frees them only after
// the last reference to the buffer was released (the owner's and every
// reader's: see the package comment), and a reader copies or writes out
// what it read before it releases. Every byte a reader can reach is written
// by the buffer's writer before the committed count covers it, so a reused
// block never shows its previous contents. Under the ringbuf_invariants
// build tag a free block is filled with a poison byte and made
// inaccessible (PROT_NONE) until it is handed out again, so a read or
// write after free faults at once: the package's model test and the
// engine's tests run so (see arenaGuard).

// arenaPage is the granule of off-heap blocks; arenaMaxPages the largest
// block (a pooled chunk of maxPooledUnits standard chunks). Memory is
// never unmapped, so that even a reader that broke the contract reads
// stale bytes rather than fault (outside the invariants build).
const (
	arenaPage     = 4 << 10
	arenaMaxPages = maxPooledUnits * stdChunkSize / arenaPage
	// arenaSlab is the address space mapped at a time, from which
	// blocks are carved in order: pages are resident only once written.
	arenaSlab = 64 << 20
)

// arena is the package's off-heap allocator.
var arena struct {
	mu   sync.Mutex
	hot  [arenaMaxPages + 1][]unsafe.Pointer // free blocks by pages, resident (guarded by mu)
	cold [arenaMaxPages + 1][]unsafe.Pointer // free blocks whose pages were returned (guarded by mu)
	slab []byte                              // the current slab's unused tail (guarded by mu)
	// off is false once mapping failed (or on systems without it):
	// blocks then come from the Go heap.
	off bool
}

// Off-heap memory counters (bytes), readable without the lock.
var (
	arenaInUse  atomic.Int64 // in blocks handed out
	arenaFree   atomic.Int64 // in resident free blocks
	arenaMapped atomic.Int64 // address space mapped
	arenaAllocd atomic.Int64 // handed out since the start (monotonic)
)

func init() { arena.off = mapSupported }

// arenaAlloc returns a block of size bytes (a multiple of arenaPage) and
// whether it is off the Go heap (then it must go back with arenaFreeBlock;
// a heap block is left to the collector). Its contents are undefined.
// Safe from any goroutine.
func arenaAlloc(size int) (b []byte, off bool) {
	n := size / arenaPage
	arena.mu.Lock()
	if !arena.off || n > arenaMaxPages {
		arena.mu.Unlock()
		return make([]byte, size), false
	}
	var p unsafe.Pointer
	if l := arena.hot[n]; len(l) > 0 {
		p, arena.hot[n] = l[len(l)-1], l[:len(l)-1]
		arenaFree.Add(-int64(size))
	} else if l := arena.cold[n]; len(l) > 0 {
		p, arena.cold[n] = l[len(l)-1], l[:len(l)-1]
	} else {
		if len(arena.slab) < size {
			s, err := mapBlock(arenaSlab)
			if err != nil {
				arena.off = false
				arena.mu.Unlock()
				return make([]byte, size), false
			}
			arena.slab = s // the old tail was never written: no memory
			arenaMapped.Add(arenaSlab)
		}
		p = unsafe.Pointer(unsafe.SliceData(arena.slab))
		arena.slab = arena.slab[size:]
	}
	arena.mu.Unlock()
	arenaInUse.Add(int64(size))
	arenaAllocd.Add(int64(size))
	b = unsafe.Slice((*byte)(p), size)
	arenaGuard(b, true)
	return b, true
}

// arenaFreeBlock takes back a block arenaAlloc handed out off the heap.
// The caller guarantees that nothing refers to it any more. Safe from any
// goroutine.
func arenaFreeBlock(b []byte) {
	size := len(b)
	arenaInUse.Add(-int64(size))
	arenaGuard(b, false)
	arena.mu.Lock()
	n := size / arenaPage
	arena.hot[n] = append(arena.hot[n], unsafe.Pointer(unsafe.SliceData(b)))
	arena.mu.Unlock()
	arenaFree.Add(int64(size))
}

// Trim gives the pages of free off-heap blocks back to the operating
// system until at most keep bytes of free blocks stay resident, largest
// blocks first, returning at most max bytes in this call (max <= 0: no
// bound), and returns the bytes it gave back. The system calls run on the
// caller's goroutine, outside the allocator's lock. Safe from any
// goroutine.
func Trim(keep, max int64) int64 {
	var take []unsafe.Pointer
	var sizes []int
	var got int64
	arena.mu.Lock()
	for n := arenaMaxPages; n >= 1 && arenaFree.Load()-got > keep && (max <= 0 || got < max); n-- {
		for len(arena.hot[n]) > 0 && arenaFree.Load()-got > keep && (max <= 0 || got < max) {
			l := arena.hot[n]
			take, arena.hot[n] = append(take, l[len(l)-1]), l[:len(l)-1]
			sizes = append(sizes, n*arenaPage)
			got += int64(n * arenaPage)
		}
	}
	arenaFree.Add(-got)
	arena.mu.Unlock()
	for i, p := range take {
		releasePages(unsafe.Slice((*byte)(p), sizes[i]))
	}
	arena.mu.Lock()
	for i, p := range take {
		n := sizes[i] / arenaPage
		arena.cold[n] = append(arena.cold[n], p)
	}
	arena.mu.Unlock()
	return got
}

// OffHeap reports the off-heap history memory: bytes in blocks handed
// out, bytes in free blocks still resident (Trim returns them), bytes of
// address space mapped, and bytes handed out since the start (a monotonic
// count, e.g. to tell a quiet server). Safe from any goroutine.
func OffHeap() (inUse, free, mapped, allocated int64) {
	return arenaInUse.Load(), arenaFree.Load(), arenaMapped.Load(), arenaAllocd.Load()
}
