package engine

import (
	"slices"
	"sync/atomic"
	"time"
)

// retention enforces Options.MaxRetained, the node's budget of message
// history in memory: the streamlets it hosts plus its gateway copies of
// streamlets hosted elsewhere (mirror.go). When the footprint of their
// buffers exceeds the budget, the oldest sealed ones are expired ahead of
// their TTL, oldest seal first, until the footprint fits:
//
//   - a hosted streamlet is expired by its channel's manager
//     (Manager.Expire, which frees the channel's list up to and including
//     it, so a later streamlet still never expires before an earlier one,
//     and readers of the range get GAP expired as after a TTL);
//   - a gateway copy is dropped (a reader that still needs it makes a new
//     copy from the host, if the host still has it).
//
// Open streamlets are never expired: with many channels publishing at once
// their open streamlets (each at most limit-size) may alone exceed the
// budget.
//
// The sweep runs on the server's ticker goroutine every retentionInterval,
// so the budget is exceeded by at most what is published meanwhile, plus
// the open streamlets. In a cluster the expiries, which are requests to
// other nodes, run on one goroutine of their own, one sweep at a time.
// The node's footprint is summed as buffers grow and are recycled
// (localHost.retained), so a check under the budget costs one atomic load;
// only a node over its budget walks its streamlets to choose what to expire.
type retention struct {
	busy    atomic.Bool  // a sweep's expiries are running
	reaping atomic.Bool  // reapOrphans is running
	expired atomic.Int64 // streamlets and copies expired ahead of their TTL (metrics)
}

// retentionInterval is how often the budget is checked.
const retentionInterval = 50 * time.Millisecond

// retained is one sealed streamlet or copy that the budget may expire.
type retained struct {
	seq uint64 // streamlet.sealSeq
	fp  int    // its footprint
	s   *streamlet
}

// footprint returns the bytes held by the host's streamlets and appends
// the sealed ones to *cands.
func (h *localHost) footprint(cands *[]retained) int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return sealedOf(h.streamlets, cands)
}

// footprint is localHost.footprint for the gateway copies.
func (ms *mirrorSet) footprint(cands *[]retained) int64 {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return sealedOf(ms.m, cands)
}

// sealedOf returns the bytes held by the streamlets of m and appends the
// sealed ones to *cands; the caller holds m's lock.
func sealedOf(m map[uint64]*streamlet, cands *[]retained) int64 {
	var total int64
	for _, s := range m {
		fp := s.buf.Footprint()
		total += int64(fp)
		if seq := s.sealSeq.Load(); seq != 0 && s.buf.Sealed() {
			*cands = append(*cands, retained{seq, fp, s})
		}
	}
	return total
}

// drop frees copy s now, unless it was replaced or dropped meanwhile.
func (ms *mirrorSet) drop(s *streamlet) bool {
	ms.mu.Lock()
	if ms.m[s.id] != s {
		ms.mu.Unlock()
		return false
	}
	delete(ms.m, s.id)
	ms.mu.Unlock()
	s.mu.Lock()
	s.buf.Seal()
	s.buf.Free()
	s.mu.Unlock()
	return true
}

// chooseExpired returns the candidates to expire, oldest seal first, so
// that total minus their footprints fits in budget (all of them when it
// cannot). It reorders cands.
func chooseExpired(total, budget int64, cands []retained) []retained {
	slices.SortFunc(cands, func(a, b retained) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	k := 0
	for k < len(cands) && total > budget {
		total -= int64(cands[k].fp)
		k++
	}
	return cands[:k]
}

// retentionSweep checks the budget and expires what exceeds it (see
// retention). Called by the ticker.
func (s *Server) retentionSweep() {
	budget := int64(s.opts.MaxRetained)
	if total := s.host.retained.Load(); budget <= 0 || total <= budget || !s.ret.busy.CompareAndSwap(false, true) {
		return
	}
	var cands []retained
	total := s.host.footprint(&cands) + s.mirrors.footprint(&cands)
	victims := chooseExpired(total, budget, cands)
	if s.cl == nil {
		s.expire(victims)
		return
	}
	go s.expire(victims)
}

// expire drops the victims that are gateway copies and asks the managers to
// expire the hosted ones: one request per channel, through its newest
// victim (the list is oldest first). It ends the sweep.
func (s *Server) expire(victims []retained) {
	defer s.ret.busy.Store(false)
	through := make(map[string]uint64)
	var order []string
	for _, v := range victims {
		if v.s.mirror != nil {
			if s.mirrors.drop(v.s) {
				s.ret.expired.Add(1)
			}
			continue
		}
		if _, ok := through[v.s.channel]; !ok {
			order = append(order, v.s.channel)
		}
		through[v.s.channel] = v.s.id
	}
	for _, ch := range order {
		if s.stopped.Load() {
			return
		}
		// A manager that does not list the streamlet as closed yet (the
		// host sealed it itself and no writer has asked for a new grant)
		// expires nothing; the next sweep asks again.
		if n, err := s.route.Expire(ch, through[ch]); err == nil {
			s.ret.expired.Add(int64(n))
		}
	}
}

// orphanGrace is how long after its latest possible expiry a sealed
// streamlet is kept before the host asks its manager whether it is still
// listed.
const orphanGrace = time.Minute

// reapOrphans frees hosted streamlets that their channel's manager no
// longer lists. In a cluster a manager expires a streamlet by sending FREE
// to its host; when that failed (the link was down), the host would keep
// the streamlet forever. So a sealed streamlet older than its channel's
// lease + TTL + the allowed clock skew + orphanGrace (by then every
// manager has expired it, even one that only learnt of the seal at the end
// of the lease) is looked up in the manager's list (INFO), and freed when
// the manager answers and does not list it. No answer, or a channel the
// manager does not know, frees nothing. A single node frees at expiry
// directly and never has orphans. Called by the ticker; the lookups run on
// one goroutine at a time.
func (s *Server) reapOrphans() {
	if s.cl == nil || !s.ret.reaping.CompareAndSwap(false, true) {
		return
	}
	now := time.Now().UnixNano()
	skew := s.cl.skew()
	old := make(map[string][]uint64)
	s.host.mu.RLock()
	for id, st := range s.host.streamlets {
		at := st.sealedAt.Load()
		l := s.opts.limitsFor(st.channel)
		if at != 0 && now-at > int64(l.life+l.ttl+skew+orphanGrace) {
			old[st.channel] = append(old[st.channel], id)
		}
	}
	s.host.mu.RUnlock()
	if len(old) == 0 {
		s.ret.reaping.Store(false)
		return
	}
	go func() {
		defer s.ret.reaping.Store(false)
		for ch, ids := range old {
			if s.stopped.Load() {
				return
			}
			info, found, err := s.cl.info(ch, false)
			if err != nil || !found {
				continue
			}
			for _, id := range ids {
				if !slices.ContainsFunc(info.Streamlets, func(r StreamletRef) bool { return r.ID == id }) {
					s.host.Free(id)
					s.log.Warn("freed a streamlet its manager no longer lists", "channel", ch, "streamlet", id)
				}
			}
		}
	}()
}
