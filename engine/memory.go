package engine

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
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
// a large amount of free heap not yet returned, and then forces a
// collection and returns what it freed (debug.FreeOSMemory) twice, one
// tick apart: the second frees what the first only moved to the pools'
// victim caches.

// memInterval is how often memSweep looks; memDrop and memIdle are its
// thresholds.
const (
	memInterval = 10 * time.Second
	memDrop     = 32 << 20
	memDropN    = 10_000
	memIdle     = 64 << 20
)

// memState is memSweep's state, owned by the ticker goroutine.
type memState struct {
	lastRetained int64
	lastHosted   int64
	again        bool // a second FreeOSMemory is due
	frees        int64
	sample       []metrics.Sample
	freeBytes    func() int64 // replaces the runtime's count in tests
}

// memSweep runs on the ticker goroutine every memInterval.
func (s *Server) memSweep() {
	m := &s.mem
	if m.sample == nil {
		m.sample = []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	}
	var free int64
	if m.freeBytes != nil {
		free = m.freeBytes()
	} else if metrics.Read(m.sample); m.sample[0].Value.Kind() == metrics.KindUint64 {
		free = int64(m.sample[0].Value.Uint64())
	}
	ld := s.host.Load()
	retained := s.host.Retained() // hosted streamlets and gateway copies
	dropped, droppedN := m.lastRetained-retained, m.lastHosted-ld.Hosted
	m.lastRetained, m.lastHosted = retained, ld.Hosted
	if !m.again && dropped < memDrop && droppedN < memDropN && free < memIdle {
		return
	}
	m.again = !m.again
	m.frees++
	debug.FreeOSMemory()
}
