package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Graceful drain and streamlet copies (DESIGN.md, "Drain and copies").
//
// A draining node gossips it (view.Meta.Drain), so every view, its own
// included, marks it placement.Draining: it gets no new streamlet. Its host
// takes no new streamlets and seals the open ones (host.SetDraining); if it
// is a voter of the metadata log it is demoted, and if it leads, it hands
// the leadership over first (package cluster/metalog). The leader's
// manager closes the open streamlets it holds (it is no longer usable) and
// copies the closed ones to live nodes chosen by load (OP_COPY: the target
// reads the streamlet from the holder with NODE_READ and adopts the
// complete copy, copyHere), then commits the target as a holder. The
// draining node is done when no streamlet it holds is listed, in its own
// replica of the committed state, with it as the only usable holder
// (DrainLeft, drainPending).

// StartDrain puts the node in lame-duck mode: it gossips that it drains,
// and its own view marks it Draining at once. Idempotent.
func (c *Cluster) StartDrain() {
	if c.view.SetDraining() {
		return
	}
	c.view.UpdateLocal(func(m *view.Meta) { m.Drain = true })
	if ml := c.ml.Load(); ml != nil {
		if err := ml.UpdateMeta(time.Second); err != nil {
			c.log.Warn("sluice cluster: gossiping the drain", "err", err)
		}
		c.refresh()
	}
	c.log.Info("sluice cluster: draining: no new streamlets or channels here; what this node holds is copied to others", "node", c.self)
}

// DrainRequested is signalled when a peer or `sluice cluster drain` asks
// this node to drain (OP_DRAIN); the server then drains and exits.
func (c *Cluster) DrainRequested() <-chan struct{} { return c.drainReq }

// drainPending counts the streamlets of one channel that this node (self)
// holds, as its host reports them (hs), whose data is nowhere else yet,
// given the channel's committed list (found false: no such channel). A streamlet still open, or closed in the
// list with no usable holder but self, is pending; one the list does not
// have (expired, or never listed: an orphan) or lists as lost has nothing
// left to save; one listed with another usable holder (not draining too)
// is safe.
func drainPending(self string, hs []role.Hosted, info role.ChannelInfo, found bool, usable func(node string) bool) int {
	n := 0
	for _, h := range hs {
		if !found {
			continue
		}
		i := slices.IndexFunc(info.Streamlets, func(r role.StreamletRef) bool { return r.ID == h.ID })
		if i < 0 {
			continue
		}
		r := info.Streamlets[i]
		switch {
		case r.Lost:
		case !r.Closed || !h.Sealed:
			n++
		case !slices.ContainsFunc(r.Set(), func(n string) bool { return n != self && usable(n) }):
			n++
		}
	}
	return n
}

// DrainLeft reports how many streamlets this node holds whose data no
// other usable node holds yet, by the committed lists of this node's
// state. noTarget is set when no other usable node can take them: a drain
// then has nothing to wait for. Any goroutine; it does not wait.
func (c *Cluster) DrainLeft() (left int, noTarget bool) {
	if c.view.UsableOthers() == 0 {
		return 0, true
	}
	for _, ch := range c.host.Channels() {
		hs, _ := c.host.List(ch)
		var info role.ChannelInfo
		cur, found := c.st.Channel(ch)
		if found {
			info = cur.Info(0)
		}
		left += drainPending(c.self, hs, info, found, c.view.Usable)
	}
	return left, false
}

// copyTimeout bounds one copy: reading one streamlet (at most LimitSize
// bytes) over a node link.
func (c *Cluster) copyTimeout() time.Duration { return 10 * c.rpcTimeout() }

// pendingCopy is a copy this node is making to adopt (copyHere): filled
// by NODE_FEED on the link from the holder; changed is signalled at every
// fill and when the feed ends.
type pendingCopy struct {
	s       *host.Streamlet
	from    string
	changed chan struct{}
}

// copies are the pending copies by streamlet id, guarded by copyMu
// (taken alone).
type copyTable struct {
	copyMu sync.Mutex
	copies map[uint64]*pendingCopy
}

func (pc *pendingCopy) signal() {
	select {
	case pc.changed <- struct{}{}:
	default:
	}
}

// errCopy: a copy could not be completed.
var errCopy = errors.New("cluster: copy failed")

// copyHere makes this node hold a complete copy of the closed streamlet
// ref of channel (its committed entry), read from its holder ref.Host
// (NODE_READ from record 0; the feed fills the copy, fillAdoption), then
// adopted once it holds exactly the committed records. It waits for the
// network, at most copyTimeout.
//
// Holding it already is success only once this node's state has applied
// the streamlet's close: a replica the close left out of the set (this
// node was cut off from its orderer) is freed by that close (host.Apply),
// and must not pass for a copy. After the close, a streamlet held here
// counts only if it holds exactly the committed records, sealed
// (holdsExactly: an earlier try's adopted copy whose HOLDERS did not
// commit); anything else held under the id is not what the lists will
// name this node holding (a copy target is not a listed holder), so it is
// freed and copied afresh: the HOLDERS that follows a copy must never list
// a node that does not hold the committed records.
//
// A restarted node copies only once its state has applied the NODE_GONE
// that recorded its incarnation: that command takes the node out of every
// set, and applied after the copy it would free it (nemesis seed 102: a
// restarted node replaying the log adopted a copy, then freed it with its
// own NODE_GONE, and HOLDERS listed it).
func (c *Cluster) copyHere(channel string, epoch uint64, ref role.StreamletRef) error {
	ready := func() bool { return copyReady(c.st, c.self, c.instance, channel, epoch, ref) }
	if !c.waitState(c.copyTimeout(), ready) {
		return fmt.Errorf("%w: streamlet %d: this node's state does not list it closed, or not this node's incarnation (it lags the log)", errCopy, ref.ID)
	}
	if s := c.host.Streamlet(ref.ID); s != nil {
		if holdsExactly(s, ref) {
			return nil
		}
		n, sealed := s.Durable()
		c.log.Warn("sluice cluster: a copy target held the streamlet without its committed records; freed, copied again",
			"channel", channel, "streamlet", ref.ID, "held", n, "sealed", sealed, "committed", ref.End-ref.First)
		c.host.Free(ref.ID)
	}
	if ref.Host == c.self {
		return fmt.Errorf("%w: streamlet %d: this node is its holder but does not hold it", errCopy, ref.ID)
	}
	if c.host.Draining() {
		return fmt.Errorf("%w: this node drains", errCopy)
	}
	l := c.cfg.Limits(channel)
	pc := &pendingCopy{s: c.host.NewCopy(ref.ID, channel, ref.First, l, ref.Host), from: ref.Host, changed: make(chan struct{}, 1)}
	c.copyMu.Lock()
	if c.copies[ref.ID] != nil {
		c.copyMu.Unlock()
		pc.s.Drop()
		return fmt.Errorf("%w: streamlet %d is being copied already", errCopy, ref.ID)
	}
	c.copies[ref.ID] = pc
	c.copyMu.Unlock()
	done := false
	defer func() {
		c.copyMu.Lock()
		delete(c.copies, ref.ID)
		c.copyMu.Unlock()
		if !done {
			pc.s.Drop()
		}
	}()
	if err := c.Read(ref.Host, ref.ID, 0); err != nil {
		return fmt.Errorf("%w: %v", errCopy, err)
	}
	t := time.NewTimer(c.copyTimeout())
	defer t.Stop()
	for !pc.s.Buf().Sealed() {
		select {
		case <-pc.changed:
		case <-t.C:
			c.Unread(ref.Host, ref.ID)
			return fmt.Errorf("%w: streamlet %d from %s: not complete in %v (%d records)", errCopy, ref.ID, ref.Host,
				c.copyTimeout(), pc.s.Buf().Len())
		case <-c.stop:
			return fmt.Errorf("%w: shutting down", errCopy)
		}
	}
	if pc.s.BrokenAt() != 0 {
		return fmt.Errorf("%w: streamlet %d: the link to %s failed", errCopy, ref.ID, ref.Host)
	}
	// This node leads the set, as the committed HOLDERS will list it.
	set := []string{c.self}
	for _, n := range ref.Set() {
		if n != c.self && len(set) < maxReplicas {
			set = append(set, n)
		}
	}
	meta := role.Hosted{ID: ref.ID, Epoch: epoch, First: ref.First, Len: uint32(ref.End - ref.First), Sealed: true,
		LimitMsgs: uint32(max(l.Msgs, 0)), Replicas: set}
	if err := c.host.Adopt(pc.s, meta); err != nil {
		return fmt.Errorf("%w: %v", errCopy, err)
	}
	done = true
	c.log.Debug("sluice cluster: holding a copy", "channel", channel, "streamlet", ref.ID, "from", ref.Host, "records", meta.Len)
	return nil
}

// holdsExactly reports whether s holds exactly the committed records of
// the closed streamlet ref, sealed: what a listed holder must hold.
func holdsExactly(s *host.Streamlet, ref role.StreamletRef) bool {
	n, final := s.Durable()
	return final && s.First() == ref.First && uint64(n) == ref.End-ref.First
}

// copyReady reports whether a node (self, running incarnation inst) whose
// state is st may take a copy of ref: its state records inst and has
// applied the streamlet's close (closedHere).
func copyReady(st *meta.State, self, inst, channel string, epoch uint64, ref role.StreamletRef) bool {
	rec, ok := st.Instance(self)
	return ok && rec == inst && closedHere(st, channel, epoch, ref)
}

// closedHere reports whether st has applied the close of streamlet ref of
// channel's incarnation epoch: it lists it closed, or no longer lists it
// (expired: the positions before the earliest listed; or a later
// incarnation). The copy of one no longer listed fails at the HOLDERS
// commit. A state that does not know the streamlet yet lags the log.
func closedHere(st *meta.State, channel string, epoch uint64, ref role.StreamletRef) bool {
	ch, ok := st.Channel(channel)
	switch {
	case !ok || ch.Epoch < epoch:
		return false
	case ch.Epoch > epoch:
		return true
	}
	if i := slices.IndexFunc(ch.List, func(r role.StreamletRef) bool { return r.ID == ref.ID }); i >= 0 {
		return ch.List[i].Closed
	}
	earliest := ch.Next
	if len(ch.List) > 0 {
		earliest = ch.List[0].First
	}
	return ref.First < earliest
}

// fillAdoption applies a NODE_FEED from node to a pending copy (on the link's
// loop); it reports whether the feed was one.
func (c *Cluster) fillAdoption(node string, f wire.NodeFeed, stamps, run []byte) bool {
	c.copyMu.Lock()
	pc := c.copies[f.Streamlet]
	c.copyMu.Unlock()
	if pc == nil || pc.from != node {
		return false
	}
	pc.s.Fill(int(f.Start), int(f.Count), func(i int) ([]byte, bool, int64) {
		var p []byte
		var ext bool
		p, ext, run, _ = wire.NextRecordExt(run) // validated by DecodeNodeFeed
		return p, ext, wire.FeedStamp(stamps, i)
	}, f.Flags&(wire.FeedSealed|wire.FeedGone) != 0)
	pc.signal()
	return true
}

// endCopies breaks the pending copies fed by node (its link failed).
func (c *Cluster) endCopies(node string) {
	c.copyMu.Lock()
	var ended []*pendingCopy
	for _, pc := range c.copies {
		if pc.from == node {
			ended = append(ended, pc)
		}
	}
	c.copyMu.Unlock()
	for _, pc := range ended {
		pc.s.Break()
		pc.signal()
	}
}

// copyTo has node to take over a complete copy of ref (manager.Cluster's
// Copy): copyHere on this node, or OP_COPY to another.
func (c *Cluster) copyTo(to, channel string, epoch uint64, ref role.StreamletRef) error {
	if to == c.self {
		return c.copyHere(channel, epoch, ref)
	}
	var e wire.NodeEnc
	encCopy(&e, channel, epoch, ref)
	_, err := c.callFor(to, wire.OpCopy, e.B, c.copyTimeout()+c.links.CallTimeout())
	return err
}

// encCopy encodes OP_COPY's request: str8 channel, u64 epoch, u64 id,
// str8 holder (the one to read from), u64 first, u64 end (PROTOCOL.md
// 9.5).
func encCopy(e *wire.NodeEnc, channel string, epoch uint64, ref role.StreamletRef) {
	e.Str8(channel)
	e.U64(epoch)
	e.U64(ref.ID)
	e.Str8(ref.Host)
	e.U64(ref.First)
	e.U64(ref.End)
}

// decCopy decodes OP_COPY's request; d's sticky error reports a
// malformed body (a holder missing, an end before the first).
func decCopy(d *wire.NodeDec) (channel string, epoch uint64, ref role.StreamletRef) {
	channel, epoch = d.Str8(), d.U64()
	ref.ID, ref.Host, ref.First, ref.End, ref.Closed = d.U64(), d.Str8(), d.U64(), d.U64(), true
	if d.Err() == nil && (ref.Host == "" || ref.End < ref.First || ref.End-ref.First > 1<<32-1) {
		d.Fail("COPY: holder %q, positions %d..%d", ref.Host, ref.First, ref.End)
	}
	return channel, epoch, ref
}

// serveDrain is OP_DRAIN: node drains (this one, or a member it passes
// the request on to).
func (c *Cluster) serveDrain(node string) error {
	if node == c.self || node == "" {
		select {
		case c.drainReq <- struct{}{}:
		default: // asked already
		}
		return nil
	}
	if !c.view.Live(node) {
		return fmt.Errorf("cluster: %q is not a live member", node)
	}
	var e wire.NodeEnc
	e.Str8(node)
	_, err := c.call(node, wire.OpDrain, e.B)
	return err
}
