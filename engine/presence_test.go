package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/jwtauth"
	"github.com/sluice-rtm/sluice/presence"
	"github.com/sluice-rtm/sluice/wire"
)

// presHello dials addr and completes a handshake asking for
// FeaturePresence.
func presHello(t testing.TB, addr string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	c.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: wire.FeaturePresence, Name: "presence-test"}))
	h, body := c.next()
	if h.Type != wire.TypeWelcome {
		t.Fatalf("want WELCOME, got %s", describe(h, body))
	}
	w, err := wire.DecodeWelcome(body)
	if err != nil || w.Features&wire.FeaturePresence == 0 {
		t.Fatalf("WELCOME features %v, %v", w.Features, err)
	}
	return c
}

// presFrame reads the next frame that is not a PING (answered), a DATA
// or a GAP.
func (c *rawConn) presFrame() (wire.Header, []byte) {
	c.t.Helper()
	for {
		h, body := c.next()
		switch h.Type {
		case wire.TypePing:
			c.write(wire.AppendPong(nil, h.ID))
		case wire.TypeData, wire.TypeGap:
		default:
			return h, body
		}
	}
}

// psubscribe subscribes at the live edge with presence flags and returns
// the OCCUPANCY that follows SUBSCRIBED for a watcher (zero otherwise).
func (c *rawConn) psubscribe(subID uint32, ch string, flags wire.Flags) (wire.Occupancy, bool) {
	c.t.Helper()
	id := c.nextID()
	c.write(wire.AppendSubscribeFlags(nil, id, flags, wire.Subscribe{SubID: subID, Channel: []byte(ch)}))
	h, body := c.presFrame()
	if h.Type != wire.TypeSubscribed || h.ID != id {
		c.t.Fatalf("subscribe %q: want SUBSCRIBED id %d, got %s", ch, id, describe(h, body))
	}
	if flags&(wire.FlagPresenceEvents|wire.FlagOccupancy) == 0 {
		return wire.Occupancy{}, false
	}
	return c.expectOcc(subID)
}

// expectOcc reads the next presence frame, which must be an OCCUPANCY of
// subID.
func (c *rawConn) expectOcc(subID uint32) (wire.Occupancy, bool) {
	c.t.Helper()
	h, body := c.presFrame()
	if h.Type != wire.TypeOccupancy || h.ID != subID {
		c.t.Fatalf("want OCCUPANCY of sub %d, got %s", subID, describe(h, body))
	}
	o, err := wire.DecodeOccupancy(body)
	if err != nil {
		c.t.Fatal(err)
	}
	return o, h.Flags&wire.FlagEventsPaused != 0
}

// expectChanges reads the next presence frame, which must be a
// PRESENCE_EVENT of subID, and renders its changes as "join ID@node".
func (c *rawConn) expectChanges(subID uint32) []string {
	c.t.Helper()
	h, body := c.presFrame()
	if h.Type != wire.TypePresenceEvent || h.ID != subID {
		c.t.Fatalf("want PRESENCE_EVENT of sub %d, got %s", subID, describe(h, body))
	}
	cs, err := wire.DecodePresenceEvent(body, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, ch := range cs {
		out = append(out, fmt.Sprintf("%v %d@%s", ch.Kind, ch.Member.Conn, ch.Member.Node))
	}
	return out
}

// presState is a PRESENCE answer.
type presState struct {
	occ     wire.Occupancy
	members []string // "conn@node", sorted
	partial bool
	frames  int
}

// query sends PRESENCE and reads its PRESENCE_STATE frames.
func (c *rawConn) query(ch string, countsOnly bool) presState {
	c.t.Helper()
	st, err := c.queryErr(ch, countsOnly)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

func (c *rawConn) queryErr(ch string, countsOnly bool) (presState, error) {
	id := c.nextID()
	var f wire.Flags
	if countsOnly {
		f = wire.FlagCountsOnly
	}
	if err := c.writeErr(wire.AppendPresence(nil, id, f, ch)); err != nil {
		return presState{}, err
	}
	var st presState
	for {
		h, body, err := c.tryNext(waitFor)
		if err != nil {
			return st, err
		}
		switch {
		case h.Type == wire.TypePing:
			_ = c.writeErr(wire.AppendPong(nil, h.ID))
			continue
		case h.Type != wire.TypePresenceState || h.ID != id:
			if h.Type == wire.TypeError || h.Type == wire.TypeGoAway {
				return st, fmt.Errorf("PRESENCE answered by %s", describe(h, body))
			}
			continue // events and occupancy of the connection's subscriptions
		}
		o, ms, err := wire.DecodePresenceState(body, nil)
		if err != nil {
			return st, err
		}
		if st.frames > 0 && o != st.occ {
			return st, fmt.Errorf("frame %d has counts %+v, the first %+v", st.frames, o, st.occ)
		}
		st.occ, st.partial = o, h.Flags&wire.FlagPartial != 0
		st.frames++
		for _, m := range ms {
			st.members = append(st.members, fmt.Sprintf("%d@%s", m.Conn, m.Node))
		}
		if h.Flags&wire.FlagMore == 0 {
			slices.Sort(st.members)
			return st, nil
		}
	}
}

// unsubscribe sends UNSUBSCRIBE and waits for its UNSUBSCRIBED.
func (c *rawConn) unsubscribe(subID uint32) {
	c.t.Helper()
	id := c.nextID()
	c.write(wire.AppendUnsubscribe(nil, id, subID))
	for {
		h, body := c.presFrame()
		if h.Type == wire.TypeUnsubscribed && h.ID == id {
			return
		}
		if h.Type == wire.TypeError {
			c.t.Fatalf("unsubscribe: %s", describe(h, body))
		}
	}
}

// connIDs returns the connection ids the server gave its open client
// connections, oldest first.
func connIDs(t *testing.T, s *Server) []uint64 {
	var ids []uint64
	onLoops(t, s, func(l *loop) {
		for c := range l.conns {
			if c.hello && !c.closed {
				ids = append(ids, c.id)
			}
		}
	})
	slices.Sort(ids)
	return ids
}

func memberOf(id uint64, node string) string { return fmt.Sprintf("%d@%s", id, node) }

// TestPresence_QueryListsMembersOncePerConnection: a connection with two
// presence subscriptions of a channel is one member, which leaves with
// the second unsubscription; a subscription without FlagPresence is
// counted as a subscriber only.
func TestPresence_QueryListsMembersOncePerConnection(t *testing.T) {
	s := startTest(t, nil)
	a := presHello(t, s.Addr())
	a.psubscribe(1, "room", wire.FlagPresence)
	a.psubscribe(2, "room", wire.FlagPresence)
	b := presHello(t, s.Addr())
	b.psubscribe(1, "room", wire.FlagPresence)
	plain := presHello(t, s.Addr())
	plain.psubscribe(1, "room", 0)
	q := presHello(t, s.Addr())
	ids := connIDs(t, s)
	name := s.opts.ServerName
	st := q.query("room", false)
	want := []string{memberOf(ids[0], name), memberOf(ids[1], name)}
	if st.occ != (wire.Occupancy{Subscribers: 4, Members: 2}) || !slices.Equal(st.members, want) || st.partial || st.frames != 1 {
		t.Fatalf("query: %+v, want members %v", st, want)
	}
	if c := q.query("room", true); c.occ != st.occ || len(c.members) != 0 {
		t.Fatalf("counts only: %+v", c)
	}
	a.unsubscribe(1)
	if st := q.query("room", false); st.occ.Members != 2 || st.occ.Subscribers != 3 {
		t.Fatalf("after one of a's two unsubscriptions: %+v", st)
	}
	a.unsubscribe(2)
	if st := q.query("room", false); !slices.Equal(st.members, want[1:]) || st.occ != (wire.Occupancy{Subscribers: 2, Members: 1}) {
		t.Fatalf("after a's second unsubscription: %+v", st)
	}
	if st := q.query("nobody.here", false); st.occ != (wire.Occupancy{}) || len(st.members) != 0 {
		t.Fatalf("an unused channel: %+v", st)
	}
}

// TestPresence_EventsOfJoinsAndLeaves: an events subscription gets the
// channel's occupancy at once, then a join per entering connection and a
// leave when it unsubscribes or disconnects; its own connection's join
// is not sent to it.
func TestPresence_EventsOfJoinsAndLeaves(t *testing.T) {
	s := startTest(t, nil)
	w := presHello(t, s.Addr())
	if o, paused := w.psubscribe(9, "room", wire.FlagPresence|wire.FlagPresenceEvents); o != (wire.Occupancy{Subscribers: 1, Members: 1}) || paused {
		t.Fatalf("first occupancy %+v paused %v", o, paused)
	}
	name := s.opts.ServerName
	a := presHello(t, s.Addr())
	a.psubscribe(1, "room", wire.FlagPresence)
	ida := connIDs(t, s)[1]
	if got := w.expectChanges(9); !slices.Equal(got, []string{"join " + memberOf(ida, name)}) {
		t.Fatalf("got %v", got)
	}
	a.unsubscribe(1)
	if got := w.expectChanges(9); !slices.Equal(got, []string{"leave " + memberOf(ida, name)}) {
		t.Fatalf("got %v", got)
	}
	b := presHello(t, s.Addr())
	b.psubscribe(1, "room", wire.FlagPresence)
	idb := connIDs(t, s)[2]
	if got := w.expectChanges(9); !slices.Equal(got, []string{"join " + memberOf(idb, name)}) {
		t.Fatalf("got %v", got)
	}
	b.nc.Close()
	if got := w.expectChanges(9); !slices.Equal(got, []string{"leave " + memberOf(idb, name)}) {
		t.Fatalf("after b disconnected: %v", got)
	}
}

// TestPresence_OccupancyStream: an occupancy subscription gets the counts
// whenever they change (at most once per OccupancyInterval): new
// subscriptions, members and publishers, and publishers gone when their
// connection closes.
func TestPresence_OccupancyStream(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Presence.OccupancyInterval = 20 * time.Millisecond })
	w := presHello(t, s.Addr())
	w.psubscribe(3, "room", wire.FlagOccupancy)
	want := func(o wire.Occupancy) {
		t.Helper()
		for {
			got, paused := w.expectOcc(3)
			if paused {
				t.Fatalf("paused with %+v", got)
			}
			if got == o {
				return
			}
		}
	}
	var subs []*rawConn
	for i := range 3 {
		c := presHello(t, s.Addr())
		c.psubscribe(1, "room", wire.FlagPresence)
		subs = append(subs, c)
		want(wire.Occupancy{Subscribers: uint32(2 + i), Members: uint32(1 + i)})
	}
	pub := presHello(t, s.Addr())
	pub.publish("room", []byte("x"))
	want(wire.Occupancy{Subscribers: 4, Publishers: 1, Members: 3})
	pub.nc.Close()
	subs[0].nc.Close()
	want(wire.Occupancy{Subscribers: 3, Members: 2})
}

// TestPresence_PublishersExpireAfterTheWindow: a connection that stops
// publishing stops counting as a publisher PublisherWindow later.
func TestPresence_PublishersExpireAfterTheWindow(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Presence.PublisherWindow = time.Second })
	pub := presHello(t, s.Addr())
	pub.publish("room", []byte("x"))
	q := presHello(t, s.Addr())
	if st := q.query("room", true); st.occ.Publishers != 1 {
		t.Fatalf("after a publish: %+v", st.occ)
	}
	start := time.Now()
	eventually(t, waitFor, "the publisher expired", func() bool { return q.query("room", true).occ.Publishers == 0 })
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("expired after %v, window 1s", d)
	}
}

// TestPresence_EventsPausePastEventsMax: past EventsMax members an events
// subscription gets OCCUPANCY with EVENTS_PAUSED instead of joins, and
// while paused occupancy instead of joins and leaves; at three quarters
// of EventsMax an OCCUPANCY without the flag, and events again.
func TestPresence_EventsPausePastEventsMax(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Presence.EventsMax = 4 }) // resumes at 3
	w := presHello(t, s.Addr())
	w.psubscribe(5, "room", wire.FlagPresenceEvents)
	var ms []*rawConn
	for range 4 {
		c := presHello(t, s.Addr())
		c.psubscribe(1, "room", wire.FlagPresence)
		ms = append(ms, c)
		if got := w.expectChanges(5); len(got) != 1 || !strings.HasPrefix(got[0], "join ") {
			t.Fatalf("join: %v", got)
		}
	}
	fifth := presHello(t, s.Addr())
	fifth.psubscribe(1, "room", wire.FlagPresence)
	if o, paused := w.expectOcc(5); !paused || o.Members != 5 {
		t.Fatalf("the fifth member: %+v paused %v", o, paused)
	}
	fifth.nc.Close()
	if o, paused := w.expectOcc(5); !paused || o.Members != 4 {
		t.Fatalf("back to four: %+v paused %v", o, paused)
	}
	ms[0].nc.Close()
	if o, paused := w.expectOcc(5); paused || o.Members != 3 {
		t.Fatalf("resumed at three: %+v paused %v", o, paused)
	}
	ms[1].nc.Close()
	if got := w.expectChanges(5); len(got) != 1 || !strings.HasPrefix(got[0], "leave ") {
		t.Fatalf("events again: %v", got)
	}
}

// TestPresence_LimitsRefuseJoins: a SUBSCRIBE that would enter a channel
// at MaxMembers gets ERROR UNAVAILABLE and no subscription; the same
// subscription without FlagPresence is fine; the refusal is counted.
func TestPresence_LimitsRefuseJoins(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Presence.MaxMembers, o.Presence.EventsMax = 2, 2 })
	for range 2 {
		presHello(t, s.Addr()).psubscribe(1, "room", wire.FlagPresence)
	}
	c := presHello(t, s.Addr())
	id := c.nextID()
	c.write(wire.AppendSubscribeFlags(nil, id, wire.FlagPresence, wire.Subscribe{SubID: 1, Channel: []byte("room")}))
	h, e := c.expectErrorFrame()
	if h.ID != id || e.Code != wire.CodeUnavailable || !e.Retriable {
		t.Fatalf("refusal %d %+v", h.ID, e)
	}
	c.psubscribe(1, "room", 0) // the id is free: no subscription was made
	if st := c.query("room", true); st.occ != (wire.Occupancy{Subscribers: 3, Members: 2}) {
		t.Fatalf("occupancy %+v", st.occ)
	}
	m := s.Metrics(context.Background())
	if m.Presence.Refused != 1 || m.Presence.Local != 2 {
		t.Fatalf("presence metrics %+v", m.Presence)
	}
	var sb strings.Builder
	if err := WriteMetrics(&sb, m); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{`sluice_presence_members{origin="local"} 2`, "sluice_presence_refused_total 1",
		fmt.Sprintf(`sluice_presence_memory_bytes{part="members"} %d`, 2*presence.EntryCost("", nil)),
		fmt.Sprintf(`sluice_presence_memory_bytes{part="channels"} %d`, presence.ChannelCost)} {
		if !strings.Contains(sb.String(), line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
}

// TestPresence_NeedsTheFeature: without FeaturePresence the SUBSCRIBE
// flags are ignored (no member, no OCCUPANCY) and a PRESENCE frame is
// ERROR UNKNOWN_TYPE, which closes the connection.
func TestPresence_NeedsTheFeature(t *testing.T) {
	s := startTest(t, nil)
	old, _ := helloRaw(t, s.Addr())
	id := old.nextID()
	old.write(wire.AppendSubscribeFlags(nil, id, wire.SubscribePresenceFlags, wire.Subscribe{SubID: 1, Channel: []byte("room")}))
	if h, body := old.next(); h.Type != wire.TypeSubscribed {
		t.Fatalf("got %s", describe(h, body))
	}
	q := presHello(t, s.Addr())
	if st := q.query("room", false); st.occ != (wire.Occupancy{Subscribers: 1}) || len(st.members) != 0 {
		t.Fatalf("the flags of a client without the feature counted: %+v", st)
	}
	old.write(wire.AppendPresence(nil, old.nextID(), 0, "room"))
	if e := old.expectError(); e.Code != wire.CodeUnknownType {
		t.Fatalf("PRESENCE without the feature: %+v", e)
	}
	old.expectClosed()
}

// TestPresence_QueryRefusals: an invalid channel is INVALID_CHANNEL, a
// channel the client may not read FORBIDDEN (the connection carries on),
// a malformed PRESENCE a PROTOCOL_ERROR.
func TestPresence_QueryRefusals(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.Auth = &AuthConfig{Roles: []Role{{Name: "r", Subscribe: []string{"ok.>"}}}, Anonymous: "r"}
	})
	c := presHello(t, s.Addr())
	c.write(wire.AppendPresence(nil, c.nextID(), 0, "has space"))
	if e := c.expectError(); e.Code != wire.CodeInvalidChannel {
		t.Fatalf("invalid channel: %+v", e)
	}
	c.write(wire.AppendPresence(nil, c.nextID(), 0, "secret.room"))
	if e := c.expectError(); e.Code != wire.CodeForbidden {
		t.Fatalf("forbidden channel: %+v", e)
	}
	if st := c.query("ok.room", true); st.occ != (wire.Occupancy{}) {
		t.Fatalf("allowed channel: %+v", st)
	}
	c.write(append(wire.AppendHeader(nil, wire.TypePresence, 0, c.nextID(), 3), 0, 'x', 'y'))
	if e := c.expectError(); e.Code != wire.CodeProtocolError {
		t.Fatalf("malformed: %+v", e)
	}
	c.expectClosed()
}

// TestAppendPresenceAnswer: members are split into PRESENCE_STATE frames
// within the body limit, every frame with the same counts and PARTIAL,
// MORE on all but the last; an empty answer is one frame.
func TestAppendPresenceAnswer(t *testing.T) {
	o := wire.Occupancy{Subscribers: 9, Publishers: 1, Members: 300}
	var ms []presence.Member
	for i := range 300 {
		ms = append(ms, presence.Member{ClientID: fmt.Sprintf("client-%03d", i), Node: "n1", Conn: uint64(i), Info: []byte(strings.Repeat("i", 40))})
	}
	const maxBody = 8192
	out, _ := appendPresenceAnswer(nil, nil, 7, o, ms, true, maxBody)
	var got []string
	frames := 0
	for len(out) > 0 {
		h, body, n, err := wire.Split(out, maxBody)
		if err != nil {
			t.Fatal(err)
		}
		out = out[n:]
		frames++
		occ, members, err := wire.DecodePresenceState(body, nil)
		if err != nil || occ != o || h.ID != 7 || h.Flags&wire.FlagPartial == 0 || (h.Flags&wire.FlagMore == 0) != (len(out) == 0) {
			t.Fatalf("frame %d: %+v %v flags %#x err %v", frames, occ, h.ID, h.Flags, err)
		}
		for _, m := range members {
			got = append(got, string(m.ClientID))
		}
	}
	if frames < 2 || len(got) != 300 || got[0] != "client-000" || got[299] != "client-299" {
		t.Fatalf("%d frames, %d members", frames, len(got))
	}
	out, _ = appendPresenceAnswer(nil, nil, 8, o, nil, false, maxBody)
	if h, body, n, err := wire.Split(out, maxBody); err != nil || n != len(out) || h.Flags != 0 || len(body) != wire.PresenceStateFixedLen {
		t.Fatalf("empty answer: %v %d %v", h, n, err)
	}
}

// presLogin dials addr and completes a handshake with token, asking for
// FeaturePresence.
func presLogin(t *testing.T, addr, token string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	c.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: wire.FeaturePresence, Token: []byte(token)}))
	if h, body := c.next(); h.Type != wire.TypeWelcome {
		t.Fatalf("want WELCOME, got %s", describe(h, body))
	}
	return c
}

// TestPresence_ClientIDAndInfoFromTokens: a member is listed with the
// client id of its token (a static token's name, a JWT's sub) and the
// info claim of its JWT; reading presence needs the presence capability
// (a JWT whose caps give none is refused, though it may enter).
func TestPresence_ClientIDAndInfoFromTokens(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	alice := presLogin(t, s.Addr(), tokAlice)
	alice.psubscribe(1, "chat.room", wire.FlagPresence|wire.FlagPresenceEvents)
	carol := presLogin(t, s.Addr(), mintHS(t, clock, jwtauth.MintClaims{Subject: "carol", Info: []byte(`{"name":"Carol"}`),
		Caps: &jwtauth.Caps{Subscribe: []string{"chat.*"}, Presence: []string{}}}))
	carol.psubscribe(1, "chat.room", wire.FlagPresence)
	h, body := alice.presFrame()
	cs, err := wire.DecodePresenceEvent(body, nil)
	if h.Type != wire.TypePresenceEvent || err != nil || len(cs) != 1 || string(cs[0].Member.ClientID) != "carol" ||
		string(cs[0].Member.Info) != `{"name":"Carol"}` || cs[0].Kind != wire.PresenceJoin {
		t.Fatalf("alice got %s %+v %v", describe(h, body), cs, err)
	}
	id := alice.nextID()
	alice.write(wire.AppendPresence(nil, id, 0, "chat.room"))
	h, body = alice.presFrame()
	_, ms, err := wire.DecodePresenceState(body, nil)
	if h.Type != wire.TypePresenceState || err != nil || len(ms) != 2 {
		t.Fatalf("query: %s %v", describe(h, body), err)
	}
	got := map[string]string{}
	for _, m := range ms {
		got[string(m.ClientID)] = string(m.Info)
	}
	if len(got) != 2 || got["alice"] != "" || got["carol"] != `{"name":"Carol"}` {
		t.Fatalf("members %v", got)
	}
	carol.write(wire.AppendPresence(nil, carol.nextID(), 0, "chat.room"))
	if e := carol.expectError(); e.Code != wire.CodeForbidden {
		t.Fatalf("carol's query: %+v", e)
	}
	carol.write(wire.AppendSubscribeFlags(nil, carol.nextID(), wire.FlagPresenceEvents, wire.Subscribe{SubID: 2, Channel: []byte("chat.room")}))
	if e := carol.expectError(); e.Code != wire.CodeForbidden {
		t.Fatalf("carol's events subscription: %+v", e)
	}
}

// TestPresence_RefreshWithoutPresenceEndsWatchers: a refreshed token that
// no longer gives the presence capability ends the connection's event and
// occupancy subscriptions (UNSUBSCRIBED id 0), as a lost subscribe
// capability does; a subscription that only entered the presence stays,
// and its member leaves no one's list.
func TestPresence_RefreshWithoutPresenceEndsWatchers(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	tok := func(presence []string) string {
		return mintHS(t, clock, jwtauth.MintClaims{Subject: "dan", TTL: time.Minute,
			Caps: &jwtauth.Caps{Subscribe: []string{"chat.>"}, Presence: presence}})
	}
	c := dialRaw(t, s.Addr())
	c.write(wire.AppendHello(nil, 77, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: wire.FeaturePresence | wire.FeatureRefresh,
		Token: []byte(tok([]string{"chat.>"}))}))
	if h, body := c.next(); h.Type != wire.TypeWelcome {
		t.Fatalf("got %s", describe(h, body))
	}
	c.expectAuthed(77)
	c.psubscribe(1, "chat.room", wire.FlagPresenceEvents|wire.FlagOccupancy)
	c.psubscribe(2, "chat.room", wire.FlagPresence)
	c.write(wire.AppendRefresh(nil, 40, []byte(tok([]string{}))))
	h, body := c.presFrame()
	for h.Type == wire.TypePresenceEvent || h.Type == wire.TypeOccupancy { // sub 1 saw sub 2's connection join
		h, body = c.presFrame()
	}
	if id, _ := wire.DecodeUnsubscribed(body); h.Type != wire.TypeUnsubscribed || h.ID != 0 || id != 1 {
		t.Fatalf("got %s, want UNSUBSCRIBED id 0 of sub 1", describe(h, body))
	}
	c.expectAuthed(40)
	q := presLogin(t, s.Addr(), tokAlice) // alice's role may read chat.* presence
	if st := q.query("chat.room", false); st.occ.Members != 1 || st.occ.Subscribers != 1 || len(st.members) != 1 {
		t.Fatalf("after the refresh: %+v", st)
	}
}
