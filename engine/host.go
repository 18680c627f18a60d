package engine

import (
	"sync"
	"sync/atomic"

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
}

// append adds one message stamped now (unix ns) and returns its position,
// or errStreamletClosed when the streamlet is sealed, full or past its
// lease; in the last two cases it seals itself first, so that the end
// position it reports is final.
func (s *streamlet) append(p []byte, now int64) (uint64, error) {
	s.mu.Lock()
	if s.buf.Sealed() {
		s.mu.Unlock()
		return 0, errStreamletClosed
	}
	if now >= s.leaseEnd {
		s.buf.Seal()
		s.mu.Unlock()
		return 0, errStreamletClosed
	}
	i, err := s.buf.Append(p, now)
	if err != nil {
		s.buf.Seal()
		s.mu.Unlock()
		return 0, errStreamletClosed
	}
	s.mu.Unlock()
	return s.first + uint64(i), nil
}

// appendBatch appends payloads in order under one lock acquisition and
// stores each position in pos. It returns how many were appended; fewer
// than len(payloads) means the streamlet closed (and is now sealed).
func (s *streamlet) appendBatch(payloads [][]byte, pos []uint64, now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf.Sealed() {
		return 0
	}
	if now >= s.leaseEnd {
		s.buf.Seal()
		return 0
	}
	for k, p := range payloads {
		i, err := s.buf.Append(p, now)
		if err != nil {
			s.buf.Seal()
			return k
		}
		pos[k] = s.first + uint64(i)
	}
	return len(payloads)
}

// seal closes the streamlet for writes and returns its end position.
func (s *streamlet) seal() uint64 {
	s.mu.Lock()
	s.buf.Seal()
	n := s.buf.Len()
	s.mu.Unlock()
	return s.first + uint64(n)
}

// localHost is the in-process Host: a map of streamlet id to streamlet.
type localHost struct {
	node   string
	nextID atomic.Uint64

	mu         sync.RWMutex
	streamlets map[uint64]*streamlet

	hosted atomic.Int64 // streamlets currently hosted (load report)
}

func newLocalHost(node string) *localHost {
	return &localHost{node: node, streamlets: make(map[uint64]*streamlet)}
}

// newID returns a fresh streamlet id for this host.
func (h *localHost) newID() uint64 { return h.nextID.Add(1) }

func (h *localHost) HostStreamlet(g Grant) error {
	s := &streamlet{
		id: g.Streamlet, channel: g.Channel, first: g.First, leaseEnd: g.LeaseEnd,
		buf: ringbuf.New(g.LimitMsgs, g.LimitSize),
	}
	h.mu.Lock()
	h.streamlets[g.Streamlet] = s
	h.mu.Unlock()
	h.hosted.Add(1)
	return nil
}

func (h *localHost) Streamlet(id uint64) *streamlet {
	h.mu.RLock()
	s := h.streamlets[id]
	h.mu.RUnlock()
	return s
}

func (h *localHost) Seal(id uint64) (uint64, error) {
	s := h.Streamlet(id)
	if s == nil {
		return 0, errUnknownStreamlet
	}
	return s.seal(), nil
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
		h.hosted.Add(-1)
	}
}

var _ Host = (*localHost)(nil)
