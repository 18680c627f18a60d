// Package host is the streamlet-host role: it keeps streamlets (ring
// buffers of one channel portion each) in memory, serves appends under a
// write grant and reads by position, seals and frees them, and accounts
// their memory for the node's retention budget (retention.go). It knows
// nothing of connections: whoever reads a streamlet from another goroutine
// registers a Waker and is told, by callback, when it changed.
//
// The same Streamlet type also serves as a gateway's copy of a streamlet
// hosted by another node (Host.NewCopy), filled from that node's feed.
package host

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/dedup"
	"github.com/sluice-rtm/sluice/internal/mapshrink"
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

// Host is the in-process streamlet host: a map of streamlet id to
// streamlet. Safe for concurrent use.
//
// Lock order: Host.mu before Streamlet.mu (List, Footprint); Host.wakersMu
// is taken alone.
type Host struct {
	node   string
	clock  func() time.Time
	nextID atomic.Uint64
	// idBase makes ids unique across the cluster: its top 24 bits are
	// random per process, the counter fills the low 40.
	idBase uint64
	seals  atomic.Uint64 // numbers seals (Streamlet.sealSeq)

	mu         sync.RWMutex
	streamlets map[uint64]*Streamlet
	// barred: ids sealed before they were hosted (Seal), never hosted
	// then; barredOrder evicts the oldest past maxBarred. Under mu.
	barred      map[uint64]struct{}
	barredOrder []uint64
	// streamletsPeak lets Free give back the map's memory once it has
	// shrunk (package mapshrink); under mu.
	streamletsPeak mapshrink.Peak

	hosted atomic.Int64 // streamlets currently hosted (load report)
	// draining: SetDraining ran; no new streamlets (checked under mu by
	// HostStreamlet). adoptions counts the copies adopted (Adopt).
	draining  atomic.Bool
	adoptions atomic.Uint64
	// retained sums the footprints of this node's history: its hosted
	// streamlets and its gateway copies (ringbuf.Buffer.Account); the
	// retention budget reads it (retention.go).
	retained atomic.Int64
	// appended counts messages and payload bytes appended (load report).
	appended, appendedBytes atomic.Uint64

	// Deduplication (dedup.go): the window and id bound, the channels'
	// windows (under mu) and counters.
	ddWindow                      time.Duration
	ddMax                         int
	wmu                           sync.Mutex // guards windows and byChan; taken inside Streamlet.mu, never the reverse
	wakersMu                      sync.Mutex // replaces a streamlet's side and wakers (AddWaker, RemoveWaker); taken alone
	windows                       map[string]*chanWindow
	byChan                        map[string][]*Streamlet // hosted streamlets by channel
	byChanPeak, windowsPeak       mapshrink.Peak          // under wmu
	ddDups, ddRebuilds, ddPartial atomic.Uint64
	ddFetched                     atomic.Uint64
	idSrc                         IDSource      // other nodes' ids (SetIDSource); nil on a single node
	idBudget                      time.Duration // how long a rebuild may read other nodes

	// onOrder and onCommit are the replication hooks (replica.go), set
	// before the host is used.
	onOrder, onCommit func(*Streamlet)

	// sealWait bounds how long Seal waits for a replicated streamlet's
	// records to become durable (SetSealWait).
	sealWait atomic.Int64
}

// New returns an empty host for node; clock stamps seals.
func New(node string, clock func() time.Time) *Host {
	h := &Host{node: node, clock: clock, streamlets: make(map[uint64]*Streamlet),
		idBase: (rand.Uint64() | 1) << 40, windows: make(map[string]*chanWindow),
		byChan: make(map[string][]*Streamlet)}
	h.sealWait.Store(int64(time.Second))
	return h
}

// Node returns the name of the node the host runs on.
func (h *Host) Node() string { return h.node }

// NewID returns a fresh streamlet id, unique in the cluster with
// overwhelming probability (24 random bits per process, 40-bit counter).
func (h *Host) NewID() uint64 { return h.idBase | h.nextID.Add(1)&(1<<40-1) }

// Load is the host's load report.
type Load struct {
	Hosted, Created         int64  // streamlets hosted now, ids handed out
	Retained                int64  // bytes of history (hosted and copies)
	Appended, AppendedBytes uint64 // messages and payload bytes appended
	Adopted                 uint64 // copies of other nodes' streamlets adopted (Adopt)
}

// Load returns the host's counters.
func (h *Host) Load() Load {
	return Load{Hosted: h.hosted.Load(), Created: int64(h.nextID.Load()), Retained: h.retained.Load(),
		Appended: h.appended.Load(), AppendedBytes: h.appendedBytes.Load(), Adopted: h.adoptions.Load()}
}

// ErrDraining: the node is draining (SetDraining) and hosts no new
// streamlets; the manager chooses another host.
var ErrDraining = errors.New("host: the node is draining and hosts no new streamlets")

// ErrBarred: HostStreamlet of an id the host was asked to seal before it
// held it (Seal).
var ErrBarred = errors.New("host: streamlet barred")

// HostStreamlet hosts a new streamlet under grant g. When g.Prior lists
// earlier streamlets of the channel and this host's dedup window has not
// seen them, their message ids are read first (from other nodes over the
// IDSource, within its budget), so that the streamlet's first idempotent
// append is decided on the whole window (dedup.go).
// A draining host refuses (ErrDraining).
func (h *Host) HostStreamlet(g role.Grant) error {
	if h.draining.Load() {
		return ErrDraining
	}
	if h.isBarred(g.Streamlet) {
		return errBarred(g)
	}
	s := &Streamlet{
		h: h, id: g.Streamlet, channel: g.Channel, first: g.First, leaseEnd: g.LeaseEnd,
		buf: ringbuf.New(g.LimitMsgs, g.LimitSize), epoch: g.Epoch, limitMsgs: int32(min(g.LimitMsgs, math.MaxInt32)),
	}
	if len(g.Replicas) > 1 {
		s.repl = &replState{replicas: append([]string(nil), g.Replicas...), orderer: g.Replicas[0] == h.node}
		s.buf.SetHeld()
	}
	s.buf.Account(&h.retained)
	if h.inherit(s); s.dd == nil && len(g.Prior) > 0 && h.Streamlet(g.Streamlet) == nil {
		h.complete(s, g.Prior) // may read other nodes: no lock held
	}
	h.mu.Lock()
	if old := h.streamlets[g.Streamlet]; old != nil {
		h.mu.Unlock()
		// A retried request: hosted already. A manager that had to pick
		// another replica retries with the new set, which an empty
		// streamlet takes. The node's role may change with the set: a
		// follower of the first try may order the retry's, and must then
		// forward to its followers (onOrder, as for a streamlet hosted
		// anew).
		old.mu.Lock()
		order := false
		if old.buf.Written() == 0 && old.first == g.First && (old.repl == nil) == (s.repl == nil) {
			order = s.repl != nil && s.repl.orderer && !slices.Equal(old.repl.replicas, s.repl.replicas)
			old.repl = s.repl
		}
		old.mu.Unlock()
		if order && h.onOrder != nil {
			h.onOrder(old)
		}
		return nil
	}
	if h.draining.Load() {
		// SetDraining ran meanwhile: its SealOpen may have missed this one.
		h.mu.Unlock()
		return ErrDraining
	}
	if _, barred := h.barred[g.Streamlet]; barred {
		// Sealed meanwhile (Seal looks the id up and bars it under mu).
		h.mu.Unlock()
		return errBarred(g)
	}
	h.streamlets[g.Streamlet] = s
	h.mu.Unlock()
	h.index(s)
	h.hosted.Add(1)
	if s.repl != nil && s.repl.orderer && h.onOrder != nil {
		h.onOrder(s)
	}
	return nil
}

// SetDraining makes the host refuse new streamlets (HostStreamlet answers
// ErrDraining) and seals every open one, so that their writers ask their
// managers for a streamlet elsewhere. It returns how many it sealed.
func (h *Host) SetDraining() int {
	h.mu.Lock()
	h.draining.Store(true) // under mu: a HostStreamlet either sees it or is in the map below
	open := make([]*Streamlet, 0, len(h.streamlets))
	for _, s := range h.streamlets {
		open = append(open, s)
	}
	h.mu.Unlock()
	n := 0
	for _, s := range open {
		if s.buf.Sealed() {
			continue
		}
		if r := s.Replicas(); len(r) > 1 && r[0] != h.node {
			// A follower's replica: its orderer (and the channel's
			// manager, which sees this node drain) seals the streamlet
			// on every replica; sealing it here alone would stall the
			// orderer's acknowledgements.
			continue
		}
		s.sealNow()
		n++
	}
	return n
}

// Draining reports whether SetDraining ran.
func (h *Host) Draining() bool { return h.draining.Load() }

// Adopt makes s, a complete copy made by this host (NewCopy) of a sealed
// streamlet another node holds, a streamlet this host holds: List reports
// it with meta's epoch, lease, message limit and replica set
// (the holder's own report of it, with the set as the manager will list
// it), Streamlet finds it, and the manager may list this node as a
// holder. It fails when s is not sealed, holds a different
// number of records than meta, or the host holds the id already.
func (h *Host) Adopt(s *Streamlet, meta role.Hosted) error {
	cp := s.copyState()
	if s.h != h || cp == nil || cp.adopted.Load() {
		return fmt.Errorf("host: streamlet %d is not a copy of this host's", s.id)
	}
	s.mu.Lock()
	n, sealed := s.buf.Len(), s.buf.Sealed()
	if !sealed || uint32(n) != meta.Len || s.first != meta.First {
		s.mu.Unlock()
		return fmt.Errorf("host: copy of streamlet %d is not complete (%d records from %d, sealed %v; the holder reports %d from %d)",
			s.id, n, s.first, sealed, meta.Len, meta.First)
	}
	s.epoch, s.leaseEnd = meta.Epoch, meta.LeaseEnd
	if len(meta.Replicas) > 1 {
		// A complete copy of a closed streamlet: final, like a replica
		// recovery sealed (it takes no appends, forwarded or ordered).
		s.repl = &replState{replicas: append([]string(nil), meta.Replicas...), closed: true, fenced: true, final: true}
	}
	if meta.LimitMsgs > 0 {
		s.limitMsgs = int32(min(meta.LimitMsgs, math.MaxInt32))
	}
	s.mu.Unlock()
	h.mu.Lock()
	if h.streamlets[s.id] != nil {
		h.mu.Unlock()
		return fmt.Errorf("host: streamlet %d is held already", s.id)
	}
	cp.adopted.Store(true)
	h.streamlets[s.id] = s
	h.mu.Unlock()
	h.index(s)
	h.hosted.Add(1)
	h.adoptions.Add(1)
	return nil
}

// Channels returns the channels of which this host holds streamlets.
func (h *Host) Channels() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	seen := make(map[string]bool)
	var out []string
	for _, s := range h.streamlets {
		if !seen[s.channel] {
			seen[s.channel] = true
			out = append(out, s.channel)
		}
	}
	return out
}

// NewCopy returns a gateway's copy of streamlet id of channel, hosted by
// node copyOf, with the channel's limits. The copy is not hosted (Streamlet
// does not find it): the caller keeps it, fills it (Fill) and drops it.
// Its memory counts towards the node's retained bytes.
func (h *Host) NewCopy(id uint64, channel string, first uint64, l role.Limits, copyOf string) *Streamlet {
	s := &Streamlet{h: h, id: id, channel: channel, first: first, leaseEnd: math.MaxInt64,
		buf: ringbuf.New(l.Msgs, l.Size), limitMsgs: int32(min(l.Msgs, math.MaxInt32))}
	sd := &streamletSide{isCopy: true, of: copyOf}
	sd.lastFill.Store(h.clock().UnixNano())
	s.side.Store(sd)
	s.buf.Account(&h.retained)
	return s
}

// List reports the streamlets of channel this host holds.
func (h *Host) List(channel string) ([]role.Hosted, error) {
	h.mu.RLock()
	var out []role.Hosted
	for _, s := range h.streamlets {
		if s.channel == channel {
			out = append(out, s.hosted(h.node))
		}
	}
	h.mu.RUnlock()
	return out, nil
}

// hosted describes s for List.
func (s *Streamlet) hosted(node string) role.Hosted {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := role.Hosted{ID: s.id, Epoch: s.epoch, First: s.first, Host: node, Len: uint32(s.buf.Written()),
		Sealed: s.buf.Sealed(), LeaseEnd: s.leaseEnd,
		LimitMsgs: uint32(s.limitMsgs)}
	if r := s.repl; r != nil {
		h.Replicas = r.replicas
		h.Sealed = h.Sealed || r.closed
		h.Fenced, h.Final = r.fenced, r.final
	}
	return h
}

// Streamlet returns hosted streamlet id, nil if the host does not hold it.
func (h *Host) Streamlet(id uint64) *Streamlet {
	h.mu.RLock()
	s := h.streamlets[id]
	h.mu.RUnlock()
	return s
}

// Seal closes streamlet id for writes and returns its end once durable
// (see role.Host.Seal), waiting at most SetSealWait's bound.
//
// Sealing an id the host does not hold bars it: HostStreamlet refuses it
// from then on (ErrBarred). A manager that closes a committed streamlet
// its host never got (its opener died between the commit and the host
// call) thus keeps a late host call from making it writable here.
func (h *Host) Seal(id uint64) (uint64, error) {
	s := h.lookupOrBar(id)
	if s == nil {
		return 0, role.ErrUnknownStreamlet
	}
	return s.seal(time.Duration(h.sealWait.Load()))
}

func (h *Host) isBarred(id uint64) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	_, barred := h.barred[id]
	return barred
}

func errBarred(g role.Grant) error {
	return fmt.Errorf("%w: streamlet %d of %q was sealed here before it was hosted (its opener gave it up)",
		ErrBarred, g.Streamlet, g.Channel)
}

// SetSealWait sets how long Seal waits for a replicated streamlet's
// records to become durable (default 1 s); a cluster sets it below its
// request timeout.
func (h *Host) SetSealWait(d time.Duration) { h.sealWait.Store(int64(d)) }

// Fence fences this replica of streamlet id (see role.Host.Fence).
func (h *Host) Fence(id uint64) (role.Tail, error) {
	s := h.Streamlet(id)
	if s == nil {
		return role.Tail{}, role.ErrUnknownStreamlet
	}
	held, final := s.Fence()
	return role.Tail{Held: uint32(held), Final: final}, nil
}

// SealAt ends this replica of streamlet id at n records (see
// role.Host.SealAt).
func (h *Host) SealAt(id uint64, n uint32, keep []string) error {
	s := h.Streamlet(id)
	if s == nil {
		return role.ErrUnknownStreamlet
	}
	return s.SealAt(int(n), keep)
}

// maxBarred bounds the barred ids a host keeps (Seal): the bar matters
// only while another manager may still be opening the streamlet, a few
// round trips.
const maxBarred = 4096

// lookupOrBar returns hosted streamlet id, or, when the host does not hold
// it, records that id must never be hosted here, in one critical section
// with HostStreamlet's insertion: a seal and a late host call of one id
// see each other.
func (h *Host) lookupOrBar(id uint64) *Streamlet {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.streamlets[id]; s != nil {
		return s
	}
	if h.barred == nil {
		h.barred = make(map[uint64]struct{})
	}
	if _, ok := h.barred[id]; ok {
		return nil
	}
	if len(h.barredOrder) >= maxBarred {
		delete(h.barred, h.barredOrder[0])
		h.barredOrder = h.barredOrder[1:]
	}
	h.barred[id] = struct{}{}
	h.barredOrder = append(h.barredOrder, id)
	return nil
}

// Len reports how many messages streamlet id holds.
func (h *Host) Len(id uint64) (int, bool) {
	s := h.Streamlet(id)
	if s == nil {
		return 0, false
	}
	return s.buf.Len(), true
}

// Free releases streamlet id's memory; readers holding a buffer reference
// finish first (ringbuf), wakers are told.
func (h *Host) Free(id uint64) {
	h.mu.Lock()
	s := h.streamlets[id]
	if s != nil {
		h.streamlets = mapshrink.Delete(h.streamlets, id, &h.streamletsPeak)
	}
	h.mu.Unlock()
	if s != nil {
		h.unindex(s)
		s.mu.Lock() // Free must not run concurrently with a writer
		s.buf.Seal()
		s.buf.Free()
		s.mu.Unlock()
		s.wake() // readers learn it is gone
		h.hosted.Add(-1)
	}
}

// IdleBefore returns, by channel, the hosted streamlets that took no
// write for longer than age at now (unix ns): sealed that long ago, or
// open with a lease that ended that long ago (the orphan sweep's
// candidates).
func (h *Host) IdleBefore(now int64, age time.Duration) map[string][]uint64 {
	old := make(map[string][]uint64)
	h.mu.RLock()
	defer h.mu.RUnlock()
	for id, s := range h.streamlets {
		at := s.sealedAt.Load()
		if at == 0 {
			at = s.leaseEnd
		}
		if now-at > int64(age) {
			old[s.channel] = append(old[s.channel], id)
		}
	}
	return old
}

var _ role.Host = (*Host)(nil)

// Backdate sets when a sealed streamlet counts as sealed (unix ns): fault
// tests use it to age a streamlet without waiting.
func (s *Streamlet) Backdate(sealedAt int64) { s.sealedAt.Store(sealedAt) }
