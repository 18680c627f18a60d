package host

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/dedup"
	"github.com/sluice-rtm/sluice/ringbuf"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Waker is told that a streamlet changed: records were appended, or it was
// sealed or freed. Wake is called from whichever goroutine changed the
// streamlet, with no lock of the streamlet held, and must not block.
type Waker interface{ Wake() }

// Streamlet is one channel portion: a ring buffer of messages whose first
// message has position First. Writers (any gateway loop holding the write
// grant, or the feed of a copy) are serialised by mu; readers read Buf
// lock-free, holding a buffer reference (Buf().Acquire) while they use its
// bytes.
type Streamlet struct {
	h        *Host
	id       uint64
	channel  string
	first    uint64
	leaseEnd int64 // unix ns; appends at or after it seal the streamlet

	mu  sync.Mutex // serialises appends, Seal and Free (the single writer)
	buf *ringbuf.Buffer

	// epoch and limitMsgs are fixed at creation (or adoption); repl is
	// guarded by mu.
	epoch     uint64
	limitMsgs int32
	// hasIDs is set before the first record with a message id is
	// appended: rebuilds skip streamlets without (dedup.go).
	hasIDs atomic.Bool
	// repl is a replicated streamlet's replica set and replication state
	// (replica.go); nil for a single copy.
	repl *replState
	// side holds what only some streamlets need, so that a small
	// channel's streamlet stays at 160 bytes (issue 14): a copy's own
	// state (set by NewCopy) or the wakers of a hosted streamlet other
	// nodes read (set by the first AddWaker, under the host's wakersMu).
	// nil for most.
	side atomic.Pointer[streamletSide]
	// sealSeq orders sealed streamlets by when they were sealed (from the
	// host's seal counter; 0 while open): the retention budget frees the
	// oldest first (retention.go).
	sealSeq atomic.Uint64
	// sealedAt is when the buffer was sealed (unix ns, the host's clock; 0
	// while open).
	sealedAt atomic.Int64
	// dd is the channel's dedup window, set (under mu) by the first append
	// of a message with an id (dedup.go).
	dd *chanWindow
}

// streamletSide is a Streamlet's side. wakers are told of changes (the
// feeds of other nodes' copies); the slice is replaced, never modified,
// under the host's wakersMu, so that wake reads it without a lock. A
// copy's (isCopy): of names the node hosting the original; adopted is set
// once the complete copy became a hosted streamlet (Adopt): CopyOf then
// reports ""; brokenAt is when its feed ended other than by the host
// (Break: the link failed), lastFill when the copy was made or last
// filled (unix ns, the host's clock).
type streamletSide struct {
	wakers             atomic.Pointer[[]Waker]
	isCopy             bool
	of                 string
	adopted            atomic.Bool
	brokenAt, lastFill atomic.Int64
}

// copyState returns a copy's side (adopted or not), nil for a streamlet
// hosted from the start.
func (s *Streamlet) copyState() *streamletSide {
	if sd := s.side.Load(); sd != nil && sd.isCopy {
		return sd
	}
	return nil
}

// ID returns the streamlet's id.
func (s *Streamlet) ID() uint64 { return s.id }

// Channel returns the name of the streamlet's channel.
func (s *Streamlet) Channel() string { return s.channel }

// First returns the position of the streamlet's first message.
func (s *Streamlet) First() uint64 { return s.first }

// Replicas returns the streamlet's replica set, orderer first (nil for a
// single copy). The slice must not be modified.
func (s *Streamlet) Replicas() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.repl == nil {
		return nil
	}
	return s.repl.replicas
}

// Epoch returns the channel incarnation the streamlet belongs to.
func (s *Streamlet) Epoch() uint64 { return s.epoch }

// Buf returns the streamlet's buffer for reading (Acquire, Len, Sealed,
// AppendRun, Stamp, SearchStamp, Release, Footprint). Only the Streamlet's
// methods write it.
func (s *Streamlet) Buf() *ringbuf.Buffer { return s.buf }

// CopyOf returns the node hosting the original of a copy, "" for a hosted
// streamlet.
func (s *Streamlet) CopyOf() string {
	if cp := s.copyState(); cp != nil && !cp.adopted.Load() {
		return cp.of
	}
	return ""
}

// SealedAt returns when the buffer was sealed (unix ns), 0 while open.
func (s *Streamlet) SealedAt() int64 { return s.sealedAt.Load() }

// SealSeq returns the node-wide order of the streamlet's seal, 0 while open.
func (s *Streamlet) SealSeq() uint64 { return s.sealSeq.Load() }

// sealLocked closes the streamlet for writes: it seals the buffer and
// numbers the seal; s.mu is held. A replicated streamlet's buffer is sealed
// only once every record written is visible (replica.go): readers take a
// sealed buffer's length as final.
func (s *Streamlet) sealLocked() {
	if r := s.repl; r != nil {
		r.closed = true
		if s.buf.Len() < s.buf.Written() {
			return
		}
	}
	if !s.buf.Sealed() {
		s.buf.Seal()
		s.sealSeq.Store(s.h.seals.Add(1))
		s.sealedAt.Store(s.h.clock().UnixNano())
	}
}

// AddWaker registers w to be told of the streamlet's changes.
func (s *Streamlet) AddWaker(w Waker) {
	s.h.wakersMu.Lock()
	defer s.h.wakersMu.Unlock()
	sd := s.side.Load()
	if sd == nil {
		sd = &streamletSide{}
		s.side.Store(sd)
	}
	var ws []Waker
	if p := sd.wakers.Load(); p != nil {
		ws = append(ws, (*p)...)
	}
	ws = append(ws, w)
	sd.wakers.Store(&ws)
}

// RemoveWaker forgets w.
func (s *Streamlet) RemoveWaker(w Waker) {
	s.h.wakersMu.Lock()
	defer s.h.wakersMu.Unlock()
	sd := s.side.Load()
	if sd == nil {
		return
	}
	p := sd.wakers.Load()
	if p == nil {
		return
	}
	ws := make([]Waker, 0, len(*p))
	for _, x := range *p {
		if x != w {
			ws = append(ws, x)
		}
	}
	if len(ws) == 0 {
		sd.wakers.Store(nil)
		return
	}
	sd.wakers.Store(&ws)
}

// wake tells the wakers of a change; no lock is held.
func (s *Streamlet) wake() {
	sd := s.side.Load()
	if sd == nil {
		return
	}
	if p := sd.wakers.Load(); p != nil {
		for _, w := range *p {
			w.Wake()
		}
	}
}

// Append adds one message stamped now (unix ns) and returns its position,
// or role.ErrStreamletClosed when the streamlet is sealed, full or past its
// lease; in the last two cases it seals itself first, so that the end
// position it reports is final. Wakers are told.
func (s *Streamlet) Append(p []byte, now int64) (uint64, error) {
	var pos [1]uint64
	if s.AppendBatch([][]byte{p}, pos[:], now) == 0 {
		return 0, role.ErrStreamletClosed
	}
	return pos[0], nil
}

// AppendBatch appends payloads in order under one lock acquisition and
// stores each position in pos. It returns how many were appended; fewer
// than len(payloads) means the streamlet closed (and is now sealed).
// Wakers are told; the host's load counters count what was appended.
func (s *Streamlet) AppendBatch(payloads [][]byte, pos []uint64, now int64) int {
	return s.AppendBatchExt(payloads, nil, pos, nil, now)
}

// AppendExt is Append of a record whose body is an extended record body
// when ext is set (wire.ParseExt). A message whose id the channel's dedup
// window holds is not appended: its first position is returned.
func (s *Streamlet) AppendExt(p []byte, ext bool, now int64) (uint64, error) {
	var pos [1]uint64
	if s.AppendBatchExt([][]byte{p}, []bool{ext}, pos[:], nil, now) == 0 {
		return 0, role.ErrStreamletClosed
	}
	return pos[0], nil
}

// AppendBatchExt is AppendBatch of records that may be extended: recs[k]
// is an extended record body when ext[k] (ext may be nil: none is). An
// extended record with a message id that the channel's dedup window holds
// is not appended (dedup.go): pos[k] is the position of the message first
// stored with that id, and dup[k] (if dup is not nil) is set. It returns
// how many records were handled, appended or deduplicated, in order;
// fewer than len(recs) means the streamlet closed (and is now sealed).
// The caller must have validated extended bodies (wire.ParseExt).
func (s *Streamlet) AppendBatchExt(recs [][]byte, ext []bool, pos []uint64, dup []bool, now int64) int {
	n, stored, bytes := s.appendLocked(recs, ext, pos, dup, now)
	if stored > 0 {
		s.h.appended.Add(uint64(stored))
		s.h.appendedBytes.Add(uint64(bytes))
	}
	if n-stored > 0 {
		s.h.ddDups.Add(uint64(n - stored))
	}
	s.wake()
	return n
}

func (s *Streamlet) appendLocked(recs [][]byte, ext []bool, pos []uint64, dup []bool, now int64) (n, stored, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf.Sealed() {
		return 0, 0, 0
	}
	if r := s.repl; r != nil && (r.closed || r.fenced || !r.orderer) {
		// Closed, fenced by recovery, or a follower: only the orderer
		// takes appends, and only forwarded ones reach a follower.
		return 0, 0, 0
	}
	if now >= s.leaseEnd {
		s.sealLocked()
		return 0, 0, 0
	}
	cw := s.dd
	if cw != nil {
		cw.mu.Lock()
	}
	var key dedup.Key
	for k, p := range recs {
		x := ext != nil && ext[k]
		var id []byte
		if x {
			id = wire.ExtMsgIDOf(p) // the body was checked by the gateway
		}
		if len(id) > 0 {
			if !s.hasIDs.Load() {
				s.hasIDs.Store(true) // before the record is committed
			}
			if cw == nil {
				cw = s.window(now) // takes and releases cw.mu
				cw.mu.Lock()
			}
			key = dedup.KeyOf(id)
			if first, ok := cw.lookup(key, now); ok {
				pos[k] = first
				if dup != nil {
					dup[k] = true
				}
				n = k + 1
				continue
			}
		}
		if dup != nil {
			dup[k] = false
		}
		i, err := s.buf.AppendExt(p, x, now)
		if err != nil {
			s.sealLocked()
			n = k
			break
		}
		pos[k] = s.first + uint64(i)
		if len(id) > 0 {
			cw.add(s.h, key, pos[k], now)
		}
		stored++
		bytes += len(p)
		n = k + 1
	}
	if cw != nil {
		cw.next = s.first + uint64(s.buf.Written())
		cw.mu.Unlock()
	}
	return n, stored, bytes
}

// Fill appends to a copy (NewCopy) the records of its original from index
// start on: next returns record i's body, whether it is extended, and its
// stamp. Records it holds already (a re-read after a reconnect) are
// skipped; seal ends the copy. Wakers are not told: a copy's readers are
// the gateway's, woken by it.
func (s *Streamlet) Fill(start, count int, next func(i int) ([]byte, bool, int64), seal bool) {
	if cp := s.copyState(); cp != nil {
		cp.lastFill.Store(s.h.clock().UnixNano())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.buf.Len()
	for i := 0; i < count; i++ {
		p, ext, stamp := next(i)
		if start+i < n || s.buf.Sealed() {
			continue
		}
		if start+i > s.buf.Len() {
			break // a hole: cannot happen on one ordered feed
		}
		if _, err := s.buf.AppendExt(p, ext, stamp); err != nil {
			s.sealLocked()
		}
	}
	if seal {
		s.sealLocked()
	}
}

// End seals a copy whose feed cannot continue.
func (s *Streamlet) End() {
	s.mu.Lock()
	s.sealLocked()
	s.mu.Unlock()
}

// Break ends a copy whose feed broke (not ended by its host): if it was
// still open, BrokenAt reports when from then on.
func (s *Streamlet) Break() {
	s.mu.Lock()
	if !s.buf.Sealed() {
		if cp := s.copyState(); cp != nil {
			cp.brokenAt.Store(s.h.clock().UnixNano())
		}
	}
	s.sealLocked()
	s.mu.Unlock()
}

// BrokenAt is when a copy's feed broke (Break; unix ns, wall time), 0 if
// it did not.
func (s *Streamlet) BrokenAt() int64 {
	if cp := s.copyState(); cp != nil {
		return cp.brokenAt.Load()
	}
	return 0
}

// LastFill is when a copy was made or last filled (unix ns, the host's clock).
func (s *Streamlet) LastFill() int64 {
	if cp := s.copyState(); cp != nil {
		return cp.lastFill.Load()
	}
	return 0
}

// Drop seals and frees a copy; it reports whether it was still open.
func (s *Streamlet) Drop() (wasOpen bool) {
	s.mu.Lock()
	wasOpen = !s.buf.Sealed()
	s.buf.Seal()
	s.buf.Free()
	s.mu.Unlock()
	return wasOpen
}

// seal closes the streamlet for writes and returns its end position once
// every record it holds is durable (a single copy's are once written; a
// replicated one's once every follower confirmed them, when its buffer is
// sealed), waiting at most wait for that; past it, role.ErrNotDurable. A
// follower closes when its orderer's stream says so: asked alone, it waits
// for that the same way.
func (s *Streamlet) seal(wait time.Duration) (uint64, error) {
	s.sealNow()
	if s.buf.Sealed() {
		return s.first + uint64(s.buf.Len()), nil
	}
	w := &chanWaker{c: make(chan struct{}, 1)}
	s.AddWaker(w)
	defer s.RemoveWaker(w)
	t := time.NewTimer(wait)
	defer t.Stop()
	for !s.buf.Sealed() {
		select {
		case <-w.c:
		case <-t.C:
			return 0, fmt.Errorf("%w: streamlet %d: %d of %d records durable after %v", role.ErrNotDurable, s.id,
				s.buf.Len(), s.buf.Written(), wait)
		}
	}
	return s.first + uint64(s.buf.Len()), nil
}

// sealNow closes the streamlet for writes (a follower's replica closes
// when its orderer's stream says so: untouched) and tells the wakers.
func (s *Streamlet) sealNow() {
	s.mu.Lock()
	if r := s.repl; r == nil || r.orderer {
		s.sealLocked()
	}
	s.mu.Unlock()
	s.wake()
}

// chanWaker is a Waker that signals a channel of capacity one.
type chanWaker struct{ c chan struct{} }

func (w *chanWaker) Wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Backdate sets when a sealed streamlet counts as sealed (unix ns): fault
// tests use it to age a streamlet without waiting.
func (s *Streamlet) Backdate(sealedAt int64) { s.sealedAt.Store(sealedAt) }
