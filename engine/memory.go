package engine

import (
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/sluice-rtm/sluice/ringbuf"
)

// Returning memory to the operating system.
//
// Message history is freed in bursts: a TTL or the retention budget
// drops many streamlets at once, whose chunks go back to ringbuf's pools.
// An idle server then allocates nothing, so the Go runtime neither runs a
// collection (the pools keep the chunks until two have passed) nor hands
// the freed pages back (its scavenger returns them slowly), and the RSS of
// a server that held 500 MiB of small channels stayed there (issue 14).
// memSweep notices a large drop of the retained history (in bytes, or in
// streamlets: 100,000 small ones are little history but much memory), or
// a large amount of free heap not yet returned, and then trims the ring
// buffers' free list of recycled chunks to the history still held, forces
// a collection and returns what it freed (debug.FreeOSMemory) twice, one
// tick apart: the second frees what the first only moved to the pools'
// victim caches.

// memInterval is how often memSweep looks; memDrop, memDropN, memIdle,
// memQuiet and memQuietFree are its thresholds.
const (
	memInterval = 10 * time.Second
	memDrop     = 32 << 20
	memDropN    = 10_000
	memIdle     = 64 << 20
	// A server that allocated less than memQuiet in the last interval is
	// quiet: the free heap it holds beyond memQuietFree is returned. The
	// collector's pacing lets a heap grow to twice what is live before it
	// collects, and the runtime returns the rest slowly, so a server that
	// created 100,000 small channels held twice their live 630 bytes each
	// for as long as it stayed idle (issue 14). Under load nothing is
	// returned early: memory handed back would be faulted in again.
	memQuiet     = 16 << 20
	memQuietFree = 8 << 20
)

// memState is memSweep's state, owned by the ticker goroutine.
type memState struct {
	lastRetained int64
	lastHosted   int64
	again        bool // a second FreeOSMemory is due
	frees        int64
	trimmed      int64 // bytes of kept chunks dropped (ringbuf.TrimKept)
	lastAllocs   int64 // heapAllocs at the last sweep (or the ticker's start)
	sample       []metrics.Sample
	freeBytes    func() int64 // replace the runtime's counts in tests
	allocBytes   func() int64
}

// memSweep runs on the ticker goroutine every memInterval.
func (s *Server) memSweep() {
	m := &s.mem
	if m.sample == nil {
		m.sample = []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/allocs:bytes"},
			{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	}
	metrics.Read(m.sample)
	// free: heap pages free and not returned; garbage: objects dead since
	// the last collection, which no collection runs for on an idle server.
	free, allocs := sampleInt(m.sample[0]), sampleInt(m.sample[1])
	free += max(0, sampleInt(m.sample[2])-sampleInt(m.sample[3]))
	if m.freeBytes != nil {
		free, allocs = m.freeBytes(), m.allocBytes()
	}
	quiet := allocs-m.lastAllocs < memQuiet
	m.lastAllocs = allocs
	ld := s.host.Load()
	retained := s.host.Retained() // hosted streamlets and gateway copies
	dropped, droppedN := m.lastRetained-retained, m.lastHosted-ld.Hosted
	m.lastRetained, m.lastHosted = retained, ld.Hosted
	if !m.again && dropped < memDrop && droppedN < memDropN && free < memIdle && (!quiet || free < memQuietFree) {
		return
	}
	s.log.Debug("returning free memory to the OS", "free_bytes", free, "quiet", quiet, "history_dropped", dropped,
		"streamlets_dropped", droppedN, "second", m.again)
	m.again = !m.again
	m.frees++
	// The ring buffers' free list (recycled chunks kept across collections
	// so that new history is written into memory already faulted in) is
	// worth at most the history still held: an idle server keeps none.
	m.trimmed += int64(ringbuf.TrimKept(int(retained)))
	debug.FreeOSMemory()
}

// sampleInt returns a runtime metric's value, 0 if the runtime lacks it.
func sampleInt(s metrics.Sample) int64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return int64(s.Value.Uint64())
	}
	return 0
}

// heapAllocs returns the bytes the Go heap has allocated since the start.
func heapAllocs() int64 {
	smp := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(smp)
	return sampleInt(smp[0])
}
