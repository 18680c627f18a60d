package engine

import (
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/sluice-rtm/sluice/ringbuf"
)

// Returning memory to the operating system, and the process's memory
// limit.
//
// Message history lives off the Go heap (ringbuf's arena): expired history
// goes on the arena's free lists, still resident, and new history is
// written into it first (no page faults). Memory goes back to the OS on the
// ticker goroutine, never on an event loop, and without stopping the world:
//
//   - every retentionInterval (trimHistory), free history beyond keepFree
//     (64 MiB, or a sixteenth of MaxRetained if larger) is returned, at
//     most trimStep a tick, so that a TTL freeing a whole budget at once is
//     returned over a second or so of madvise calls;
//   - every memInterval (memSweep), a quiet server (less than memQuiet
//     allocated, on the heap and in history, since the last sweep) returns
//     every free history block and, if its heap holds more than
//     memQuietFree free or dead, forces a collection and returns the
//     heap's free pages (debug.FreeOSMemory), twice, one sweep apart (the
//     second frees what the first only moved to the pools' victim
//     caches), once per quiet spell: issue 14's 100,000 small channels,
//     whose history is on the heap (small chunks), are returned so.
//
// Under load nothing forces a collection. Before, memSweep called
// debug.FreeOSMemory whenever 32 MiB of history (then on the heap) had
// expired, or the heap held 64 MiB free, busy or not: a full collection
// of a heap of a whole budget and a scavenge of every free page, every 10
// to 20 s at a steady state, whose pages the next history faulted in again
// (issue 27).
//
// Memory limit: with Options.MemoryLimit set (sluice serve sets 1.25 x
// MaxRetained plus a fixed overhead), the Go runtime's soft limit is that
// minus the history resident off the heap (setMemoryLimit), so the heap
// and the history together stay within it.

// Thresholds of trimHistory and memSweep.
const (
	memInterval = 10 * time.Second
	// keepFreeMin: free history kept resident under load, at least.
	keepFreeMin = 64 << 20
	// trimStep: most free history returned per retentionInterval.
	trimStep = 64 << 20
	// A server that allocated less than memQuiet in the last interval is
	// quiet: its free history, and its free heap beyond memQuietFree, are
	// returned.
	memQuiet     = 16 << 20
	memQuietFree = 8 << 20
	// memLimitFloor: the runtime's limit is never set below it (the heap
	// needs room for connections and output whatever the history holds);
	// memLimitStep: it is set again when it moved by at least this much.
	memLimitFloor = 64 << 20
	memLimitStep  = 16 << 20
)

// memState is the state of trimHistory and memSweep, owned by the ticker
// goroutine.
type memState struct {
	frees      int64 // forced returns of the heap (debug.FreeOSMemory)
	trimmed    int64 // bytes of free history returned (ringbuf.Trim)
	returned   int   // forced returns done in this quiet spell (at most 2)
	lastAllocs int64 // heap and history allocated at the last sweep (or the ticker's start)
	limitSet   int64 // the runtime memory limit set last (0: none)
	sample     []metrics.Sample
	freeBytes  func() int64 // replace the runtime's counts in tests
	allocBytes func() int64
}

// keepFree returns the free history kept resident under load.
func (s *Server) keepFree() int64 {
	return max(keepFreeMin, int64(s.opts.MaxRetained)/16)
}

// trimHistory returns free history beyond keepFree and updates the memory
// limit; called by the ticker every retentionInterval.
func (s *Server) trimHistory() {
	if _, free, _, _ := ringbuf.OffHeap(); free > s.keepFree() {
		s.mem.trimmed += ringbuf.Trim(s.keepFree(), trimStep)
	}
	s.setMemoryLimit()
}

// setMemoryLimit sets the Go runtime's soft memory limit to
// Options.MemoryLimit minus the history resident off the heap (in use and
// free), when it moved by memLimitStep or more.
func (s *Server) setMemoryLimit() {
	if s.opts.MemoryLimit <= 0 {
		return
	}
	inUse, free, _, _ := ringbuf.OffHeap()
	limit := max(s.opts.MemoryLimit-inUse-free, memLimitFloor)
	if d := limit - s.mem.limitSet; d >= memLimitStep || d <= -memLimitStep {
		debug.SetMemoryLimit(limit)
		s.mem.limitSet = limit
	}
}

// memSweep runs on the ticker goroutine every memInterval: a quiet server
// returns its free history and, once per quiet spell, its free heap.
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
	_, _, _, hist := ringbuf.OffHeap()
	allocs += hist
	if m.freeBytes != nil {
		free, allocs = m.freeBytes(), m.allocBytes()
	}
	quiet := allocs-m.lastAllocs < memQuiet
	m.lastAllocs = allocs
	if !quiet {
		m.returned = 0
		return
	}
	m.trimmed += ringbuf.Trim(0, 0)
	if m.returned >= 2 || m.returned == 0 && free < memQuietFree {
		return
	}
	s.log.Debug("quiet: returning free heap to the OS", "free_bytes", free, "second", m.returned == 1)
	m.returned++
	m.frees++
	debug.FreeOSMemory()
}

// sampleInt returns a runtime metric's value, 0 if the runtime lacks it.
func sampleInt(s metrics.Sample) int64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return int64(s.Value.Uint64())
	}
	return 0
}

// heapAllocs returns the bytes the Go heap and the off-heap history have
// allocated since the start.
func heapAllocs() int64 {
	smp := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(smp)
	_, _, _, hist := ringbuf.OffHeap()
	return sampleInt(smp[0]) + hist
}
