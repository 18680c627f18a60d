package presence

import (
	"errors"
	"sync"

	"github.com/sluice-rtm/sluice/internal/mapshrink"
	"github.com/sluice-rtm/sluice/wire"
)

// Limits bound a Registry's memory and its event fan-out.
type Limits struct {
	// MaxMembers bounds one channel's members: a local Join when the
	// channel has MaxMembers already (over the cluster, as this node
	// knows it) fails with ErrChannelFull, and a node stores at most
	// MaxMembers member entries of a channel.
	MaxMembers int
	// MaxBytes bounds the memory of the member entries a node holds,
	// local and remote, at EntryCost each: a local Join past it fails
	// with ErrNodeFull, and remote members past it are not stored.
	MaxBytes int64
	// EventsMax: while a channel has more members than EventsMax, its
	// event watchers get no per-member events but occupancy (the channel
	// is paused); events resume once it has at most ResumeAt(EventsMax).
	EventsMax int
}

// ResumeAt is the member count at or below which a paused channel sends
// events again: three quarters of eventsMax, so that a channel hovering
// around the limit does not flap.
func ResumeAt(eventsMax int) int { return eventsMax - eventsMax/4 }

// EntryCost is the memory a member entry is counted at: a fixed cost
// (entryOverhead: the map slot, the entry and the key) plus its client id
// and info.
func EntryCost(clientID string, info []byte) int64 {
	return entryOverhead + int64(len(clientID)) + int64(len(info))
}

// ChannelCost and PartCost estimate the memory of a channel's record and
// of another node's share of it (BenchmarkChannelMemory: 188 bytes per
// channel with a subscription here, 523 per channel known from another
// node alone, at 14-byte names).
const (
	ChannelCost = 192
	PartCost    = 336
)

// entryOverhead is the fixed cost of a member entry. BenchmarkMemberMemory
// measures the heap per member of a channel of 10,000 members with a
// 16-byte client id and no info at 98 bytes for local members and 78 for
// remote ones (BENCHMARKS.md), so 82 and 62 bytes besides the id; a map
// grows by doubling, which can add half again.
const entryOverhead = 128

// Errors of Join.
var (
	// ErrChannelFull: the channel has Limits.MaxMembers members.
	ErrChannelFull = errors.New("presence: the channel has the most members allowed")
	// ErrNodeFull: the node's member entries reached Limits.MaxBytes.
	ErrNodeFull = errors.New("presence: the node's presence memory is full")
)

// Member is one presence member as a Registry reports it. Info is shared
// and never modified: treat it as read-only.
type Member struct {
	ClientID string
	Node     string // the node the member's connection is on
	Conn     uint64 // the connection's id on that node
	Info     []byte
}

// Kind says what a Delivery carries.
type Kind uint8

// Delivery kinds.
const (
	Join      Kind = 1 // Member joined (for the channel's event watchers)
	Leave     Kind = 2 // Member left (for the channel's event watchers)
	Occupancy Kind = 3 // Occ and Paused (for occupancy watchers; event watchers when Paused changed, or while paused)
)

// Delivery is one change for the watchers of a channel on a sink.
type Delivery struct {
	Channel string
	Kind    Kind
	Member  Member
	Occ     wire.Occupancy
	Paused  bool
}

// Stats are a Registry's gauges and counters.
type Stats struct {
	Channels int   // channels with any presence state or watcher (gauge)
	Members  int   // member entries held, local and remote (gauge)
	Local    int   // of which local (gauge)
	Bytes    int64 // their cost (EntryCost; gauge)
	// Parts counts the other nodes' shares of channels this node holds
	// (their counts of a channel; gauge); ChannelBytes estimates the
	// memory of the channel records, local and remote (ChannelCost,
	// PartCost; gauge). They grow with the channels that have a
	// subscriber on some node, as the rest of a node's per-channel state
	// does; Limits bound the members, not them.
	Parts        int
	ChannelBytes int64
	Refused      int64 // local joins refused by a limit
	Dropped      int64 // remote members not stored by a limit
	Events       int64 // join and leave deliveries queued (once per sink)
	Occupied     int64 // occupancy deliveries queued (once per sink)
	Sync         SyncStats
}

// Registry is a node's picture of presence and occupancy. It is safe for
// concurrent use; one mutex guards it, held only for in-memory work (no
// I/O, no callback but wake, which is called without it).
type Registry struct {
	self string
	lim  Limits
	// wake is called, without the lock, when a sink's queue of deliveries
	// became non-empty; the sink then calls Take.
	wake func(sink int)
	// kick is called, without the lock, when a local change was recorded
	// for the peers (Syncer wakes its senders); nil without a Syncer.
	kick func()

	mu      sync.Mutex
	chans   map[string]*channel
	chansPk mapshrink.Peak
	queues  []sinkQueue
	dirty   map[*channel]struct{} // counts changed since the last Tick, watched for occupancy
	stored  int
	local   int
	parts   int // remote parts held (Stats.Parts)
	bytes   int64
	stats   Stats
	remote  // origins: the other nodes' parts (remote.go)
	out     // peers: what this node pushes to each (sync.go)
}

type sinkQueue struct {
	items []Delivery
	woken bool // wake was called and Take has not run since
}

// channel is one channel's state. Its totals are the local part plus the
// counts each remote part last reported.
type channel struct {
	name   string
	local  part
	remote map[string]*part // by node
	watch  []watchers       // by sink
	// nEvents and nOcc count the watchers over every sink.
	nEvents, nOcc int
	// subs, pubs and members are the totals (local + remote counts);
	// stored counts the member entries held (local + remote).
	subs, pubs, members int64
	stored              int
	paused              bool
}

// part is one node's share of a channel: its counts and its members.
type part struct {
	subs, pubs, nmembers uint32
	members              map[key]*entry
	// dropped counts remote members not stored (Limits) and not yet left.
	dropped int
	gen     uint32 // remote: the snapshot generation the counts belong to
}

// key is a member within one node: its connection and client id.
type key struct {
	conn uint64
	id   string
}

type entry struct {
	info []byte
	refs int32  // local: the connection's presence subscriptions to the channel
	gen  uint32 // remote: the snapshot generation that last reported it
}

type watchers struct{ events, occ int32 }

// New returns an empty Registry for node self with sinks event loops;
// wake(sink) is called when sink has deliveries to Take.
func New(self string, sinks int, lim Limits, wake func(sink int)) *Registry {
	r := &Registry{self: self, lim: lim, wake: wake, chans: make(map[string]*channel),
		queues: make([]sinkQueue, sinks), dirty: make(map[*channel]struct{})}
	r.initRemote()
	r.initOut()
	return r
}

// Self returns the node's name.
func (r *Registry) Self() string { return r.self }

// chanFor returns the channel's state, creating it.
func (r *Registry) chanFor(name string) *channel {
	c := r.chans[name]
	if c == nil {
		c = &channel{name: name}
		r.chans[name] = c
	}
	return c
}

// release forgets c when nothing refers to it any more.
func (r *Registry) release(c *channel) {
	if c.nEvents > 0 || c.nOcc > 0 || c.local.subs > 0 || c.local.pubs > 0 || len(c.local.members) > 0 || len(c.remote) > 0 {
		return
	}
	delete(r.dirty, c)
	r.chans = mapshrink.Delete(r.chans, c.name, &r.chansPk)
}

// Join enters connection conn (client id clientID, client info info) of
// this node into channel's presence. A connection that joined already
// (another of its subscriptions) counts once: the join is counted, and
// the member leaves at its last Leave. It fails with ErrChannelFull or
// ErrNodeFull; info is copied.
func (r *Registry) Join(channel string, conn uint64, clientID string, info []byte) error {
	r.mu.Lock()
	c := r.chanFor(channel)
	k := key{conn, clientID}
	if e := c.local.members[k]; e != nil {
		e.refs++
		r.mu.Unlock()
		return nil
	}
	cost := EntryCost(clientID, info)
	var err error
	switch {
	case c.members >= int64(r.lim.MaxMembers) || c.stored >= r.lim.MaxMembers:
		err = ErrChannelFull
	case r.bytes+cost > r.lim.MaxBytes:
		err = ErrNodeFull
	}
	if err != nil {
		r.stats.Refused++
		r.release(c)
		r.mu.Unlock()
		return err
	}
	if c.local.members == nil {
		c.local.members = make(map[key]*entry)
	}
	e := &entry{info: append([]byte(nil), info...), refs: 1}
	c.local.members[k] = e
	c.local.nmembers++
	r.account(c, cost, 1)
	r.local++
	m := Member{ClientID: clientID, Node: r.self, Conn: conn, Info: e.info}
	r.recordJoin(c, &m)
	r.changed(c, 0, 0, 1, Join, &m)
	r.unlockWaking()
	return nil
}

// Leave ends one presence subscription of connection conn to channel;
// the member leaves at the connection's last one.
func (r *Registry) Leave(channel string, conn uint64, clientID string) {
	r.mu.Lock()
	c := r.chans[channel]
	k := key{conn, clientID}
	var e *entry
	if c != nil {
		e = c.local.members[k]
	}
	if e == nil {
		r.mu.Unlock()
		return
	}
	if e.refs--; e.refs > 0 {
		r.mu.Unlock()
		return
	}
	delete(c.local.members, k)
	c.local.nmembers--
	r.account(c, -EntryCost(clientID, e.info), -1)
	r.local--
	m := Member{ClientID: clientID, Node: r.self, Conn: conn, Info: e.info}
	r.recordLeave(c, &m)
	r.changed(c, 0, 0, -1, Leave, &m)
	r.release(c)
	r.unlockWaking()
}

// account adds cost and n member entries to c's and the node's tallies.
func (r *Registry) account(c *channel, cost int64, n int) {
	c.stored += n
	r.stored += n
	r.bytes += cost
}

// Count adds subs subscriptions and pubs publishers of this node to
// channel's occupancy (negative deltas remove them).
func (r *Registry) Count(channel string, subs, pubs int) {
	if subs == 0 && pubs == 0 {
		return
	}
	r.mu.Lock()
	c := r.chanFor(channel)
	c.local.subs = uint32(int64(c.local.subs) + int64(subs))
	c.local.pubs = uint32(int64(c.local.pubs) + int64(pubs))
	r.recordCounts(c)
	r.changed(c, subs, pubs, 0, 0, nil)
	r.release(c)
	r.unlockWaking()
}

// Watch adds events event watchers and occ occupancy watchers of sink to
// channel (negative deltas remove them). A watcher's first occupancy is
// the caller's to send (Occupancy); later changes come as deliveries.
func (r *Registry) Watch(channel string, sink, events, occ int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chanFor(channel)
	if c.watch == nil {
		c.watch = make([]watchers, len(r.queues))
	}
	w := &c.watch[sink]
	w.events += int32(events)
	w.occ += int32(occ)
	c.nEvents += events
	c.nOcc += occ
	if c.nEvents == 0 && c.nOcc == 0 {
		c.watch = nil
	}
	r.release(c)
}

// changed applies a change of c's totals (subs, pubs and members
// deltas) and queues what its watchers should see: the member change
// (kind Join or Leave, for event watchers, unless the channel is
// paused), a pause or resume (at once, for every watcher), and else a
// mark for the next Tick's occupancy. r.mu is held.
func (r *Registry) changed(c *channel, subs, pubs, members int, kind Kind, m *Member) {
	c.subs += int64(subs)
	c.pubs += int64(pubs)
	c.members += int64(members)
	if c.nEvents == 0 && c.nOcc == 0 {
		c.paused = c.members > int64(r.lim.EventsMax)
		return
	}
	switch {
	case !c.paused && c.members > int64(r.lim.EventsMax):
		c.paused = true
		r.queueOcc(c)
		return
	case c.paused && c.members <= int64(ResumeAt(r.lim.EventsMax)):
		c.paused = false
		r.queueOcc(c)
		return
	}
	if kind != 0 && !c.paused && c.nEvents > 0 {
		for i := range c.watch {
			if c.watch[i].events > 0 {
				r.push(i, Delivery{Channel: c.name, Kind: kind, Member: *m})
				r.stats.Events++
			}
		}
	}
	if c.nOcc > 0 || (c.paused && c.nEvents > 0) {
		r.dirty[c] = struct{}{}
	}
}

// occ returns c's occupancy; counts past the u32 range saturate.
func (c *channel) occ() wire.Occupancy {
	u := func(v int64) uint32 { return uint32(min(max(v, 0), 1<<32-1)) }
	return wire.Occupancy{Subscribers: u(c.subs), Publishers: u(c.pubs), Members: u(c.members)}
}

// queueOcc queues c's occupancy for every sink watching it (event
// watchers included: a pause or resume, or a change while paused).
func (r *Registry) queueOcc(c *channel) {
	delete(r.dirty, c)
	d := Delivery{Channel: c.name, Kind: Occupancy, Occ: c.occ(), Paused: c.paused}
	for i := range c.watch {
		w := c.watch[i]
		if w.occ > 0 || w.events > 0 {
			r.push(i, d)
			r.stats.Occupied++
		}
	}
}

// push queues d for sink. r.mu is held.
func (r *Registry) push(sink int, d Delivery) {
	q := &r.queues[sink]
	q.items = append(q.items, d)
}

// unlockWaking unlocks r.mu and then wakes the sinks whose queues became
// non-empty, and the peers' senders.
func (r *Registry) unlockWaking() {
	var wake []int
	for i := range r.queues {
		q := &r.queues[i]
		if len(q.items) > 0 && !q.woken {
			q.woken = true
			wake = append(wake, i)
		}
	}
	kick := r.outPending
	r.outPending = false
	r.mu.Unlock()
	for _, i := range wake {
		r.wake(i)
	}
	if kick && r.kick != nil {
		r.kick()
	}
}

// Take returns sink's queued deliveries, in the order the registry
// applied their changes, appended to dst.
func (r *Registry) Take(sink int, dst []Delivery) []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := &r.queues[sink]
	dst = append(dst, q.items...)
	clear(q.items)
	if cap(q.items) > 1024 {
		q.items = nil
	} else {
		q.items = q.items[:0]
	}
	q.woken = false
	return dst
}

// Tick queues the occupancy of every watched channel whose counts changed
// since the last Tick: at most one occupancy delivery per channel and
// sink per Tick, however many changes there were.
func (r *Registry) Tick() {
	r.mu.Lock()
	for c := range r.dirty {
		r.queueOcc(c)
	}
	clear(r.dirty)
	r.unlockWaking()
}

// Occupancy returns channel's occupancy and whether its events are paused.
func (r *Registry) Occupancy(channel string) (wire.Occupancy, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chans[channel]
	if c == nil {
		return wire.Occupancy{}, false
	}
	return c.occ(), c.paused || c.members > int64(r.lim.EventsMax)
}

// Query returns channel's occupancy and, unless countsOnly, its members
// appended to dst (local ones first); partial reports that this node
// holds fewer member entries than the channel has members (a limit, or a
// peer's push not yet received).
func (r *Registry) Query(channel string, countsOnly bool, dst []Member) (o wire.Occupancy, members []Member, partial bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chans[channel]
	if c == nil {
		return wire.Occupancy{}, dst, false
	}
	partial = int64(c.stored) < c.members
	if countsOnly {
		return c.occ(), dst, partial
	}
	for k, e := range c.local.members {
		dst = append(dst, Member{ClientID: k.id, Node: r.self, Conn: k.conn, Info: e.info})
	}
	for node, p := range c.remote {
		for k, e := range p.members {
			dst = append(dst, Member{ClientID: k.id, Node: node, Conn: k.conn, Info: e.info})
		}
	}
	return c.occ(), dst, partial
}

// Stats returns the registry's gauges and counters.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Channels, s.Members, s.Local, s.Bytes = len(r.chans), r.stored, r.local, r.bytes
	s.Parts = r.parts
	s.ChannelBytes = int64(s.Channels)*ChannelCost + int64(s.Parts)*PartCost
	s.Sync = r.syncStats
	return s
}
