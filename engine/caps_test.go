package engine

import (
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// capsAuth: "ticker" may subscribe to prices.> but read no history, and
// see presence only of prices.eu; "watcher" lists neither history nor
// presence, so both follow its subscribe patterns. carol's credential
// has no name.
func capsAuth() *AuthConfig {
	return &AuthConfig{
		Roles: []Role{
			{Name: "ticker", Subscribe: []string{"prices.>"}, History: []string{}, Presence: []string{"prices.eu"}},
			{Name: "watcher", Subscribe: []string{"prices.>"}},
		},
		Credentials: []Credential{
			{Name: "alice", Hash: HashToken([]byte(tokAlice)), Role: "ticker"},
			{Name: "bob", Hash: HashToken([]byte(tokBob)), Role: "watcher"},
			{Hash: HashToken([]byte(tokCarol)), Role: "watcher"},
		},
	}
}

// TestCapabilitiesOfRoles: history and presence are capabilities of
// their own; a role that does not list them gets its subscribe patterns
// for both, one that lists them (even empty) gets exactly those. The
// connection's client id is its credential's name.
func TestCapabilitiesOfRoles(t *testing.T) {
	srv := &Server{}
	st, err := compileAuth(capsAuth())
	if err != nil {
		t.Fatal(err)
	}
	srv.auth.Store(st)
	l := &loop{srv: srv}
	login := func(tok string) *conn {
		c := &conn{l: l, hello: true}
		if !l.authenticate(c, 1, []byte(tok)) {
			t.Fatalf("token %q not accepted", tok)
		}
		return c
	}
	alice, bob, carol := login(tokAlice), login(tokBob), login(tokCarol)
	for _, tc := range []struct {
		c    *conn
		cp   capability
		ch   string
		want bool
	}{
		{alice, capSubscribe, "prices.eu", true},
		{alice, capHistory, "prices.eu", false},
		{alice, capPresence, "prices.eu", true},
		{alice, capPresence, "prices.us", false},
		{alice, capPublish, "prices.eu", false},
		{bob, capSubscribe, "prices.us", true},
		{bob, capHistory, "prices.us", true},
		{bob, capPresence, "prices.us", true},
		{bob, capPresence, "chat", false},
		{bob, capHistory, "chat", false},
	} {
		if got := tc.c.may(tc.cp, []byte(tc.ch)); got != tc.want {
			t.Errorf("%s may %v %s = %v, want %v", tc.c.clientID, tc.cp, tc.ch, got, tc.want)
		}
	}
	if alice.clientID != "alice" || bob.clientID != "bob" || carol.clientID != "" || alice.clientInfo != nil {
		t.Fatalf("client ids %q %q %q, info %q", alice.clientID, bob.clientID, carol.clientID, alice.clientInfo)
	}
	// Authentication off: every right, no identity.
	srv.auth.Store(nil)
	if !alice.may(capPresence, []byte("prices.us")) || alice.clientID != "" {
		t.Fatalf("auth off: may %v, client id %q", alice.may(capPresence, []byte("prices.us")), alice.clientID)
	}
}

// TestSubscribeFromHistoryNeedsHistory: a subscriber without the history
// capability may subscribe from the live edge only; every other start is
// FORBIDDEN (not fatal).
func TestSubscribeFromHistoryNeedsHistory(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Auth = capsAuth() })
	alice := login(t, s.Addr(), tokAlice)
	for i, start := range []wire.StartKind{wire.StartEarliest, wire.StartPosition, wire.StartLast, wire.StartSince} {
		id := uint32(10 + i)
		alice.write(subscribeFrame(id, id, start, 1, "prices.eu"))
		h, body := alice.next()
		e := expectCode(t, h, body, wire.CodeForbidden, id)
		if e.Text != "not allowed to read this channel's history (subscribe from live)" {
			t.Fatalf("start %v: text %q", start, e.Text)
		}
	}
	alice.subscribe(1, "prices.eu", wire.StartLive, 0)
	bob := login(t, s.Addr(), tokBob)
	bob.subscribe(2, "prices.eu", wire.StartEarliest, 0)
}
