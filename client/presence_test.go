package client

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

func presWelcome() wire.Welcome {
	w := testWelcome()
	w.Features = wire.FeaturePresence
	return w
}

func wm(id, node string, conn uint64) wire.Member {
	return wire.Member{ClientID: []byte(id), Node: []byte(node), Conn: conn}
}

func names(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s@%s/%d", m.ClientID, m.Node, m.Conn))
	}
	return out
}

// expectSubscribeFlags reads the next SUBSCRIBE with its header.
func (fc *fakeConn) expectSubscribeFlags() (wire.Header, wire.Subscribe) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypeSubscribe)
	s, err := wire.DecodeSubscribe(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	s.Channel = []byte(string(s.Channel))
	return h, s
}

// expectPresence reads the next PRESENCE the client sent.
func (fc *fakeConn) expectPresence() (wire.Header, string) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypePresence)
	ch, err := wire.DecodePresence(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	return h, string(ch)
}

// TestPresenceQuery: Presence sends PRESENCE and gathers the answer's
// frames (MORE), sorted; Occupancy sends COUNTS_ONLY; a refusal is a
// *ServerError; a server without presence is refused before anything is
// sent; the client offers FeaturePresence.
func TestPresenceQuery(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, presWelcome())
	if fc.hello.Features&wire.FeaturePresence == 0 {
		t.Fatalf("HELLO features %v", fc.hello.Features)
	}
	type res struct {
		st  PresenceState
		err error
	}
	done := make(chan res, 1)
	go func() { st, err := c.Presence(ctxT(t), "room"); done <- res{st, err} }()
	h, ch := fc.expectPresence()
	if ch != "room" || h.Flags != 0 {
		t.Fatalf("PRESENCE %q flags %v", ch, h.Flags)
	}
	o := wire.Occupancy{Subscribers: 5, Publishers: 1, Members: 3}
	fc.write(wire.AppendPresenceState(nil, h.ID, wire.FlagMore|wire.FlagPartial, o, []wire.Member{wm("zed", "b", 2), wm("amy", "a", 9)}))
	fc.write(wire.AppendPresenceState(nil, h.ID, wire.FlagPartial, o, []wire.Member{{ClientID: []byte("amy"), Node: []byte("a"), Conn: 1, Info: []byte("i")}}))
	r := <-done
	if r.err != nil || r.st.Occupancy != o || !r.st.Partial || !slices.Equal(names(r.st.Members), []string{"amy@a/1", "amy@a/9", "zed@b/2"}) ||
		string(r.st.Members[0].Info) != "i" {
		t.Fatalf("Presence = %+v, %v", r.st, r.err)
	}
	go func() { o, err := c.Occupancy(ctxT(t), "room"); done <- res{PresenceState{Occupancy: o}, err} }()
	h, _ = fc.expectPresence()
	if h.Flags != wire.FlagCountsOnly {
		t.Fatalf("Occupancy sent flags %v", h.Flags)
	}
	fc.write(wire.AppendPresenceState(nil, h.ID, 0, o, nil))
	if r := <-done; r.err != nil || r.st.Occupancy != o {
		t.Fatalf("Occupancy = %+v, %v", r.st, r.err)
	}
	go func() { st, err := c.Presence(ctxT(t), "secret"); done <- res{st, err} }()
	h, _ = fc.expectPresence()
	fc.write(wire.AppendError(nil, h.ID, wire.Error{Code: wire.CodeForbidden, Text: "no"}))
	wantServerCode(t, (<-done).err, wire.CodeForbidden)
	if _, err := c.Presence(ctxT(t), "bad name"); !errors.Is(err, ErrInvalidChannel) {
		t.Fatalf("invalid channel: %v", err)
	}

	old, _ := connect(t, f, testWelcome())
	if _, err := old.Presence(ctxT(t), "room"); !errors.Is(err, ErrPresenceUnsupported) {
		t.Fatalf("a server without presence: %v", err)
	}
}

// TestPresenceEventsKeepTheMemberSet: a WithPresenceEvents subscription
// sends its flags, queries after SUBSCRIBED, delivers joins, leaves and
// occupancy as events, and keeps the member set: events before the
// answer are in the answer, events after it are applied; a pause makes
// the set incomplete and the resume queries again.
func TestPresenceEventsKeepTheMemberSet(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, presWelcome())
	wait := subscribeAsync(t, c, "room", WithPresence(), WithPresenceEvents(), WithOccupancy())
	h, sb := fc.expectSubscribeFlags()
	if h.Flags != wire.SubscribePresenceFlags {
		t.Fatalf("SUBSCRIBE flags %#x", h.Flags)
	}
	fc.write(wire.AppendSubscribed(nil, h.ID, wire.Subscribed{SubID: sb.SubID, First: 1, Next: 1, Epoch: 1}))
	sub, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	qh, _ := fc.expectPresence()
	if _, complete := sub.Members(); complete {
		t.Fatal("complete before the answer")
	}
	o := wire.Occupancy{Subscribers: 3, Members: 2}
	fc.write(wire.AppendOccupancy(nil, sb.SubID, 0, o))
	// A join sent before the answer is in the answer.
	fc.write(wire.AppendPresenceEvent(nil, sb.SubID, []wire.PresenceChange{{Kind: wire.PresenceJoin, Member: wm("bob", "b", 2)}}))
	fc.write(wire.AppendPresenceState(nil, qh.ID, 0, o, []wire.Member{wm("me", "a", 1), wm("bob", "b", 2)}))
	fc.write(wire.AppendPresenceEvent(nil, sb.SubID, []wire.PresenceChange{
		{Kind: wire.PresenceJoin, Member: wm("cy", "c", 3)}, {Kind: wire.PresenceLeave, Member: wm("bob", "b", 2)}}))
	want := []string{"occupancy", "join bob", "join cy", "leave bob"}
	for _, w := range want {
		ev := nextEvent(t, sub)
		got := ev.Kind.String()
		if ev.Kind == KindJoin || ev.Kind == KindLeave {
			got += " " + ev.Member.ClientID
		}
		if got != w || ev.Channel != "room" {
			t.Fatalf("event %q (%+v), want %q", got, ev, w)
		}
	}
	if ms, complete := sub.Members(); !complete || !slices.Equal(names(ms), []string{"cy@c/3", "me@a/1"}) {
		t.Fatalf("members %v complete %v", names(ms), complete)
	}
	fc.write(wire.AppendOccupancy(nil, sb.SubID, wire.FlagEventsPaused, wire.Occupancy{Members: 500}))
	if ev := nextEvent(t, sub); ev.Kind != KindOccupancy || !ev.EventsPaused || ev.Occupancy.Members != 500 {
		t.Fatalf("pause event %+v", ev)
	}
	if _, complete := sub.Members(); complete {
		t.Fatal("complete while paused")
	}
	fc.write(wire.AppendOccupancy(nil, sb.SubID, 0, wire.Occupancy{Members: 2}))
	if ev := nextEvent(t, sub); ev.Kind != KindOccupancy || ev.EventsPaused {
		t.Fatalf("resume event %+v", ev)
	}
	qh, _ = fc.expectPresence()
	fc.write(wire.AppendPresenceState(nil, qh.ID, 0, wire.Occupancy{Members: 2}, []wire.Member{wm("me", "a", 1), wm("dee", "d", 4)}))
	fc.write(wire.AppendPing(nil, 77)) // answered after the state: the reader got there
	fc.expect(wire.TypePong)
	if ms, complete := sub.Members(); !complete || !slices.Equal(names(ms), []string{"dee@d/4", "me@a/1"}) {
		t.Fatalf("members after the resume %v complete %v", names(ms), complete)
	}
}

// TestPresenceResumeResubscribesWithFlags: after a reconnect the
// subscription is made again with its presence flags (the member enters
// again on the new node) and the set is synced again.
func TestPresenceResumeResubscribesWithFlags(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, presWelcome())
	wait := subscribeAsync(t, c, "room", WithPresence(), WithPresenceEvents())
	h, sb := fc.expectSubscribeFlags()
	fc.write(wire.AppendSubscribed(nil, h.ID, wire.Subscribed{SubID: sb.SubID, First: 1, Next: 1, Epoch: 1}))
	sub, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	qh, _ := fc.expectPresence()
	fc.write(wire.AppendPresenceState(nil, qh.ID, 0, wire.Occupancy{Members: 1}, []wire.Member{wm("me", "a", 1)}))
	fc.close()
	fc2 := f.acceptWelcome(presWelcome())
	h, sb2 := fc2.expectSubscribeFlags()
	if h.Flags != wire.FlagPresence|wire.FlagPresenceEvents || sb2.SubID != sb.SubID {
		t.Fatalf("resubscribe flags %#x sub %d", h.Flags, sb2.SubID)
	}
	fc2.write(wire.AppendSubscribed(nil, h.ID, wire.Subscribed{SubID: sb.SubID, First: 1, Next: 1, Epoch: 1}))
	qh, _ = fc2.expectPresence()
	fc2.write(wire.AppendPresenceState(nil, qh.ID, 0, wire.Occupancy{Members: 1}, []wire.Member{wm("me", "b", 7)}))
	fc2.write(wire.AppendPing(nil, 1))
	fc2.expect(wire.TypePong)
	if ms, complete := sub.Members(); !complete || !slices.Equal(names(ms), []string{"me@b/7"}) {
		t.Fatalf("members after the resume %v complete %v", names(ms), complete)
	}
}

// TestPresenceFramesWithoutTheFeature: a presence frame from a server
// that did not accept FeaturePresence is a protocol violation.
func TestPresenceFramesWithoutTheFeature(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	fc.write(wire.AppendOccupancy(nil, 1, 0, wire.Occupancy{}))
	if err := fc.readErr(); err == nil {
		t.Fatal("the connection stayed open")
	}
	_ = c
}
