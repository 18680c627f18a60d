package host

import (
	"sort"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/dedup"
	"github.com/sluice-rtm/sluice/wire"
)

// Deduplication of publishes that carry a message id (PROTOCOL.md 2.14).
//
// The host that appends to a channel's open streamlet holds the channel's
// dedup window (package dedup): the ids of the messages appended in the
// last Window, and their positions. An extended record whose id is in the
// window is not appended; its publisher is answered with the first
// message's position.
//
// The window belongs to the channel on this host, not to one streamlet:
// when the channel's next streamlet opens here (rollover) it continues the
// same window. When the window is missing or does not reach up to the new
// streamlet's first position (the window was never built here, the channel
// was written on another host in between, or this host restarted the
// channel), it is rebuilt from the ids stored in the retained records of
// the channel's streamlets on this host, from Window ago on (the ids live
// in the records, so whoever holds them can rebuild). Streamlets of the
// channel hosted only by other nodes are not read: after a change of host
// the window misses their ids (counted in DedupPartial). The window is
// dropped with the channel's last streamlet on this host.

// chanWindow is one channel's window on this host. Its fields are guarded
// by mu; the streamlet appending takes it inside its own mu (lock order:
// Streamlet.mu, then Host.wmu or chanWindow.mu; never Host.mu).
type chanWindow struct {
	mu    sync.Mutex
	w     *dedup.Window
	epoch uint64
	next  uint64 // the position after the last record the window has seen
}

// DedupStats are the host's deduplication counters.
type DedupStats struct {
	Windows    int    // channels with a window on this host
	Duplicates uint64 // publishes answered with an earlier position
	Rebuilds   uint64 // windows rebuilt from retained records
	Partial    uint64 // rebuilds that found a hole before the new streamlet
}

// SetDedup sets the dedup window and the most ids remembered per channel
// (defaults dedup.DefaultWindow and dedup.DefaultMaxIDs). Call it before
// the host takes appends.
func (h *Host) SetDedup(window time.Duration, maxIDs int) {
	h.ddWindow, h.ddMax = window, maxIDs
}

// Dedup returns the deduplication counters.
func (h *Host) Dedup() DedupStats {
	h.wmu.Lock()
	n := len(h.windows)
	h.wmu.Unlock()
	return DedupStats{Windows: n, Duplicates: h.ddDups.Load(), Rebuilds: h.ddRebuilds.Load(), Partial: h.ddPartial.Load()}
}

// window returns s's channel window, continuing or rebuilding it so that
// it has seen every record before s's next position. s.mu is held.
func (s *Streamlet) window(now int64) *chanWindow {
	h := s.h
	next := s.first + uint64(s.buf.Len())
	if cw := s.dd; cw != nil {
		return cw
	}
	h.wmu.Lock()
	cw := h.windows[s.channel]
	if cw == nil || cw.epoch != s.epoch {
		cw = &chanWindow{epoch: s.epoch}
		h.windows[s.channel] = cw
	}
	// The channel's earlier streamlets on this host, for a rebuild.
	var mine []*Streamlet
	for _, o := range h.byChan[s.channel] {
		if o != s && o.epoch == s.epoch && o.first < s.first {
			mine = append(mine, o)
		}
	}
	h.wmu.Unlock()
	s.dd = cw
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.w != nil && cw.next == next {
		return cw // continues without a hole
	}
	cw.w = dedup.New(h.window(), h.maxIDs())
	h.ddRebuilds.Add(1)
	since := now - int64(h.window())
	sort.Slice(mine, func(i, j int) bool { return mine[i].first < mine[j].first })
	expect := uint64(0)
	for _, o := range append(mine, s) {
		if expect != 0 && o.first != expect {
			h.ddPartial.Add(1) // a streamlet hosted elsewhere lies between
		}
		// Another streamlet is read like any reader does, holding a
		// buffer reference, not its lock (s.mu is held).
		if o != s && !o.buf.Acquire() {
			continue // freed meanwhile
		}
		o.scanIDs(cw.w, since)
		expect = o.first + uint64(o.buf.Len())
		if o != s {
			o.buf.Release()
		}
	}
	cw.next = next
	return cw
}

// inherit gives a new streamlet, before anyone can append to it, its
// channel's window when the window has seen everything up to its first
// position (a rollover on this host): no rebuild is needed then.
func (h *Host) inherit(s *Streamlet) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if cw := h.windows[s.channel]; cw != nil && cw.epoch == s.epoch {
		cw.mu.Lock()
		if cw.w != nil && cw.next == s.first {
			s.dd = cw
		}
		cw.mu.Unlock()
	}
}

// index adds a hosted streamlet to the by-channel index.
func (h *Host) index(s *Streamlet) {
	h.wmu.Lock()
	h.byChan[s.channel] = append(h.byChan[s.channel], s)
	h.wmu.Unlock()
}

// unindex removes a freed streamlet; the channel's window goes with its
// last streamlet on this host.
func (h *Host) unindex(s *Streamlet) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	list := h.byChan[s.channel]
	for i, o := range list {
		if o == s {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(h.byChan, s.channel)
		delete(h.windows, s.channel)
		return
	}
	h.byChan[s.channel] = list
}

// scanIDs adds the ids of s's records stamped at or after since to w.
func (s *Streamlet) scanIDs(w *dedup.Window, since int64) {
	n := s.buf.Len()
	for i := max(s.buf.SearchStamp(since), 0); i < n; i++ {
		body, ext := s.buf.GetExt(i)
		if !ext {
			continue
		}
		if e, err := wire.ParseExt(body, wire.TypeData); err == nil && len(e.MsgID) > 0 {
			w.Add(e.MsgID, s.first+uint64(i), s.buf.Stamp(i))
		}
	}
}

func (h *Host) window() time.Duration {
	if h.ddWindow <= 0 {
		return dedup.DefaultWindow
	}
	return h.ddWindow
}

func (h *Host) maxIDs() int {
	if h.ddMax <= 0 {
		return dedup.DefaultMaxIDs
	}
	return h.ddMax
}
