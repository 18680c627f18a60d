package manager

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// maxOpenTries bounds the attempts of one grant (each a new host choice or
// a fresh read after a conflict).
const maxOpenTries = 6

// WriteGrant returns a write grant for the channel's open streamlet, read
// from the committed list when its lease holds, it is not after (the
// streamlet of the caller's previous grant, which refused a write) and its
// replicas are usable. Otherwise the channel's open streamlet is closed and
// the next one opened (open); a caller that finds that in progress waits
// for it and takes its grant. It may wait for hosts and for a commit, with
// no lock held. Safe for concurrent use.
func (m *Manager) WriteGrant(channel string, after uint64) (role.Grant, error) {
	m.grants.Add(1)
	for {
		sh, sc := m.lockSoft(channel)
		if op := sc.busy; op != nil {
			sh.mu.Unlock()
			<-op.done
			if op.grant && (op.err != nil || op.g.Streamlet != after) {
				return op.g, op.err
			}
			continue
		}
		// With no change of the channel in progress (checked under the
		// same lock), its committed open streamlet is hosted: the change
		// that opened it hosted it before it ended.
		if g, ok := m.current(channel, after); ok {
			sh.mu.Unlock()
			return g, nil
		}
		if !m.leading.Load() {
			sh.mu.Unlock()
			return role.Grant{}, fmt.Errorf("%w: write grant for %q", role.ErrNotLeader, channel)
		}
		op := &change{done: make(chan struct{}), grant: true}
		sc.busy = op
		sh.mu.Unlock()
		g, err := m.open(channel, after)
		m.end(channel, op, g, err)
		return g, err
	}
}

// current returns the grant of the channel's committed open streamlet if
// it can take the caller's writes (the caller holds the channel's soft
// shard lock and saw no change in progress).
func (m *Manager) current(channel string, after uint64) (role.Grant, bool) {
	epoch, t, ok, has := m.st.Tail(channel)
	if !ok || !has || t.Closed || t.ID == after || m.now().UnixNano() >= t.LeaseEnd || !m.usableSet(t) {
		return role.Grant{}, false
	}
	return grantOf(channel, epoch, t, m.cfg.Limits(channel)), true
}

// usableSet reports whether every replica of ref is usable.
func (m *Manager) usableSet(ref role.StreamletRef) bool {
	for _, n := range ref.Set() {
		if !m.cfg.Cluster.Usable(n) {
			return false
		}
	}
	return true
}

func grantOf(channel string, epoch uint64, ref role.StreamletRef, l role.Limits) role.Grant {
	return role.Grant{Channel: channel, Epoch: epoch, Streamlet: ref.ID, Host: ref.Host, First: ref.First,
		LimitMsgs: l.Msgs, LimitSize: l.Size, LeaseEnd: ref.LeaseEnd, Replicas: ref.Replicas}
}

// open closes the channel's open streamlet, if any, and opens the next
// one (the caller holds the channel's change). The new streamlet is hosted
// on its replicas while its OPEN is committed: no one can write it before
// the commit, since its grant is handed out only after it. A conflict (the
// list changed meanwhile) reads the list again; a host that failed is
// avoided at the next try, and the committed streamlet that nobody can
// have written is closed empty.
func (m *Manager) open(channel string, after uint64) (role.Grant, error) {
	lim := m.cfg.Limits(channel)
	var exclude []string
	for try := 0; try < maxOpenTries; try++ {
		c, exists := m.st.Channel(channel)
		now := m.now().UnixNano()
		cmd := meta.Cmd{Kind: meta.KindOpen, Time: now, Channel: channel}
		first, seq := uint64(1), uint64(0)
		var prior []role.StreamletRef
		if exists {
			cmd.Epoch, cmd.Tail, first, seq = c.Epoch, c.TailID(), c.Next, c.Seq
			if o, open := c.Open(); open {
				if o.ID != after && now < o.LeaseEnd && m.usableSet(o) {
					return grantOf(channel, c.Epoch, o, lim), nil // opened by another change meanwhile
				}
				seal, err := m.closeSpec(o, lim, false)
				if err != nil {
					return role.Grant{}, err
				}
				cmd.Seal, first = seal, seal.End
				m.noteClosed(channel, o, seal.End, now, lim)
				c.List[len(c.List)-1].Closed, c.List[len(c.List)-1].End = true, seal.End
				c.List[len(c.List)-1].Expires = now + int64(lim.TTL)
			}
			prior = priorOf(c.List, now, lim.TTL, m.cfg.DedupWindow)
		} else {
			cmd.Epoch = m.st.NewEpoch(now)
		}
		set, hosts := m.chooseReplicas(channel, seq, lim, exclude)
		if len(set) == 0 && len(exclude) > 0 {
			exclude = nil // every node refused once: try them again
			set, hosts = m.chooseReplicas(channel, seq, lim, nil)
		}
		if len(set) == 0 {
			return role.Grant{}, fmt.Errorf("%w: no node can host a streamlet of %q", role.ErrNoHost, channel)
		}
		cmd.New = meta.NewStreamlet{ID: m.cfg.NewID(), Replicas: set, Life: int64(lim.Life)}
		ref := role.StreamletRef{ID: cmd.New.ID, Host: set[0], First: first, LeaseEnd: now + int64(lim.Life)}
		if len(set) > 1 {
			ref.Replicas = set
		}
		g := grantOf(channel, cmd.Epoch, ref, lim)
		hg := g
		hg.Prior = prior
		hosted := make(chan string, 1)
		go func() { hosted <- hostAll(hosts, set, hg) }() // awaited below
		r, err := m.propose(&cmd)
		failed := <-hosted
		switch {
		case err != nil:
			// Not committed, or not known to be: left hosted, it is freed
			// as an orphan unless the command commits after all.
			return role.Grant{}, err
		case r == meta.ResultConflict:
			freeAll(hosts, g.Streamlet)
			continue
		case r != meta.ResultOK:
			freeAll(hosts, g.Streamlet)
			return role.Grant{}, fmt.Errorf("manager: OPEN of %q: %v", channel, r)
		case failed != "":
			m.closeEmpty(channel, cmd.Epoch, g.Streamlet, first, lim)
			freeAll(hosts, g.Streamlet)
			exclude = append(exclude, failed)
			continue
		}
		if want := max(lim.Replicas, 1); len(set) < want {
			m.noteDegraded(channel, len(set), want)
		}
		m.logger().Debug("sluice: streamlet opened", "channel", channel, "streamlet", g.Streamlet, "hosts", set,
			"first", first, "epoch", cmd.Epoch)
		return g, nil
	}
	return role.Grant{}, fmt.Errorf("%w: opening a streamlet of %q kept failing", role.ErrUnavailable, channel)
}

// hostAll hosts the new streamlet on its replicas, the followers first
// and the orderer last (once the orderer hosts it, every replica it
// forwards to exists); it returns the node that refused, "" if none.
func hostAll(hosts []role.Host, set []string, g role.Grant) string {
	for i := len(hosts) - 1; i >= 0; i-- {
		if err := hosts[i].HostStreamlet(g); err != nil {
			return set[i]
		}
	}
	return ""
}

func freeAll(hosts []role.Host, id uint64) {
	for _, h := range hosts {
		h.Free(id)
	}
}

// closeEmpty closes streamlet id, committed but not hosted everywhere and
// so never granted, at its first position (nothing was written to it).
func (m *Manager) closeEmpty(channel string, epoch, id, first uint64, lim role.Limits) {
	_, err := m.propose(&meta.Cmd{Kind: meta.KindClose, Time: m.now().UnixNano(), Channel: channel, Epoch: epoch, Tail: id,
		Seal: meta.Seal{End: first, TTL: int64(lim.TTL)}})
	if err != nil {
		m.logger().Warn("sluice: closing a streamlet that could not be hosted failed; it is closed at its next grant",
			"channel", channel, "streamlet", id, "err", err)
	}
}

// errUnreachable wraps role.ErrUnavailable: a host that must be asked
// cannot be reached and is not known to be gone.
func errUnreachable(what string, ref role.StreamletRef) error {
	return fmt.Errorf("%w: %s of streamlet %d (replicas %v) unreachable and not known dead", role.ErrUnavailable, what, ref.ID, ref.Set())
}

// closeSpec decides how the open streamlet o ends, asking its hosts (no
// lock held): sealed by its orderer at the end every replica holds, or,
// when that fails or force is set, recovered from the replicas that answer
// (recovery.go). A streamlet no replica of which can be asked: lost, at the
// largest end it could have reached, when all its replicas are gone; an
// error wrapping role.ErrUnavailable while one may come back (its writers
// wait rather than lose what it holds).
func (m *Manager) closeSpec(o role.StreamletRef, lim role.Limits, force bool) (meta.Seal, error) {
	ttl := int64(lim.TTL)
	lost := meta.Seal{End: o.First + uint64(max(lim.Msgs, 1)), Lost: true, TTL: ttl}
	set := o.Set()
	if !force {
		if h := m.cfg.Cluster.HostOf(o.Host); h != nil {
			end, err := h.Seal(o.ID)
			switch {
			case err == nil:
				return meta.Seal{End: end, TTL: ttl}, nil
			case errors.Is(err, role.ErrUnknownStreamlet) && len(set) == 1:
				// Never hosted (its opener died between the commit and
				// the host), or lost in a restart: nothing anyone can
				// read, and positions up to its limit may have been
				// given out.
				return lost, nil
			}
		}
		if len(set) == 1 {
			if m.cfg.Cluster.Gone(o.Host) {
				return lost, nil
			}
			return meta.Seal{}, errUnreachable("the host", o)
		}
	}
	p, unknown := m.recoverRef(o)
	if p.Lost {
		for _, n := range set {
			if !unknown[n] && !m.cfg.Cluster.Gone(n) {
				return meta.Seal{}, errUnreachable("every replica", o)
			}
		}
		return lost, nil
	}
	m.recoveries.Add(1)
	return meta.Seal{End: o.First + uint64(p.Len), Keep: p.Keep, TTL: ttl}, nil
}

// noteClosed measures the channel's rate over the streamlet o that closes
// at end now (channel-specific load for placement).
func (m *Manager) noteClosed(channel string, o role.StreamletRef, end uint64, now int64, lim role.Limits) {
	opened := o.LeaseEnd - int64(lim.Life)
	if d := now - opened; d > 0 && end >= o.First {
		sh, sc := m.lockSoft(channel)
		sc.load.MsgsPerSec = float64(end-o.First) * 1e9 / float64(d)
		sh.mu.Unlock()
	}
}

// priorOf returns the closed streamlets of list that may hold message ids
// of the last window at now (role.Grant.Prior): not lost, closed less than
// window ago (a closed streamlet's close time is its Expires - ttl, later
// for one that waited for its predecessor's expiry, which only includes
// more), the newest role.MaxPrior of them, oldest first. window 0 takes
// every retained one.
func priorOf(list []role.StreamletRef, now int64, ttl, window time.Duration) []role.StreamletRef {
	var out []role.StreamletRef
	for i := len(list) - 1; i >= 0 && len(out) < role.MaxPrior; i-- {
		r := list[i]
		if !r.Closed || r.Lost {
			continue
		}
		if window > 0 && r.Expires-int64(ttl) < now-int64(window) {
			break
		}
		out = append(out, r)
	}
	slices.Reverse(out)
	return out
}

// chooseReplicas picks the replica set of the channel's next streamlet:
// Limits.Replicas distinct usable nodes (fewer when fewer are left),
// each chosen by the load-weighted placement with the ones already chosen
// excluded; the first orders the appends, and no node reported cut from
// it follows (unreachable.go). It returns the nodes and their Host roles.
func (m *Manager) chooseReplicas(channel string, seq uint64, lim role.Limits, exclude []string) ([]string, []role.Host) {
	want := max(lim.Replicas, 1)
	sh, sc := m.lockSoft(channel)
	load := sc.load
	load.Readers = sc.nread
	sh.mu.Unlock()
	ex := slices.Clone(exclude)
	var set []string
	var hosts []role.Host
	for len(set) < want {
		node, ok := m.cfg.Cluster.Choose(channel, seq, load, ex)
		if !ok {
			break
		}
		ex = append(ex, node)
		h := m.cfg.Cluster.HostOf(node)
		if h == nil {
			continue
		}
		if len(set) == 0 {
			ex = append(ex, m.cut.from(node, m.now().UnixNano())...)
		}
		set, hosts = append(set, node), append(hosts, h)
	}
	return set, hosts
}

// noteDegraded counts a streamlet opened with fewer replicas than its
// channel asks for and logs it, at most once per degradedLogEvery.
func (m *Manager) noteDegraded(channel string, have, want int) {
	m.degraded.Add(1)
	now := m.now().UnixNano()
	last := m.degradedLog.Load()
	if now-last >= int64(degradedLogEvery) && m.degradedLog.CompareAndSwap(last, now) {
		m.logger().Warn("sluice cluster: streamlet opened with fewer replicas than configured (too few usable nodes)",
			"channel", channel, "replicas", have, "configured", want, "degraded_total", m.degraded.Load())
	}
}

// degradedLogEvery rate-limits noteDegraded's log line.
const degradedLogEvery = 10 * time.Second
