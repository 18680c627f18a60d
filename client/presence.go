package client

import (
	"context"
	"fmt"
	"sort"

	"github.com/sluice-rtm/sluice/wire"
)

// Presence and occupancy (docs/presence.md, PROTOCOL.md 2.18).

// Member is one presence member of a channel: a connection that
// subscribed with WithPresence.
type Member struct {
	// ClientID is who the client is: its token's subject, or its static
	// token's name; empty without either.
	ClientID string
	// Node and Conn name the member's connection: the node it is
	// connected to and its id there.
	Node string
	Conn uint64
	// Info is the client info of its token (nil without). It belongs to
	// the caller.
	Info []byte
}

// Occupancy is a channel's counts over every node: its subscriptions, the
// connections that published to it lately, and its presence members.
type Occupancy = wire.Occupancy

// PresenceState is the answer to Presence.
type PresenceState struct {
	Occupancy Occupancy
	// Members are the channel's members, sorted by client id, node and
	// connection (empty for Occupancy).
	Members []Member
	// Partial: the server that answered holds fewer members than the
	// channel has (a memory limit, or another node's members on their
	// way); Occupancy is exact.
	Partial bool
}

// WithPresence enters the subscriber into the channel's presence: while
// the subscription lasts, its connection is a member, listed with the
// client id and client info of its token. A channel at the server's
// member limit refuses the subscription (a *ServerError with
// wire.CodeUnavailable). A connection's several presence subscriptions to
// one channel make one member. It needs a server with presence
// (WELCOME features): a SubOption that a server without it ignores.
func WithPresence() SubOption {
	return func(o *subOptions) error { o.pflags |= wire.FlagPresence; return nil }
}

// WithPresenceEvents makes the subscription deliver the channel's joins
// and leaves (KindJoin, KindLeave events, among its messages) and keep
// the channel's member set (Subscription.Members). Past the server's
// events limit a channel sends occupancy instead (KindOccupancy with
// EventsPaused) until it is small again. It needs the presence
// permission on the channel.
func WithPresenceEvents() SubOption {
	return func(o *subOptions) error { o.pflags |= wire.FlagPresenceEvents; return nil }
}

// WithOccupancy makes the subscription deliver the channel's occupancy
// (KindOccupancy events): at once, then whenever it changes, at most once
// per the server's occupancy interval (1 s by default). It needs the
// presence permission on the channel.
func WithOccupancy() SubOption {
	return func(o *subOptions) error { o.pflags |= wire.FlagOccupancy; return nil }
}

// Presence returns channel's members and occupancy as the server the Conn
// is connected to sees them (in a cluster, every node's members). It
// waits for the answer up to ctx; a refusal is a *ServerError (FORBIDDEN
// without the presence permission).
func (c *Conn) Presence(ctx context.Context, channel string) (PresenceState, error) {
	return c.presence(ctx, channel, false)
}

// Occupancy returns channel's occupancy (Presence without the members).
func (c *Conn) Occupancy(ctx context.Context, channel string) (Occupancy, error) {
	st, err := c.presence(ctx, channel, true)
	return st.Occupancy, err
}

// presQuery is a PRESENCE in flight: the reader gathers its frames
// (PRESENCE_STATE with MORE) and sends the result once. For a
// subscription's own sync (sync set), the result goes to it instead.
type presQuery struct {
	st    PresenceState
	reply chan presResult // cap 1; nil for a sync
	sync  *Subscription
}

type presResult struct {
	st  PresenceState
	err error
}

func (c *Conn) presence(ctx context.Context, channel string, countsOnly bool) (PresenceState, error) {
	if err := wire.ValidChannelString(channel); err != nil {
		return PresenceState{}, fmt.Errorf("%w: %w", ErrInvalidChannel, err)
	}
	var f wire.Flags
	if countsOnly {
		f = wire.FlagCountsOnly
	}
	for {
		if err := c.waitReady(ctx); err != nil {
			return PresenceState{}, err
		}
		s := c.cur.Load()
		if s == nil {
			continue
		}
		if s.welcome.Features&wire.FeaturePresence == 0 {
			return PresenceState{}, fmt.Errorf("%w (server %s)", ErrPresenceUnsupported, s.welcome.ServerName)
		}
		q := &presQuery{reply: make(chan presResult, 1)}
		id := c.nextReq()
		if !s.control(id, reqEntry{pres: q}, wire.AppendPresence(nil, id, f, channel)) {
			continue // the session is going: ask the next one
		}
		select {
		case r := <-q.reply:
			return r.st, r.err
		case <-s.done:
			return PresenceState{}, fmt.Errorf("client: presence: %w", ErrDisconnected)
		case <-ctx.Done():
			return PresenceState{}, fmt.Errorf("client: presence: %w", ctx.Err())
		}
	}
}

// The methods below run on the reader goroutine of session s.

// onPresenceState gathers one PRESENCE_STATE of a query; the last frame
// completes it.
func (s *session) onPresenceState(h wire.Header, body []byte) error {
	occ, ms, err := wire.DecodePresenceState(body, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	s.mu.Lock()
	e, ok := s.reqs[h.ID]
	if ok && h.Flags&wire.FlagMore == 0 {
		delete(s.reqs, h.ID)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		return nil // a query abandoned by its caller's context
	case e.pres == nil:
		return protocolErr("PRESENCE_STATE answers request %d, which was no PRESENCE", h.ID)
	}
	q := e.pres
	q.st.Occupancy, q.st.Partial = occ, h.Flags&wire.FlagPartial != 0
	for _, m := range ms {
		q.st.Members = append(q.st.Members, memberOf(m))
	}
	if h.Flags&wire.FlagMore != 0 {
		return nil
	}
	sortMembers(q.st.Members)
	if q.sync != nil {
		q.sync.synced(s, q)
		return nil
	}
	q.reply <- presResult{st: q.st}
	return nil
}

// onPresenceEvent delivers the joins and leaves of a PRESENCE_EVENT to
// its subscription (as KindJoin and KindLeave events) and applies them
// to its member set once it is synced.
func (s *session) onPresenceEvent(h wire.Header, body []byte) error {
	cs, err := wire.DecodePresenceEvent(body, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	sub := s.sub(h.ID)
	if sub == nil || sub.pflags&wire.FlagPresenceEvents == 0 {
		return nil // not asked for: dropped
	}
	for _, ch := range cs {
		m := memberOf(ch.Member)
		kind := KindJoin
		if ch.Kind == wire.PresenceLeave {
			kind = KindLeave
		}
		sub.applyChange(kind, m)
		if !s.deliver(sub, Event{Kind: kind, Channel: sub.channel, Member: m}) {
			return nil
		}
	}
	return nil
}

// onOccupancy delivers an OCCUPANCY to its subscription; for a
// subscription that keeps the member set, a pause makes the set stale and
// the resume syncs it again.
func (s *session) onOccupancy(h wire.Header, body []byte) error {
	o, err := wire.DecodeOccupancy(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	sub := s.sub(h.ID)
	if sub == nil || sub.pflags&(wire.FlagPresenceEvents|wire.FlagOccupancy) == 0 {
		return nil // not asked for: dropped
	}
	paused := h.Flags&wire.FlagEventsPaused != 0
	sub.onPause(s, paused)
	s.deliver(sub, Event{Kind: KindOccupancy, Channel: sub.channel, Occupancy: o, EventsPaused: paused})
	return nil
}

func memberOf(m wire.Member) Member {
	out := Member{ClientID: string(m.ClientID), Node: string(m.Node), Conn: m.Conn}
	if len(m.Info) > 0 {
		out.Info = append([]byte(nil), m.Info...)
	}
	return out
}

func sortMembers(ms []Member) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := &ms[i], &ms[j]
		if a.ClientID != b.ClientID {
			return a.ClientID < b.ClientID
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Conn < b.Conn
	})
}

// memberKey identifies a member in a set.
type memberKey struct {
	id, node string
	conn     uint64
}

// memberSet is a subscription's picture of the channel's members
// (WithPresenceEvents): the answer to a PRESENCE it sent after
// SUBSCRIBED (and after each resume or pause), with the joins and leaves
// that came after it applied. Guarded by the subscription's mu.
type memberSet struct {
	m       map[memberKey]Member
	synced  bool   // the answer came and no pause since
	partial bool   // the answer said PARTIAL
	paused  bool   // the last OCCUPANCY said EVENTS_PAUSED
	syncing uint32 // request id of the sync in flight, 0 if none
}

// startSync sends the PRESENCE whose answer starts the member set over.
// Called on the reader goroutine (or with c.mu held on a resume).
func (sub *Subscription) startSync(s *session) {
	id := sub.c.nextReq()
	sub.mu.Lock()
	sub.ms.synced, sub.ms.syncing = false, id
	sub.mu.Unlock()
	q := &presQuery{sync: sub}
	if !s.control(id, reqEntry{pres: q}, wire.AppendPresence(nil, id, 0, sub.channel)) {
		sub.mu.Lock()
		sub.ms.syncing = 0
		sub.mu.Unlock()
	}
}

// synced installs the answer of the subscription's sync query.
func (sub *Subscription) synced(_ *session, q *presQuery) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.ms.syncing = 0
	sub.ms.m = make(map[memberKey]Member, len(q.st.Members))
	for _, m := range q.st.Members {
		sub.ms.m[memberKey{m.ClientID, m.Node, m.Conn}] = m
	}
	sub.ms.synced = !sub.ms.paused
	sub.ms.partial = q.st.Partial
}

// applyChange applies a join or leave to a synced member set.
func (sub *Subscription) applyChange(kind EventKind, m Member) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.ms.synced {
		return // not synced yet: the answer to come includes it
	}
	k := memberKey{m.ClientID, m.Node, m.Conn}
	if kind == KindJoin {
		sub.ms.m[k] = m
	} else {
		delete(sub.ms.m, k)
	}
}

// onPause records a pause (the set goes stale) or a resume (it syncs
// again), for a subscription that keeps the set.
func (sub *Subscription) onPause(s *session, paused bool) {
	if sub.pflags&wire.FlagPresenceEvents == 0 {
		return
	}
	sub.mu.Lock()
	was := sub.ms.paused
	sub.ms.paused = paused
	if paused {
		sub.ms.synced = false
	}
	resync := was && !paused && sub.ms.syncing == 0
	sub.mu.Unlock()
	if resync {
		sub.startSync(s)
	}
}

// Members returns the channel's members as this subscription knows them
// (WithPresenceEvents): the server's answer to a query made after each
// SUBSCRIBED, kept up to date with the joins and leaves delivered since,
// sorted by client id, node and connection. complete is false while that
// answer has not come, while the channel's events are paused (it has more
// members than the server sends events for: query Conn.Presence), and
// when the server's answer was partial.
func (sub *Subscription) Members() (members []Member, complete bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for _, m := range sub.ms.m {
		members = append(members, m)
	}
	sortMembers(members)
	return members, sub.ms.synced && !sub.ms.partial
}

// failed completes a query refused by the server.
func (q *presQuery) failed(err error) {
	if q.sync != nil {
		q.sync.mu.Lock()
		q.sync.ms.syncing = 0
		q.sync.mu.Unlock()
		q.sync.c.log.Warn("presence sync refused", "channel", q.sync.channel, "err", err)
		return
	}
	q.reply <- presResult{err: err}
}
