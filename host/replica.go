package host

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-rtm/sluice/role"
)

// Replicated streamlets (PROTOCOL.md 9.9, DESIGN.md "Replication").
//
// A streamlet hosted with a replica set of two or more nodes has one copy
// on each. The first replica, the orderer, takes the gateways' appends and
// assigns positions under the streamlet's lock, as a single copy does; its
// cluster layer forwards every record, in order, to each follower
// (Replicate) and reports what each follower holds (Acked). Records are
// written at once but become visible to readers only when every replica
// holds them (ringbuf held mode: the committed count is the minimum over
// the followers), so a reader never sees a record that recovery could
// drop, and acknowledging a publish waits for exactly that (Durable).
// A follower learns the committed count from the orderer's stream.
//
// Recovery (a replica died while the streamlet was open, or its orderer
// died before the followers had everything) is run by the channel's
// manager: Fence on every surviving replica (no further appends, forwarded
// or ordered), then SealAt with the smallest length they reported: every
// record any replica ever made visible is held by every replica, so it is
// kept; what lies beyond was never acknowledged and is dropped.

// replState is a replicated streamlet's replication state, guarded by the
// streamlet's mu.
type replState struct {
	// replicas is the replica set, orderer first.
	replicas []string
	orderer  bool // this node orders the appends (the first replica)
	// acks is, on the orderer, how many records each follower holds.
	acks map[string]int
	// closed: no more appends (sealed by the orderer, full, lease over, or
	// the orderer's SEALED notice on a follower). The buffer itself is
	// sealed once every record written is visible.
	closed bool
	// fenced: recovery fenced this replica; final: recovery sealed it at
	// its present length (SealAt).
	fenced, final bool
}

// Replication errors.
var (
	// ErrFenced: recovery fenced the replica; it takes no more appends.
	ErrFenced = errors.New("host: replica fenced by recovery")
	// ErrOutOfOrder: forwarded records do not continue the replica's
	// records, or come from another node than the streamlet's orderer.
	ErrOutOfOrder = errors.New("host: forwarded records out of order or not from the orderer")
	// ErrEpoch: forwarded records name another channel epoch.
	ErrEpoch = errors.New("host: forwarded records of another epoch")
	// ErrShortReplica: SealAt asked for more records than the replica holds.
	ErrShortReplica = errors.New("host: replica holds fewer records than the seal")
	// ErrSealedElsewhere (wrapping role.ErrSealedElsewhere): SealAt asked
	// for another length than the one an
	// earlier recovery sealed the replica at.
	ErrSealedElsewhere = fmt.Errorf("host: %w by an earlier recovery", role.ErrSealedElsewhere)
)

// SetReplicationHooks installs the replication callbacks; call before the
// host is used. onOrder is called when this node starts ordering a
// replicated streamlet (after HostStreamlet; the cluster layer starts
// forwarding it); onCommit when records of a replicated streamlet became
// visible (the engine wakes the node's readers). Both run with no lock
// held and must not block.
func (h *Host) SetReplicationHooks(onOrder, onCommit func(*Streamlet)) {
	h.onOrder, h.onCommit = onOrder, onCommit
}

// Replicated reports whether the streamlet has several replicas (fixed at
// creation). Its records then become visible only when every replica holds
// them; acknowledge an append once Durable covers it.
func (s *Streamlet) Replicated() bool { return s.repl != nil }

// Orderer reports whether this node orders the replicated streamlet.
func (s *Streamlet) Orderer() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repl != nil && s.repl.orderer
}

// Durable reports how many records every replica holds (the visible
// count: Buf().Len()) and whether that count is final: the streamlet is
// sealed and no more of its records will ever become durable. A single
// copy's records are durable once appended. Any goroutine.
func (s *Streamlet) Durable() (n int, final bool) {
	sealed := s.buf.Sealed() // before Len: once sealed, Len is final
	return s.buf.Len(), sealed
}

// Acked records, on the orderer, that follower holds held records, and
// makes the records every follower holds visible. Readers and wakers are
// told when the visible count grew. It reports whether the follower is
// still one of the streamlet's replicas.
func (s *Streamlet) Acked(follower string, held int) bool {
	s.mu.Lock()
	r := s.repl
	if r == nil || !r.orderer || !slices.Contains(r.replicas[1:], follower) {
		s.mu.Unlock()
		return false
	}
	if r.acks == nil {
		r.acks = make(map[string]int, len(r.replicas)-1)
	}
	if held > r.acks[follower] {
		r.acks[follower] = min(held, s.buf.Written())
	}
	grew := !r.final && s.commitLocked(s.minAckLocked())
	s.mu.Unlock()
	if grew {
		s.committed()
	}
	return true
}

// minAckLocked is the number of records every follower holds.
func (s *Streamlet) minAckLocked() int {
	n := s.buf.Written()
	for _, f := range s.repl.replicas[1:] {
		n = min(n, s.repl.acks[f])
	}
	return n
}

// commitLocked makes records [0, n) visible and, once a closed
// streamlet's records all are, seals the buffer. It reports whether the
// visible count grew.
func (s *Streamlet) commitLocked(n int) bool {
	before := s.buf.Len()
	s.buf.Commit(n)
	if s.repl.closed && s.buf.Len() == s.buf.Written() {
		s.sealLocked()
	}
	return s.buf.Len() > before || s.buf.Sealed()
}

// committed tells readers that records became visible (no lock held).
func (s *Streamlet) committed() {
	s.wake()
	if s.h.onCommit != nil {
		s.h.onCommit(s)
	}
}

// ReplicaRecord returns forwarded record i: its body, whether it is an
// extended record, and its stamp.
type ReplicaRecord func(i int) (p []byte, ext bool, stamp int64)

// Replicate appends, on a follower, count records that the orderer from
// forwarded, starting at index start: records the follower holds already
// (a resend after a reconnect) are skipped, a start past its records is
// refused (ErrOutOfOrder; held tells the orderer where to resume). commit
// is the orderer's visible count: the follower makes as much of it visible
// as it holds. sealed (the orderer's SEALED notice, sent once all its
// records are visible) closes the streamlet at start+count. It returns how
// many records the follower holds.
func (s *Streamlet) Replicate(from string, epoch uint64, start, count, commit int, sealed bool, rec ReplicaRecord) (held int, err error) {
	s.mu.Lock()
	r := s.repl
	held = s.buf.Written()
	switch {
	case epoch != s.epoch:
		err = fmt.Errorf("%w: %d, streamlet %d is of epoch %d", ErrEpoch, epoch, s.id, s.epoch)
	case r == nil || r.orderer || r.replicas[0] != from:
		err = fmt.Errorf("%w: streamlet %d is not ordered by %s", ErrOutOfOrder, s.id, from)
	case r.fenced || r.final:
		err = fmt.Errorf("%w: streamlet %d", ErrFenced, s.id)
	case start > held:
		err = fmt.Errorf("%w: records from %d forwarded, streamlet %d holds %d", ErrOutOfOrder, start, s.id, held)
	}
	if err != nil {
		s.mu.Unlock()
		return held, err
	}
	appended := 0
	for i := held - start; i < count; i++ {
		p, ext, stamp := rec(i)
		if _, e := s.buf.AppendExt(p, ext, stamp); e != nil {
			// Over this replica's limits: the orderer's are the same, so
			// only a misconfigured cluster gets here.
			err = fmt.Errorf("host: streamlet %d refused forwarded record %d: %w", s.id, start+i, e)
			break
		}
		appended++
	}
	held = s.buf.Written()
	if sealed && err == nil && held == start+count {
		r.closed = true
	}
	grew := s.commitLocked(min(commit, held))
	s.mu.Unlock()
	if appended > 0 {
		s.h.appended.Add(uint64(appended))
	}
	if grew {
		s.committed()
	}
	return held, err
}

// Fence stops the replica from taking appends, forwarded or ordered, for
// good (recovery, run by the channel's manager), and reports how many
// records it holds and whether an earlier recovery sealed it already
// (final: held is then the streamlet's content).
func (s *Streamlet) Fence() (held int, final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.repl == nil {
		// A single copy: sealing is its fence.
		s.sealLocked()
		return s.buf.Written(), false
	}
	s.repl.fenced = true
	return s.buf.Written(), s.repl.final
}

// unwindow takes the records [n, held) that recovery dropped out of the
// channel's dedup window (an orderer added their ids as it appended
// them): a retry of such an id is a new message, and the positions are
// given to other messages by the next streamlet. A window that had seen
// the channel up to the dropped end has seen it only up to n now, so a
// later streamlet here reads what follows from where it was written.
// s.mu is held.
func (s *Streamlet) unwindow(n, held int) {
	cw := s.dd
	if cw == nil || held <= n {
		return
	}
	from, to := s.first+uint64(n), s.first+uint64(held)
	cw.mu.Lock()
	if cw.w != nil {
		cw.w.Forget(from, to)
	}
	if cw.next > from && cw.next <= to {
		cw.next = from
	}
	cw.mu.Unlock()
}

// SealAt ends a fenced replica at n records: records beyond are dropped
// (never visible: every replica holds what any replica made visible), the
// first n become visible, and keep, the surviving replicas, becomes the
// replica set. It fails with ErrShortReplica when the replica holds fewer
// than n records and with ErrSealedElsewhere when an earlier recovery
// sealed it at another length. Readers and wakers are told.
func (s *Streamlet) SealAt(n int, keep []string) error {
	s.mu.Lock()
	r := s.repl
	if r == nil {
		held := s.buf.Written()
		s.mu.Unlock()
		if held != n {
			return fmt.Errorf("%w: single copy of streamlet %d holds %d, asked %d", ErrSealedElsewhere, s.id, held, n)
		}
		return nil
	}
	held := s.buf.Written()
	switch {
	case r.final && held != n:
		s.mu.Unlock()
		return fmt.Errorf("%w: streamlet %d holds %d, asked %d", ErrSealedElsewhere, s.id, held, n)
	case held < n:
		s.mu.Unlock()
		return fmt.Errorf("%w: streamlet %d holds %d, asked %d", ErrShortReplica, s.id, held, n)
	case n < s.buf.Len():
		s.mu.Unlock()
		return fmt.Errorf("%w: streamlet %d shows %d records, asked %d", ErrSealedElsewhere, s.id, s.buf.Len(), n)
	}
	r.fenced, r.final, r.closed = true, true, true
	if len(keep) > 0 {
		r.replicas = append([]string(nil), keep...)
	}
	s.buf.Truncate(n)
	s.unwindow(n, held)
	s.commitLocked(n)
	s.mu.Unlock()
	s.committed()
	return nil
}
