package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/ringbuf"
)

// streamlet is one hosted channel portion: a ring buffer of messages whose
// first message has position first. Writers (any gateway loop holding the
// write grant) are serialised by mu; readers read buf lock-free, holding a
// buffer reference (buf.Acquire) while they use its bytes.
type streamlet struct {
	id       uint64
	channel  string
	first    uint64
	leaseEnd int64 // unix ns; appends at or after it seal the streamlet

	mu  sync.Mutex // serialises appends and Seal (the single writer)
	buf *ringbuf.Buffer

	// Cluster fields. epoch and limitMsgs are fixed at creation; succ and
	// succHost are guarded by mu.
	epoch     uint64
	limitMsgs int
	succ      uint64
	succHost  string
	// feeds are the remote gateways reading this streamlet (peer.go);
	// nfeeds lets the append path skip the lock when there are none.
	feedMu sync.Mutex
	feeds  []*feed
	nfeeds atomic.Int32
	// mirror: this is a gateway's copy of a streamlet hosted by node
	// mirrorOf (mirror.go); nil for hosted streamlets.
	mirror *mirrorState
	// sealSeq orders sealed streamlets by when they were sealed (from
	// sealCount; 0 while open): the retention budget frees the oldest
	// first (retention.go).
	sealSeq atomic.Uint64
	// sealedAt is when the buffer was sealed (unix ns, time.Now; 0 while
	// open): a gateway copy expires a TTL after it (mirror.go), and a
	// hosted streamlet sealed long ago that its manager no longer lists is
	// an orphan (retention.go, reapOrphans).
	sealedAt atomic.Int64
}

// sealCount numbers seals, node-wide.
var sealCount atomic.Uint64

// sealLocked seals the buffer and numbers the seal; s.mu is held.
func (s *streamlet) sealLocked() {
	if !s.buf.Sealed() {
		s.buf.Seal()
		s.sealSeq.Store(sealCount.Add(1))
		s.sealedAt.Store(time.Now().UnixNano())
	}
}

// append adds one message stamped now (unix ns) and returns its position,
// or errStreamletClosed when the streamlet is sealed, full or past its
// lease; in the last two cases it seals itself first, so that the end
// position it reports is final. Remote readers are woken.
func (s *streamlet) append(p []byte, now int64) (uint64, error) {
	var pos [1]uint64
	if s.appendBatch([][]byte{p}, pos[:], now) == 0 {
		return 0, errStreamletClosed
	}
	return pos[0], nil
}

// appendBatch appends payloads in order under one lock acquisition and
// stores each position in pos. It returns how many were appended; fewer
// than len(payloads) means the streamlet closed (and is now sealed).
// Remote readers are woken.
func (s *streamlet) appendBatch(payloads [][]byte, pos []uint64, now int64) int {
	n := s.appendLocked(payloads, pos, now)
	if s.nfeeds.Load() > 0 {
		s.wakeFeeds()
	}
	return n
}

func (s *streamlet) appendLocked(payloads [][]byte, pos []uint64, now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf.Sealed() {
		return 0
	}
	if now >= s.leaseEnd {
		s.sealLocked()
		return 0
	}
	for k, p := range payloads {
		i, err := s.buf.Append(p, now)
		if err != nil {
			s.sealLocked()
			return k
		}
		pos[k] = s.first + uint64(i)
	}
	return len(payloads)
}

// seal closes the streamlet for writes and returns its end position.
// A non-zero succ records the successor, unless another one is recorded
// already (errSuccessorTaken; see Host.Seal).
func (s *streamlet) seal(succ uint64, succHost string) (uint64, error) {
	s.mu.Lock()
	s.sealLocked()
	n := s.buf.Len()
	var err error
	switch {
	case succ == 0 || s.succ == succ:
	case s.succ != 0:
		err = fmt.Errorf("%w: streamlet %d is followed by %d on %s", errSuccessorTaken, s.id, s.succ, s.succHost)
	default:
		s.succ, s.succHost = succ, succHost
	}
	s.mu.Unlock()
	s.wakeFeeds()
	return s.first + uint64(n), err
}

// localHost is the in-process Host: a map of streamlet id to streamlet.
type localHost struct {
	node   string
	nextID atomic.Uint64
	// idBase makes ids unique across the cluster: its top 24 bits are
	// random per process, the counter fills the low 40.
	idBase uint64

	mu         sync.RWMutex
	streamlets map[uint64]*streamlet

	hosted atomic.Int64 // streamlets currently hosted (load report)
	// retained sums the footprints of this node's history: its hosted
	// streamlets and its gateway copies (ringbuf.Buffer.Account); the
	// retention budget reads it (retention.go).
	retained atomic.Int64
	// appended counts messages and payload bytes appended (load report).
	appended, appendedBytes atomic.Uint64
}

func newLocalHost(node string) *localHost {
	return &localHost{node: node, streamlets: make(map[uint64]*streamlet),
		idBase: (rand.Uint64() | 1) << 40}
}

// newID returns a fresh streamlet id, unique in the cluster with
// overwhelming probability (24 random bits per process, 40-bit counter).
func (h *localHost) newID() uint64 { return h.idBase | h.nextID.Add(1)&(1<<40-1) }

func (h *localHost) HostStreamlet(g Grant) error {
	s := &streamlet{
		id: g.Streamlet, channel: g.Channel, first: g.First, leaseEnd: g.LeaseEnd,
		buf: ringbuf.New(g.LimitMsgs, g.LimitSize), epoch: g.Epoch, limitMsgs: g.LimitMsgs,
	}
	s.buf.Account(&h.retained)
	h.mu.Lock()
	if h.streamlets[g.Streamlet] != nil {
		h.mu.Unlock()
		return nil // a retried request: hosted already
	}
	h.streamlets[g.Streamlet] = s
	h.mu.Unlock()
	h.hosted.Add(1)
	return nil
}

func (h *localHost) List(channel string) ([]Hosted, error) {
	h.mu.RLock()
	var out []Hosted
	for _, s := range h.streamlets {
		if s.channel == channel {
			out = append(out, s.hosted(h.node))
		}
	}
	h.mu.RUnlock()
	return out, nil
}

// hosted describes s for List.
func (s *streamlet) hosted(node string) Hosted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Hosted{ID: s.id, Epoch: s.epoch, First: s.first, Host: node, Len: uint32(s.buf.Len()),
		Sealed: s.buf.Sealed(), Succ: s.succ, SuccHost: s.succHost, LeaseEnd: s.leaseEnd,
		LimitMsgs: uint32(s.limitMsgs)}
}

func (h *localHost) Streamlet(id uint64) *streamlet {
	h.mu.RLock()
	s := h.streamlets[id]
	h.mu.RUnlock()
	return s
}

func (h *localHost) Seal(id, succ uint64, succHost string) (uint64, error) {
	s := h.Streamlet(id)
	if s == nil {
		return 0, errUnknownStreamlet
	}
	return s.seal(succ, succHost)
}

func (h *localHost) Len(id uint64) (int, bool) {
	s := h.Streamlet(id)
	if s == nil {
		return 0, false
	}
	return s.buf.Len(), true
}

func (h *localHost) Free(id uint64) {
	h.mu.Lock()
	s := h.streamlets[id]
	delete(h.streamlets, id)
	h.mu.Unlock()
	if s != nil {
		s.mu.Lock() // Free must not run concurrently with a writer
		s.buf.Seal()
		s.buf.Free()
		s.mu.Unlock()
		s.wakeFeeds() // readers learn it is gone
		h.hosted.Add(-1)
	}
}

var _ Host = (*localHost)(nil)
