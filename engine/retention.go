package engine

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
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
// (host.Host.Retained), so a check under the budget costs one atomic load;
// only a node over its budget walks its streamlets to choose what to expire
// (host.ChooseExpired).
type retention struct {
	busy    atomic.Bool  // a sweep's expiries are running
	expired atomic.Int64 // streamlets and copies expired ahead of their TTL (metrics)
}

// retentionInterval is how often the budget is checked.
const retentionInterval = 50 * time.Millisecond

// retentionSweep checks the budget and expires what exceeds it (see
// retention). Called by the ticker.
//
// The budget covers the node's output waiting to be written too (outbound
// buffers, summed by the loops' sweeps): what waits for slow readers is
// taken from what history may hold, so that the budget bounds both.
func (s *Server) retentionSweep() {
	budget := int64(s.opts.MaxRetained)
	if budget > 0 {
		budget = max(budget-s.outbound(), 0)
	}
	if total := s.host.Retained(); s.opts.MaxRetained <= 0 || total <= budget || !s.ret.busy.CompareAndSwap(false, true) {
		return
	}
	var cands []host.Retained
	total := s.host.Footprint(&cands) + s.mirrors.footprint(&cands)
	victims := host.ChooseExpired(total, budget, cands)
	if !s.plane.background(func() { s.expire(victims) }) {
		s.ret.busy.Store(false) // the next sweep tries again
	}
}

// pressureLimit is the outbound limit of every client connection while
// the node's output waiting to be written is over its share of the
// retention budget (outLimit): Options.OutboundLimit's smallest value.
const pressureLimit = 64 << 10

// outbound returns the bytes waiting to be written to this node's
// connections, as of each loop's last flush (or sweep, which counts them
// exactly): the sum of the loops' outbound, kept in outTotal.
func (s *Server) outbound() int64 { return s.outTotal.Load() }

// expire drops the victims that are gateway copies and asks the managers to
// expire the hosted ones: one request per channel, through its newest
// victim (the list is oldest first). It ends the sweep.
func (s *Server) expire(victims []host.Retained) {
	defer s.ret.busy.Store(false)
	through := make(map[string]uint64)
	var order []string
	for _, v := range victims {
		if v.S.CopyOf() != "" {
			if s.mirrors.drop(v.S) {
				s.ret.expired.Add(1)
			}
			continue
		}
		ch := v.S.Channel()
		if _, ok := through[ch]; !ok {
			order = append(order, ch)
		}
		through[ch] = v.S.ID()
	}
	for _, ch := range order {
		if s.stopped.Load() {
			return
		}
		// A manager that does not list the streamlet as closed yet (the
		// host sealed it itself and no writer has asked for a new grant)
		// expires nothing; the next sweep asks again.
		if n, err := s.plane.expire(ch, through[ch]); err == nil {
			s.ret.expired.Add(int64(n))
		}
	}
}

// orphanGrace is how long a hosted streamlet that took no write stays
// before the orphan sweep looks it up in the committed lists.
const orphanGrace = time.Minute

// reapOrphans frees hosted streamlets that the committed lists (this
// node's replica of the metadata state) do not name: one hosted for an
// OPEN that did not commit, or whose freeing this node missed. Only a
// streamlet idle for orphanGrace is looked at, and only while this node
// knows a leader of the metadata log (its state is then current: a node
// cut off from the log must not free what it has not heard of). A single
// node frees at expiry directly and has none. Called by the ticker
// (clusterPlane.sweep); no network call.
func (p clusterPlane) reapOrphans() {
	s := p.s
	if p.cl.Leadership().Leader == "" {
		return
	}
	for ch, ids := range s.host.IdleBefore(s.clock().UnixNano(), orphanGrace) {
		c, ok := s.state.Channel(ch)
		for _, id := range ids {
			if ok && slices.ContainsFunc(c.List, func(r role.StreamletRef) bool { return r.ID == id }) {
				continue
			}
			s.host.Free(id)
			s.log.Warn("freed a streamlet the committed lists do not name", "channel", ch, "streamlet", id)
		}
	}
}
