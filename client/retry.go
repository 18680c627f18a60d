package client

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Idempotent publishing (WithIdempotence): automatic message ids and the
// resending of publishes whose connection was lost before their PUBACK.

// producerIDLen and autoIDLen: an automatic message id is the Conn's random
// producer id followed by a big-endian u64 sequence number.
const (
	producerIDLen = 12
	autoIDLen     = producerIDLen + 8
)

// newProducerID returns a random producer id.
func newProducerID() [producerIDLen]byte {
	var p [producerIDLen]byte
	_, _ = rand.Read(p[:]) // crypto/rand.Read does not fail
	return p
}

// autoID appends the next automatic message id to dst. The caller holds
// the session's mu, so ids are handed out in the order frames are queued.
func (c *Conn) autoID(dst []byte) []byte {
	dst = append(dst, c.producer[:]...)
	return binary.BigEndian.AppendUint64(dst, c.seq.Add(1))
}

// retryRec is a copy of a PUBLISH frame that carries a message id, kept
// until its outcome is known so that it can be sent again.
type retryRec struct {
	frame []byte
	first time.Time // when it was first sent
	until time.Time // resend only before this
}

// retryLimit is how long after its first send a publish with a message id
// may still be sent again to the server that sent welcome: the Conn's
// retry time, and never more than nine tenths of the dedup window the
// server announced (PROTOCOL.md 2.2), so that a resend still meets the
// first copy's id there: one sent after the window would be stored again.
// The tenth left covers the time a resend travels. A server that announces
// no window (0) leaves the retry time alone.
func retryLimit(retryFor time.Duration, welcome wire.Welcome) time.Duration {
	if w := welcome.DedupWindow; w > 0 {
		return min(retryFor, w-w/10)
	}
	return retryFor
}

var retryRecs = sync.Pool{New: func() any { return new(retryRec) }}

func getRetry(frame []byte, first time.Time, limit time.Duration) *retryRec {
	r := retryRecs.Get().(*retryRec)
	if cap(r.frame) < len(frame) {
		// Round up, so that a recycled record fits frames of similar size.
		r.frame = make([]byte, 0, max(256, 1<<bits.Len(uint(len(frame)))))
	}
	r.frame = append(r.frame[:0], frame...)
	r.first, r.until = first, first.Add(limit)
	return r
}

// putRetry recycles r; frames over 64 KiB are left to the GC.
func putRetry(r *retryRec) {
	if cap(r.frame) > 64<<10 {
		r.frame = nil
	}
	retryRecs.Put(r)
}

// queueRetry keeps pe, whose session was lost before its PUBACK, for the
// next session. It reports false when pe must fail instead: the Conn is
// closed or does not reconnect, or pe's retry time is over.
func (c *Conn) queueRetry(pe pendEntry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load() == stateClosed || !c.opts.reconnect || !time.Now().Before(pe.rt.until) {
		return false
	}
	c.retryQ = append(c.retryQ, pe)
	return true
}

// resendLocked queues the kept publishes on s, a session not yet visible
// to publishers, in their original order; publishes whose retry time is
// over are returned for the caller to fail (outside c.mu). c.mu is held.
func (c *Conn) resendLocked(s *session) (expired []pendEntry) {
	if len(c.retryQ) == 0 {
		return nil
	}
	now := time.Now()
	keep := c.retryQ[:0]
	s.mu.Lock()
	for _, pe := range c.retryQ {
		switch {
		case !now.Before(pe.rt.until), !now.Before(pe.rt.first.Add(retryLimit(c.opts.idempotence, s.welcome))):
			// Its retry time is over, or the window of the server
			// reached now is too short for it to be deduplicated.
			expired = append(expired, pe)
		case s.dead:
			keep = append(keep, pe) // s failed already: wait for the next one
		default:
			id := c.nextReq()
			binary.BigEndian.PutUint32(pe.rt.frame[6:wire.HeaderLen], id)
			s.pending.push(id, pe)
			s.wbuf = append(s.wbuf, pe.rt.frame...)
			c.resent.Add(1)
		}
	}
	s.mu.Unlock()
	clear(c.retryQ[len(keep):])
	c.retryQ = keep
	s.kick()
	return expired
}

// takeRetriesLocked empties the retry queue; c.mu is held.
func (c *Conn) takeRetriesLocked() []pendEntry {
	q := c.retryQ
	c.retryQ = nil
	return q
}

// Resent returns how many publishes WithIdempotence has sent again after a
// lost connection (each counts once per resend). Safe for concurrent use.
func (c *Conn) Resent() uint64 { return c.resent.Load() }
