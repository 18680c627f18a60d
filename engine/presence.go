package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/presence"
	"github.com/sluice-rtm/sluice/wire"
)

// Presence and occupancy on the gateway (docs/presence.md, PROTOCOL.md
// 2.18): the node's picture is a presence.Registry; the loops report
// their connections' presence subscriptions, subscriptions and
// publishers to it, answer PRESENCE queries from it, and deliver what it
// queues for their watching subscriptions. In a cluster a
// presence.Syncer pushes the node's part to every live member over node
// requests (cluster.Service).

// PresenceOptions configure presence and occupancy.
type PresenceOptions struct {
	// MaxMembers bounds one channel's presence members: a SUBSCRIBE that
	// would enter a channel that has as many (over the cluster, as this
	// node knows it) gets ERROR UNAVAILABLE, and a node stores at most as
	// many of a channel's members.
	MaxMembers int
	// MaxBytes bounds the memory of the member entries a node holds
	// (local and remote, counted at presence.EntryCost: 128 bytes plus
	// the client id and info): past it a SUBSCRIBE that would enter gets
	// ERROR UNAVAILABLE and remote members are not stored (queries then
	// say PARTIAL; counts stay exact).
	MaxBytes int
	// EventsMax: while a channel has more members than this, its event
	// subscribers get no PRESENCE_EVENT but OCCUPANCY with EVENTS_PAUSED;
	// events resume at three quarters of it.
	EventsMax int
	// OccupancyInterval is the most often an OCCUPANCY is sent to one
	// subscription: changes within it are sent together.
	OccupancyInterval time.Duration
	// PublisherWindow: a connection counts as a publisher of a channel
	// while it is open and published to it within this window.
	PublisherWindow time.Duration
}

// DefaultPresenceOptions are the defaults of Options.Presence.
func DefaultPresenceOptions() PresenceOptions {
	return PresenceOptions{MaxMembers: 10_000, MaxBytes: 64 << 20, EventsMax: 100,
		OccupancyInterval: time.Second, PublisherWindow: 10 * time.Second}
}

func (o *PresenceOptions) validate() error {
	switch {
	case o.MaxMembers < 1 || o.MaxMembers > 10_000_000:
		return optErr("Presence.MaxMembers", "%d is outside 1..10000000", o.MaxMembers)
	case o.MaxBytes < 1<<20:
		return optErr("Presence.MaxBytes", "%d is below 1 MiB", o.MaxBytes)
	case o.EventsMax < 1 || o.EventsMax > o.MaxMembers:
		return optErr("Presence.EventsMax", "%d is outside 1..MaxMembers (%d)", o.EventsMax, o.MaxMembers)
	case o.OccupancyInterval < 10*time.Millisecond:
		return optErr("Presence.OccupancyInterval", "%v is below 10ms", o.OccupancyInterval)
	case o.PublisherWindow < time.Second:
		return optErr("Presence.PublisherWindow", "%v is below 1s", o.PublisherWindow)
	}
	return nil
}

// presenceScratch is a loop's reusable slices for presence.
type presenceScratch struct {
	deliveries []presence.Delivery
	members    []presence.Member
	wire       []wire.Member
	changes    []wire.PresenceChange
}

// maxPubChans bounds the channels one connection counts as a publisher
// of; past it a connection's further channels are not counted.
const maxPubChans = 1024

// presenceState is a Server's presence: its registry, the syncer of a
// cluster node, and the ids of its connections.
type presenceState struct {
	reg  *presence.Registry
	sync *presence.Syncer // nil on a single node
	// conns gives each client connection its id (the conn of a member).
	conns atomic.Uint64
}

// initPresence makes the registry; its sinks are the event loops.
func (s *Server) initPresence() {
	o := s.opts.Presence
	s.pres.reg = presence.New(s.opts.ServerName, s.opts.Loops,
		presence.Limits{MaxMembers: o.MaxMembers, MaxBytes: int64(o.MaxBytes), EventsMax: o.EventsMax},
		func(sink int) {
			if l := s.loopAt(sink); l != nil {
				l.execute(l.deliverPresence)
			}
		})
}

// loopAt returns the loop of index i, nil if it has not started.
func (s *Server) loopAt(i int) *loop {
	s.loopsMu.Lock()
	defer s.loopsMu.Unlock()
	if i < len(s.loopArr) {
		return s.loopArr[i]
	}
	return nil
}

// closePresence stops the pushes to peers (Shutdown, after the cluster).
func (s *Server) closePresence() {
	if s.pres.sync != nil {
		s.pres.sync.Close()
	}
}

// presenceService answers the cluster's presence pushes (cluster.Service).
type presenceService struct{ s *Server }

func (p presenceService) Serve(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	if op != wire.OpPresenceSync {
		return wire.NodeBadOp, nil, fmt.Sprintf("op %d is not a presence op", op)
	}
	res, err := p.s.pres.reg.Serve(peer, body)
	var bad *presence.BadPushError
	switch {
	case errors.As(err, &bad):
		return wire.NodeBadOp, nil, err.Error()
	case err != nil:
		return wire.NodeFailed, nil, err.Error()
	}
	return wire.NodeOK, res, ""
}

func (p presenceService) Members(alive []string) {
	if p.s.pres.sync != nil {
		p.s.pres.sync.SetPeers(alive)
	}
}

// presenceFlags returns the presence flags of a SUBSCRIBE of c: none
// without FeaturePresence (the bits are then undefined and ignored), and
// false after an ERROR when c may not read the channel's presence.
func (l *loop) presenceFlags(c *conn, reqID uint32, flags wire.Flags, ch []byte) (wire.Flags, bool) {
	if !c.presence {
		return 0, true
	}
	pf := flags & wire.SubscribePresenceFlags
	if pf&(wire.FlagPresenceEvents|wire.FlagOccupancy) != 0 && !c.mayPresence(ch) {
		if !c.closing {
			c.sendError(reqID, wire.CodeForbidden, "not allowed to read the presence of this channel")
		}
		return 0, false
	}
	return pf, true
}

// presenceJoin enters su's connection into the channel's presence when
// su asks to (FlagPresence), before its SUBSCRIBED; false after an ERROR
// UNAVAILABLE when a limit refuses it.
func (l *loop) presenceJoin(c *conn, reqID uint32, lc *loopChan, su *sub) bool {
	if su.pflags&wire.FlagPresence == 0 {
		return true
	}
	// The member is who c is now; it leaves under the same client id
	// even if a refreshed token names another.
	su.pclient = c.clientID
	err := l.srv.pres.reg.Join(lc.name, c.id, c.clientID, c.clientInfo)
	if err == nil {
		return true
	}
	text := fmt.Sprintf("channel %q has %d presence members, the most allowed", lc.name, l.srv.opts.Presence.MaxMembers)
	if errors.Is(err, presence.ErrNodeFull) {
		text = "this node's presence memory is full"
	}
	c.sendError(reqID, wire.CodeUnavailable, text)
	return false
}

// presenceAdded counts su, a new subscription (already added to lc), in
// the channel's occupancy and registers it as a watcher when it asks for
// events or occupancy, which then gets the channel's occupancy at once.
func (l *loop) presenceAdded(c *conn, lc *loopChan, su *sub) {
	reg := l.srv.pres.reg
	reg.Count(lc.name, 1, 0)
	ev, oc := watchDeltas(su.pflags, 1)
	if ev == 0 && oc == 0 {
		return
	}
	reg.Watch(lc.name, l.idx, ev, oc)
	lc.presSubs = append(lc.presSubs, su)
	o, paused := reg.Occupancy(lc.name)
	su.ppaused = paused
	c.sendOccupancy(su.id, o, paused)
}

// presenceRemoved undoes presenceAdded and presenceJoin for a
// subscription that ends (lc.removeSub).
func (l *loop) presenceRemoved(lc *loopChan, su *sub) {
	reg := l.srv.pres.reg
	reg.Count(lc.name, -1, 0)
	if su.pflags&wire.FlagPresence != 0 {
		reg.Leave(lc.name, su.c.id, su.pclient)
	}
	if ev, oc := watchDeltas(su.pflags, -1); ev != 0 || oc != 0 {
		reg.Watch(lc.name, l.idx, ev, oc)
		lc.presSubs = removeFrom(lc.presSubs, su)
	}
}

func watchDeltas(f wire.Flags, d int) (events, occ int) {
	if f&wire.FlagPresenceEvents != 0 {
		events = d
	}
	if f&wire.FlagOccupancy != 0 {
		occ = d
	}
	return events, occ
}

// sendOccupancy queues an OCCUPANCY for subscription subID.
func (c *conn) sendOccupancy(subID uint32, o wire.Occupancy, paused bool) {
	if c.closing || c.closed {
		return
	}
	var f wire.Flags
	if paused {
		f = wire.FlagEventsPaused
	}
	s, k := c.ownStart()
	c.scratch = wire.AppendOccupancy(c.scratch, subID, f, o)
	c.ownEnd(s, k)
}

// notePublisher counts c as a publisher of lc's channel for
// PublisherWindow (the map is written at most every eighth of the window
// while c publishes to one channel).
func (l *loop) notePublisher(c *conn, lc *loopChan) {
	window := int64(l.srv.opts.Presence.PublisherWindow)
	if c.lastPub == lc.name && l.now-c.lastPubAt < window/8 {
		return
	}
	if c.pubs == nil {
		c.pubs = make(map[string]int64)
	}
	if _, ok := c.pubs[lc.name]; !ok {
		if len(c.pubs) >= maxPubChans {
			return
		}
		l.srv.pres.reg.Count(lc.name, 0, 1)
	}
	c.pubs[lc.name] = l.now
	c.lastPub, c.lastPubAt = lc.name, l.now
}

// expirePublishers stops counting c as a publisher of the channels it
// has not published to within PublisherWindow (all of them when gone).
func (l *loop) expirePublishers(c *conn, gone bool) {
	if len(c.pubs) == 0 {
		return
	}
	old := l.now - int64(l.srv.opts.Presence.PublisherWindow)
	for name, at := range c.pubs {
		if gone || at < old {
			delete(c.pubs, name)
			l.srv.pres.reg.Count(name, 0, -1)
		}
	}
	if len(c.pubs) == 0 {
		c.pubs, c.lastPub = nil, ""
	}
}

// presenceQuery answers a PRESENCE: the channel's occupancy and, unless
// FlagCountsOnly, its members, in as many PRESENCE_STATE frames as the
// client's body limit needs (FlagMore on all but the last; FlagPartial
// on all when this node holds fewer members than the channel has).
func (l *loop) presenceQuery(c *conn, h wire.Header, body []byte) {
	if !c.presence {
		c.sendError(h.ID, wire.CodeUnknownType, "PRESENCE without FeaturePresence")
		return
	}
	ch, err := wire.DecodePresence(body)
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	if err := wire.ValidChannel(ch); err != nil {
		c.sendError(h.ID, wire.CodeInvalidChannel, err.Error())
		return
	}
	if !c.mayPresence(ch) {
		if !c.closing {
			c.sendError(h.ID, wire.CodeForbidden, "not allowed to read the presence of this channel")
		}
		return
	}
	o, ms, partial := l.srv.pres.reg.Query(string(ch), h.Flags&wire.FlagCountsOnly != 0, l.ps.members[:0])
	s, k := c.ownStart()
	c.scratch, l.ps.wire = appendPresenceAnswer(c.scratch, l.ps.wire, h.ID, o, ms, partial, int(l.srv.maxBody))
	c.ownEnd(s, k)
	clear(ms)
	l.ps.members = ms[:0]
}

// appendPresenceAnswer appends the PRESENCE_STATE frames answering
// request id: occupancy o and members ms in frames whose bodies fit
// maxBody, FlagMore on all but the last, FlagPartial on all when partial
// (at least one frame, with no member when ms is empty). batch is
// scratch, returned for reuse.
func appendPresenceAnswer(dst []byte, batch []wire.Member, id uint32, o wire.Occupancy, ms []presence.Member, partial bool, maxBody int) ([]byte, []wire.Member) {
	var flags wire.Flags
	if partial {
		flags = wire.FlagPartial
	}
	limit := maxBody - wire.PresenceStateFixedLen
	batch = batch[:0]
	size := 0
	for i := 0; ; i++ {
		if i == len(ms) || (len(batch) > 0 && (size+wmemberLen(&ms[i]) > limit || len(batch) == wire.MaxPresenceMembers)) {
			f := flags
			if i < len(ms) {
				f |= wire.FlagMore
			}
			dst = wire.AppendPresenceState(dst, id, f, o, batch)
			clear(batch)
			batch, size = batch[:0], 0
			if i == len(ms) {
				return dst, batch
			}
		}
		m := &ms[i]
		batch = append(batch, wire.Member{ClientID: []byte(m.ClientID), Node: []byte(m.Node), Conn: m.Conn, Info: m.Info})
		size += wmemberLen(m)
	}
}

func wmemberLen(m *presence.Member) int {
	return 1 + len(m.ClientID) + 1 + len(m.Node) + 8 + 2 + len(m.Info)
}

// deliverPresence runs on the loop when the registry queued deliveries
// for it: joins and leaves go to the channels' event subscriptions (one
// PRESENCE_EVENT body per run of changes, shared by them all, only the
// header per subscription), occupancy to the occupancy subscriptions and,
// when it pauses or resumes events or while they are paused, to the
// event subscriptions.
func (l *loop) deliverPresence() {
	ds := l.srv.pres.reg.Take(l.idx, l.ps.deliveries[:0])
	for i := 0; i < len(ds); {
		d := &ds[i]
		lc := l.chans[d.Channel]
		j := i + 1
		if d.Kind == presence.Occupancy {
			if lc != nil {
				lc.sendPresenceOcc(d)
			}
			i = j
			continue
		}
		for j < len(ds) && ds[j].Kind != presence.Occupancy && ds[j].Channel == d.Channel {
			j++
		}
		if lc != nil {
			l.sendChanges(lc, ds[i:j])
		}
		i = j
	}
	clear(ds)
	l.ps.deliveries = ds[:0]
}

func (lc *loopChan) sendPresenceOcc(d *presence.Delivery) {
	for _, su := range lc.presSubs {
		ev := su.pflags&wire.FlagPresenceEvents != 0 && (d.Paused || su.ppaused)
		if su.pflags&wire.FlagOccupancy != 0 || ev {
			su.c.sendOccupancy(su.id, d.Occ, d.Paused)
		}
		su.ppaused = d.Paused
	}
}

// sendChanges sends joins and leaves of lc to its event subscriptions.
func (l *loop) sendChanges(lc *loopChan, ds []presence.Delivery) {
	watching := false
	for _, su := range lc.presSubs {
		watching = watching || su.pflags&wire.FlagPresenceEvents != 0
	}
	if !watching {
		return
	}
	limit := int(l.srv.maxBody)
	for len(ds) > 0 {
		changes := l.ps.changes[:0]
		size := 2
		for len(ds) > 0 && len(changes) < wire.MaxPresenceMembers {
			m := &ds[0].Member
			n := 1 + wmemberLen(m)
			if len(changes) > 0 && size+n > limit {
				break
			}
			kind := wire.PresenceJoin
			if ds[0].Kind == presence.Leave {
				kind = wire.PresenceLeave
			}
			changes = append(changes, wire.PresenceChange{Kind: kind,
				Member: wire.Member{ClientID: []byte(m.ClientID), Node: []byte(m.Node), Conn: m.Conn, Info: m.Info}})
			size += n
			ds = ds[1:]
		}
		body := wire.AppendPresenceEventBody(make([]byte, 0, size), changes)
		for _, su := range lc.presSubs {
			c := su.c
			if su.pflags&wire.FlagPresenceEvents == 0 || c.closing || c.closed {
				continue
			}
			s, k := c.ownStart()
			c.scratch = wire.AppendHeader(c.scratch, wire.TypePresenceEvent, 0, su.id, len(body))
			c.ownEnd(s, k)
			c.shared(body)
		}
		clear(changes)
		l.ps.changes = changes[:0]
	}
}

// presenceAllowed reports whether su may still get what its presence flags
// ask for: a subscription with events or occupancy whose connection lost
// the presence capability (a refresh, a reload) ends as one that lost the
// subscribe capability does (recheckSubs).
func (su *sub) presenceAllowed() bool {
	return su.pflags&(wire.FlagPresenceEvents|wire.FlagOccupancy) == 0 || su.c.mayPresence([]byte(su.lc.name))
}

// mayPresence reports whether c may read channel ch's presence and
// occupancy (capability presence, docs/auth.md).
func (c *conn) mayPresence(ch []byte) bool { return c.may(capPresence, ch) }

// PresenceStats are a node's presence gauges and counters (Metrics).
type PresenceStats = presence.Stats

// writePresenceMetrics writes the presence families of WriteMetrics.
func writePresenceMetrics(p *promWriter, st PresenceStats) {
	p.one("sluice_presence_channels", "gauge", "Channels with presence or occupancy state on this node.", float64(st.Channels))
	p.family("sluice_presence_members", "gauge", "Presence member entries this node holds, by origin: local (its own connections) or remote (pushed by other nodes).")
	p.sample("sluice_presence_members", float64(st.Local), "origin", "local")
	p.sample("sluice_presence_members", float64(st.Members-st.Local), "origin", "remote")
	p.family("sluice_presence_memory_bytes", "gauge", "Presence memory by part: members (counted against presence-max-bytes) and channels (the counts kept per channel with a subscriber on some node, estimated).")
	p.sample("sluice_presence_memory_bytes", float64(st.Bytes), "part", "members")
	p.sample("sluice_presence_memory_bytes", float64(st.ChannelBytes), "part", "channels")
	p.one("sluice_presence_refused_total", "counter", "Presence joins refused by presence-max-members or presence-max-bytes (ERROR UNAVAILABLE).", float64(st.Refused))
	p.one("sluice_presence_dropped_total", "counter", "Members pushed by other nodes and not stored by a limit (queries say PARTIAL).", float64(st.Dropped))
	p.family("sluice_presence_deliveries_total", "counter", "Presence changes queued for the event loops, by kind (once per loop with watchers).")
	p.sample("sluice_presence_deliveries_total", float64(st.Events), "kind", "member")
	p.sample("sluice_presence_deliveries_total", float64(st.Occupied), "kind", "occupancy")
	p.family("sluice_presence_pushes_total", "counter", "Presence pushes between nodes: sent and answered, failed (sent again), received and applied, repeats ignored, snapshots received, RESYNC answered, overflows (a snapshot replaced waiting changes).")
	for _, kv := range []struct {
		k string
		v int64
	}{{"sent", st.Sync.Sent}, {"failed", st.Sync.Failures}, {"applied", st.Sync.Applied}, {"repeat", st.Sync.Repeats},
		{"snapshot", st.Sync.Snapshots}, {"resync", st.Sync.Resyncs}, {"overflow", st.Sync.Overflows}} {
		p.sample("sluice_presence_pushes_total", float64(kv.v), "outcome", kv.k)
	}
}
