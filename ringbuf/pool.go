package ringbuf

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Chunk size classes. Standard chunks grow geometrically per buffer, from
// the smallest class that holds the first record (16 B for a record of up
// to 12 payload bytes), 32 B, 64 B, ... up to stdChunkSize, so a buffer
// with one small record holds 16 B of chunk, not 2 KiB (issue 14: 100,000
// channels of one message each held 5 KiB apiece, mostly a 2 KiB chunk
// and a 1.5 KiB index page; a busy buffer pays a few more tiny chunks on
// its way to 64 KiB ones). A record larger than stdChunkSize gets a dedicated
// chunk rounded up to a multiple of stdChunkSize; those are pooled up to
// maxPooledUnits*stdChunkSize (4 MiB) and left to the GC beyond.
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
// a small channel's chunk memory.
type chunk struct {
	b     []byte
	class int32
	slots int32 // table slots of one buffer naming this chunk (writer/recycler only)
}

// page is a block of index entries.
type page struct {
	e []entry
}

// Recycled chunks of at least keepMinSize are kept first on a free list
// that survives garbage collections, up to KeepLimit bytes, and only
// beyond it in a sync.Pool (which a GC empties). Memory that was written
// once is mapped and faulted in; taking a fresh chunk from the heap costs
// a page fault per 4 KiB on first write, measured at about 85% of the cost
// of copying a payload into a fresh chunk (BENCHMARKS.md), so a server
// whose history expires as fast as it grows (the retention budget, TTL)
// writes into memory it already has. Smaller chunks share pages the
// allocator already faulted in and reuses, so keeping them saves nothing
// and pinned 10 MiB of an idle server after 100,000 small channels
// expired (issue 14). The free list is bounded, so an idle server holds at
// most KeepLimit bytes of it, and TrimKept lets it hand those back.
var (
	keepMu    sync.Mutex
	keepList  [numChunkClasses][]*chunk // guarded by keepMu
	keptBytes int                       // guarded by keepMu
	keepLimit atomic.Int64
)

// keepMinSize is the smallest chunk the free list keeps (one page).
const keepMinSize = 4 << 10

// DefaultKeepLimit is the free list's bound until SetKeepLimit changes it.
const DefaultKeepLimit = 64 << 20

func init() { keepLimit.Store(DefaultKeepLimit) }

// SetKeepLimit bounds the bytes of recycled chunks kept on the free list
// (0 keeps none). Safe from any goroutine; chunks already kept when the
// limit is lowered stay until they are taken or TrimKept drops them.
func SetKeepLimit(n int) { keepLimit.Store(int64(max(n, 0))) }

// TrimKept drops kept chunks, largest classes first, until at most n bytes
// stay on the free list, and returns the bytes it dropped. The dropped
// chunks are left to the garbage collector (a server calls it when it has
// become idle, before it returns freed memory to the operating system).
// Safe from any goroutine.
func TrimKept(n int) int {
	n = max(n, 0)
	keepMu.Lock()
	defer keepMu.Unlock()
	dropped := 0
	for class := numChunkClasses - 1; class >= 0 && keptBytes > n; class-- {
		l := keepList[class]
		for len(l) > 0 && keptBytes > n {
			c := l[len(l)-1]
			l[len(l)-1] = nil
			l = l[:len(l)-1]
			keptBytes -= len(c.b)
			dropped += len(c.b)
		}
		if len(l) == 0 {
			l = nil // the slice's array goes too
		}
		keepList[class] = l
	}
	return dropped
}

// KeptBytes returns the bytes of chunks on the free list. Safe from any
// goroutine.
func KeptBytes() int {
	keepMu.Lock()
	defer keepMu.Unlock()
	return keptBytes
}

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
	if chunkSize(class) >= keepMinSize {
		if c := takeKept(class); c != nil {
			stats.chunkReuses.Add(1)
			return c
		}
	}
	if c, ok := chunkPools[class].Get().(*chunk); ok {
		stats.chunkReuses.Add(1)
		return c
	}
	stats.chunkAllocs.Add(1)
	return &chunk{b: make([]byte, chunkSize(class)), class: int32(class)}
}

// takeKept takes a chunk of the class from the free list, nil if none.
func takeKept(class int) *chunk {
	keepMu.Lock()
	defer keepMu.Unlock()
	l := keepList[class]
	if len(l) == 0 {
		return nil
	}
	c := l[len(l)-1]
	l[len(l)-1] = nil
	keepList[class] = l[:len(l)-1]
	keptBytes -= len(c.b)
	return c
}

// getChunk returns a dedicated chunk for a record of need > stdChunkSize bytes.
func getChunk(need int) *chunk {
	class, size := largeClass(need)
	if class == unpooled {
		stats.chunkAllocs.Add(1)
		return &chunk{b: make([]byte, size), class: unpooled}
	}
	return getChunkClass(class)
}

// putChunk returns c to its pool. The caller guarantees no reference to its
// bytes remains (see Buffer.recycle).
func putChunk(c *chunk) {
	stats.chunkFrees.Add(1)
	if c.class == unpooled {
		return
	}
	if len(c.b) < keepMinSize {
		chunkPools[c.class].Put(c)
		return
	}
	keepMu.Lock()
	if int64(keptBytes+len(c.b)) <= keepLimit.Load() {
		keepList[c.class] = append(keepList[c.class], c)
		keptBytes += len(c.b)
		keepMu.Unlock()
		return
	}
	keepMu.Unlock()
	chunkPools[c.class].Put(c)
}

// getPage returns an index page of the class, recycled if possible.
func getPage(class int) *page {
	if p, ok := pagePools[class].Get().(*page); ok {
		stats.pageReuses.Add(1)
		return p
	}
	stats.pageAllocs.Add(1)
	return &page{e: make([]entry, 1<<(firstPageShift+class))}
}

// putPage returns p to its pool.
func putPage(p *page) {
	stats.pageFrees.Add(1)
	pagePools[pageClass(bits.Len(uint(len(p.e)))-1-firstPageShift)].Put(p)
}
