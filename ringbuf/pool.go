package ringbuf

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Chunk size classes. Standard chunks grow geometrically per buffer, from
// the smallest class that holds the first record (16 B for a record of up
// to 12 payload bytes), 32 B, 64 B, ... up to stdChunkSize, so a buffer
// with one small record holds 16 B of chunk, not 2 KiB (issue 14: 100,000
// channels of one message each held 5 KiB apiece, mostly a 2 KiB chunk
// and a 1.5 KiB index page; a busy buffer pays a few more tiny chunks on
// its way to 64 KiB ones). A record larger than stdChunkSize gets a dedicated
// chunk rounded up to a multiple of stdChunkSize, up to
// maxPooledUnits*stdChunkSize (4 MiB); beyond, a chunk of its size on the
// Go heap, left to the GC. Chunks of 4 KiB and more are off the Go heap
// (arena.go) and recycled there; smaller ones through sync.Pools.
const (
	minChunkShift   = 4 // 16 B
	stdChunkSize    = 64 << 10
	numSmallClasses = 13 // 16 B, 32 B, ..., 32 KiB, 64 KiB
	maxPooledUnits  = 64
	numChunkClasses = numSmallClasses + maxPooledUnits - 1
	unpooled        = -1
)

// chunk is a block of record bytes. It travels through the pools as a
// pointer so that Put does not allocate. 32 bytes: its header is most of
// a small channel's chunk memory. Chunks of offHeapMin bytes and more
// are off the Go heap (arena.go): off says so, and the chunk's memory goes
// back to the arena, not to a pool.
type chunk struct {
	b     []byte
	class int16
	off   bool
	slots int32 // table slots of one buffer naming this chunk (writer/recycler only)
}

// page is a block of index entries; off as for chunk.
type page struct {
	e   []entry
	off bool
}

// offHeapMin is the smallest chunk kept off the Go heap: one page. Smaller
// chunks share pages that the heap's allocator already faulted in and
// reuses; a buffer holds at most one of each small class (4 KiB in all).
const offHeapMin = arenaPage

// offHeapPageClass is the smallest index page class kept off the Go heap:
// 512 entries, 12 KiB (pages of 256 entries are 6 KiB, not whole pages).
const offHeapPageClass = 9

var (
	chunkPools [numChunkClasses]sync.Pool
	pagePools  [numPageClasses]sync.Pool
	stats      poolCounters
)

// poolCounters are the package-wide pool statistics (monotonic counters).
type poolCounters struct {
	chunkAllocs, chunkReuses, chunkFrees atomic.Uint64
	pageAllocs, pageReuses, pageFrees    atomic.Uint64
}

// PoolStats is a snapshot of the package-wide recycling counters. All values
// are monotonic since process start.
type PoolStats struct {
	ChunkAllocs uint64 // chunks allocated fresh from the heap
	ChunkReuses uint64 // chunks taken from a pool (recycled memory)
	ChunkFrees  uint64 // chunks returned by recycled buffers
	PageAllocs  uint64 // index pages allocated fresh
	PageReuses  uint64 // index pages taken from a pool
	PageFrees   uint64 // index pages returned by recycled buffers
}

// ReadPoolStats returns the current recycling counters. Safe from any
// goroutine; the fields are read one by one, not as one atomic snapshot.
func ReadPoolStats() PoolStats {
	return PoolStats{
		ChunkAllocs: stats.chunkAllocs.Load(),
		ChunkReuses: stats.chunkReuses.Load(),
		ChunkFrees:  stats.chunkFrees.Load(),
		PageAllocs:  stats.pageAllocs.Load(),
		PageReuses:  stats.pageReuses.Load(),
		PageFrees:   stats.pageFrees.Load(),
	}
}

// smallClass returns the smallest standard class holding need bytes
// (need <= stdChunkSize).
func smallClass(need int) int {
	return max(0, bits.Len(uint(need-1))-minChunkShift)
}

// largeClass returns the class and allocation size of a dedicated chunk for
// need > stdChunkSize bytes; the class is unpooled beyond maxPooledUnits.
func largeClass(need int) (class, size int) {
	units := (need + stdChunkSize - 1) / stdChunkSize
	if units > maxPooledUnits {
		return unpooled, need
	}
	return numSmallClasses + units - 2, units * stdChunkSize
}

// chunkSize returns the allocation size of a pooled class.
func chunkSize(class int) int {
	if class < numSmallClasses {
		return 1 << (minChunkShift + class)
	}
	return (class - numSmallClasses + 2) * stdChunkSize
}

// getChunkClass returns a chunk of a pooled class, recycled if possible.
// Its bytes are not zeroed: every byte a reader can see is written first.
func getChunkClass(class int) *chunk {
	size := chunkSize(class)
	if size >= offHeapMin {
		b, off := arenaAlloc(size)
		stats.chunkAllocs.Add(1)
		return &chunk{b: b, class: int16(class), off: off}
	}
	if c, ok := chunkPools[class].Get().(*chunk); ok {
		stats.chunkReuses.Add(1)
		return c
	}
	stats.chunkAllocs.Add(1)
	return &chunk{b: make([]byte, size), class: int16(class)}
}

// getChunk returns a dedicated chunk for a record of need > stdChunkSize bytes.
func getChunk(need int) *chunk {
	class, size := largeClass(need)
	if class == unpooled {
		// Rare (records over 4 MiB): on the Go heap, left to the
		// collector on recycle.
		stats.chunkAllocs.Add(1)
		return &chunk{b: make([]byte, size), class: unpooled}
	}
	return getChunkClass(class)
}

// putChunk returns c to its pool, or its memory to the arena. The caller
// guarantees no reference to its bytes remains (see Buffer.recycle).
func putChunk(c *chunk) {
	stats.chunkFrees.Add(1)
	switch {
	case c.off:
		arenaFreeBlock(c.b[:cap(c.b)])
		c.b = nil
	case c.class != unpooled:
		chunkPools[c.class].Put(c)
	}
}

// getPage returns an index page of the class, recycled if possible.
func getPage(class int) *page {
	n := 1 << (firstPageShift + class)
	if class >= offHeapPageClass {
		b, off := arenaAlloc(n * entrySize)
		stats.pageAllocs.Add(1)
		return &page{e: unsafe.Slice((*entry)(unsafe.Pointer(unsafe.SliceData(b))), n), off: off}
	}
	if p, ok := pagePools[class].Get().(*page); ok {
		stats.pageReuses.Add(1)
		return p
	}
	stats.pageAllocs.Add(1)
	return &page{e: make([]entry, n)}
}

// putPage returns p to its pool, or its memory to the arena.
func putPage(p *page) {
	stats.pageFrees.Add(1)
	if p.off {
		arenaFreeBlock(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(p.e))), len(p.e)*entrySize))
		p.e = nil
		return
	}
	pagePools[pageClass(bits.Len(uint(len(p.e)))-1-firstPageShift)].Put(p)
}
