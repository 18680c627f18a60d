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

	"github.com/sluice-rtm/sluice/internal/mapshrink"
	"github.com/sluice-rtm/sluice/ringbuf"
	"github.com/sluice-rtm/sluice/role"
)

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
