package fuzz

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// syncTimeout bounds every wait for the server in the harness. It is long
// because the machine may be busy; a healthy server answers in
// microseconds, so only a hung or lost answer ever reaches it.
const syncTimeout = 10 * time.Second

// outCheck checks the server's side of one connection, frame by frame:
// every frame is a server-to-client type and decodes; WELCOME comes first
// and announces the server's limits; nothing follows a fatal ERROR or
// GOAWAY; and per subscription, DATA and GAP cover positions contiguously
// from the SUBSCRIBED's first position (PROTOCOL.md 2.9), and stop after
// UNSUBSCRIBED. It is owned by the connection's reader goroutine.
type outCheck struct {
	frames  int
	maxBody uint32
	fatal   *wire.Error // the fatal ERROR or GOAWAY, if one came
	next    map[uint32]uint64
	fresh   map[uint32]bool // SUBSCRIBED came, nothing for the sub yet
	data    int             // DATA frames seen
	// features WELCOME accepted (headers, S2): DATA records are extended
	// only with headers, and compressed only with S2.
	features wire.Features
	exts     int // extended records seen in DATA
	zdata    int // compressed DATA frames seen
	// presFrames counts PRESENCE_EVENT and OCCUPANCY frames seen.
	presFrames int

	answers []answer // in arrival order
	acked   map[uint32]bool
	// filtered holds the subscription ids the driver subscribed with a
	// filter (it marks them before writing): their FDATA entries and GAPs
	// may leave holes, only increasing positions are required.
	filtered *sync.Map
	fdata    int // FDATA frames seen
}

func newOutCheck() outCheck {
	return outCheck{next: map[uint32]uint64{}, fresh: map[uint32]bool{}, acked: map[uint32]bool{}, filtered: new(sync.Map)}
}

func (oc *outCheck) frame(h wire.Header, body []byte) error {
	oc.frames++
	if oc.fatal != nil {
		return fmt.Errorf("%v after fatal %v", h.Type, oc.fatal)
	}
	if oc.frames == 1 && h.Type != wire.TypeWelcome && h.Type != wire.TypeError {
		return fmt.Errorf("first frame is %v, want WELCOME or ERROR", h.Type)
	}
	if h.Flags&wire.FlagCompressed != 0 && (oc.features&wire.FeatureS2 == 0 || h.Type != wire.TypeData) {
		return fmt.Errorf("%v with COMPRESSED, which was not negotiated", h.Type)
	}
	switch h.Type {
	case wire.TypeWelcome:
		if oc.frames != 1 {
			return fmt.Errorf("WELCOME as frame %d", oc.frames)
		}
		w, err := wire.DecodeWelcome(body)
		if err != nil {
			return err
		}
		if w.Version != wire.Version1 || w.MaxPayload != maxPayload || w.MaxBody != serverMaxBody || w.MaxSubs != maxSubs {
			return fmt.Errorf("WELCOME %+v does not announce the server's limits", w)
		}
		if w.Features&^(wire.FeatureHeaders|wire.FeatureS2|wire.FeatureRefresh|wire.FeaturePresence|wire.FeatureFilters) != 0 {
			return fmt.Errorf("WELCOME accepts features %#x that no v1 server has", w.Features)
		}
		oc.features = w.Features
		oc.maxBody = w.MaxBody
	case wire.TypePubAck:
		acks, err := wire.DecodePubAck(body, nil)
		if err != nil {
			return err
		}
		if h.ID != 0 {
			return fmt.Errorf("PUBACK with id %d, want 0", h.ID)
		}
		for _, a := range acks {
			if a.Position == 0 {
				return fmt.Errorf("PUBACK for %d at position 0", a.ID)
			}
			oc.answers = append(oc.answers, answer{typ: wire.TypePubAck, id: a.ID})
			oc.acked[a.ID] = true
		}
	case wire.TypeSubscribed:
		s, err := wire.DecodeSubscribed(body)
		if err != nil {
			return err
		}
		if _, ok := oc.next[s.SubID]; ok {
			return fmt.Errorf("SUBSCRIBED for subscription %d, which is active", s.SubID)
		}
		if s.First == 0 || s.First < s.Earliest || s.Next < s.Earliest {
			return fmt.Errorf("SUBSCRIBED %+v: inconsistent positions", s)
		}
		oc.next[s.SubID] = s.First
		oc.fresh[s.SubID] = true
		oc.answers = append(oc.answers, answer{typ: wire.TypeSubscribed, id: h.ID, sub: s.SubID})
	case wire.TypeUnsubscribed:
		id, err := wire.DecodeUnsubscribed(body)
		if err != nil {
			return err
		}
		if _, ok := oc.next[id]; !ok {
			return fmt.Errorf("UNSUBSCRIBED for subscription %d, which is not active", id)
		}
		delete(oc.next, id)
		delete(oc.fresh, id)
		oc.answers = append(oc.answers, answer{typ: wire.TypeUnsubscribed, id: h.ID, sub: id})
	case wire.TypeData:
		var first uint64
		var count uint32
		var recs []byte
		var err error
		if h.Flags&wire.FlagCompressed != 0 {
			first, count, recs, _, err = wire.DecodeDataS2(body, nil, oc.maxBody)
			oc.zdata++
		} else {
			first, count, recs, err = wire.DecodeData(body)
		}
		if err != nil {
			return err
		}
		if err := oc.records(recs); err != nil {
			return fmt.Errorf("DATA for subscription %d at %d: %w", h.ID, first, err)
		}
		want, ok := oc.next[h.ID]
		switch {
		case !ok:
			return fmt.Errorf("DATA for subscription %d, which is not active", h.ID)
		case first != want:
			return fmt.Errorf("DATA for subscription %d starts at %d, want %d", h.ID, first, want)
		}
		oc.next[h.ID] = first + uint64(count)
		oc.fresh[h.ID] = false
		oc.data++
	case wire.TypeGap:
		g, err := wire.DecodeGap(body)
		if err != nil {
			return err
		}
		want, ok := oc.next[h.ID]
		switch {
		case !ok:
			return fmt.Errorf("GAP for subscription %d, which is not active", h.ID)
		case oc.fresh[h.ID] && g.To+1 == want:
			// The requested start is no longer retained: the gap ends
			// right before SUBSCRIBED's first position.
		case oc.mayFilter(h.ID) && g.From > want:
			oc.next[h.ID] = g.To + 1 // after a hole of messages that did not match
		case g.From != want:
			return fmt.Errorf("GAP %+v for subscription %d, want it to start at %d", g, h.ID, want)
		default:
			oc.next[h.ID] = g.To + 1
		}
		oc.fresh[h.ID] = false
	case wire.TypeAuthed:
		// Right after WELCOME when REFRESH was negotiated, and answering
		// every REFRESH; this server runs without authentication, so
		// nothing expires.
		a, err := wire.DecodeAuthed(body)
		if err != nil {
			return err
		}
		if oc.features&wire.FeatureRefresh == 0 || a.ExpiresIn != 0 || a.ClientID != "" {
			return fmt.Errorf("AUTHED %+v as frame %d with features %#x", a, oc.frames, uint32(oc.features))
		}
		if oc.frames > 2 {
			oc.answers = append(oc.answers, answer{typ: wire.TypeAuthed, id: h.ID})
		}
	case wire.TypeFData:
		return oc.fdataFrame(h, body)
	case wire.TypePresenceState, wire.TypePresenceEvent, wire.TypeOccupancy:
		return oc.presence(h, body)
	case wire.TypePing, wire.TypePong:
		if len(body) != 0 {
			return fmt.Errorf("%v with a %d-byte body", h.Type, len(body))
		}
		if h.Type == wire.TypePong {
			oc.answers = append(oc.answers, answer{typ: wire.TypePong, id: h.ID})
		}
	case wire.TypeError:
		e, err := wire.DecodeError(h, body)
		if err != nil {
			return err
		}
		if strings.HasPrefix(e.Code.String(), "Code(") { // not in wire's table of codes
			return fmt.Errorf("ERROR with undefined code %d", uint16(e.Code))
		}
		if e.Code.Fatal() {
			oc.fatal = &e
		} else {
			oc.answers = append(oc.answers, answer{typ: wire.TypeError, id: h.ID, code: e.Code})
		}
	case wire.TypeGoAway:
		g, err := wire.DecodeGoAway(body)
		if err != nil {
			return err
		}
		oc.fatal = &wire.Error{Code: g.Code, Text: "GOAWAY: " + g.Text}
	default:
		return fmt.Errorf("server sent %v", h.Type)
	}
	return nil
}

// presence checks a presence frame (2.18): only after FeaturePresence;
// PRESENCE_STATE answers its request with its last frame (no MORE);
// PRESENCE_EVENT and OCCUPANCY only for an active subscription.
func (oc *outCheck) presence(h wire.Header, body []byte) error {
	if oc.features&wire.FeaturePresence == 0 {
		return fmt.Errorf("%v without FeaturePresence", h.Type)
	}
	var err error
	switch h.Type {
	case wire.TypePresenceState:
		if _, _, err = wire.DecodePresenceState(body, nil); err == nil && h.Flags&wire.FlagMore == 0 {
			oc.answers = append(oc.answers, answer{typ: wire.TypePresenceState, id: h.ID})
		}
		return err
	case wire.TypePresenceEvent:
		_, err = wire.DecodePresenceEvent(body, nil)
	default:
		_, err = wire.DecodeOccupancy(body)
	}
	if err != nil {
		return err
	}
	if _, ok := oc.next[h.ID]; !ok {
		return fmt.Errorf("%v for subscription %d, which is not active", h.Type, h.ID)
	}
	oc.presFrames++
	return nil
}

// mayFilter reports whether subscription sub may be a filtered one.
func (oc *outCheck) mayFilter(sub uint32) bool {
	_, ok := oc.filtered.Load(sub)
	return ok
}

// fdataFrame checks an FDATA: only with FeatureFilters, for an active
// subscription that may be filtered, entries beyond what the
// subscription's frames covered so far, records as in DATA.
func (oc *outCheck) fdataFrame(h wire.Header, body []byte) error {
	if oc.features&wire.FeatureFilters == 0 {
		return fmt.Errorf("FDATA without FeatureFilters")
	}
	_, entries, err := wire.DecodeFData(body)
	if err != nil {
		return err
	}
	want, ok := oc.next[h.ID]
	switch {
	case !ok:
		return fmt.Errorf("FDATA for subscription %d, which is not active", h.ID)
	case !oc.mayFilter(h.ID):
		return fmt.Errorf("FDATA for subscription %d, which has no filter", h.ID)
	}
	for pos, rec, ext, rest, ok := wire.NextFEntry(entries); ok; pos, rec, ext, rest, ok = wire.NextFEntry(rest) {
		if pos < want {
			return fmt.Errorf("FDATA for subscription %d at %d, want at least %d", h.ID, pos, want)
		}
		if err := oc.records(wire.AppendRecordExt(nil, rec, ext)); err != nil {
			return fmt.Errorf("FDATA for subscription %d at %d: %w", h.ID, pos, err)
		}
		want = pos + 1
	}
	oc.next[h.ID] = want
	oc.fresh[h.ID] = false
	oc.fdata++
	return nil
}

// records checks the records of a DATA (inflated if it was compressed):
// an extended record only for a connection that negotiated headers, and
// then one whose headers passed the checks of a PUBLISH (2.14: the server
// stores what it accepted, byte for byte).
func (oc *outCheck) records(run []byte) error {
	for rec, ext, rest, ok := wire.NextRecordExt(run); ok; rec, ext, rest, ok = wire.NextRecordExt(rest) {
		if !ext {
			continue
		}
		if oc.features&wire.FeatureHeaders == 0 {
			return fmt.Errorf("an extended record for a connection without headers")
		}
		e, err := wire.ParseExt(rec, wire.TypeData)
		if err != nil {
			return err
		}
		if err := wire.CheckHeaderBlock(e.Headers); err != nil {
			return fmt.Errorf("a stored record with headers a PUBLISH may not have: %w", err)
		}
		oc.exts++
	}
	return nil
}

// fconn is one client connection of the harness. The driver goroutine
// writes (and keeps the model); a reader goroutine reads continuously,
// like a well-behaved client, and checks the server's frames. After done
// is closed, the reader's fields may be read by anyone.
type fconn struct {
	nc     net.Conn
	m      model
	split  int  // write in pieces of this size; 0 = whole writes
	wdead  bool // a write failed: the server closed the connection
	halfed bool // the client closed its sending side

	marker atomic.Uint32 // the id of the PUBLISH that ends the session
	synced chan struct{} // closed when the marker's PUBACK arrived
	done   chan struct{} // closed when the reader returned

	// Owned by the reader until done.
	oc      outCheck
	bad     error // the first broken rule in the server's output
	readErr error // how reading ended
}

// abort closes nc with a reset (SO_LINGER 0) instead of a FIN, so that the
// harness leaves no TIME_WAIT socket behind: thousands of connections a
// second would otherwise exhaust the ephemeral ports on hosts that do not
// reuse TIME_WAIT ports on loopback. The server sees a reset, which it
// must handle anyway.
func abort(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// dialF opens a connection and starts its reader.
func dialF(addr string) (*fconn, error) {
	nc, err := net.DialTimeout("tcp", addr, syncTimeout)
	if err != nil {
		return nil, err
	}
	fc := &fconn{nc: nc, m: newModel(), oc: newOutCheck(), synced: make(chan struct{}), done: make(chan struct{})}
	go fc.read()
	return fc, nil
}

func (fc *fconn) read() {
	defer close(fc.done)
	r := wire.NewReader(fc.nc, wire.MinMaxBody)
	for {
		h, body, err := r.Next()
		if err != nil {
			fc.readErr = err
			if errors.Is(err, wire.ErrMalformed) {
				fc.bad = fmt.Errorf("server output: %w", err)
			}
			return
		}
		if err := fc.oc.frame(h, body); err != nil {
			fc.bad = fmt.Errorf("server frame %d (%v id %d): %w", fc.oc.frames, h.Type, h.ID, err)
			return
		}
		if h.Type == wire.TypeWelcome {
			r.SetMaxBody(fc.oc.maxBody)
		}
		if m := fc.marker.Load(); m != 0 && h.Type == wire.TypePubAck && fc.oc.acked[m] {
			close(fc.synced)
			fc.marker.Store(0)
		}
	}
}

// write sends b, in pieces if split is set, and feeds the model with the
// bytes that went out. A failed write means the server closed the
// connection; finish judges whether it was allowed to.
func (fc *fconn) write(b []byte) {
	if fc.wdead || fc.halfed || len(b) == 0 {
		return
	}
	_ = fc.nc.SetWriteDeadline(time.Now().Add(syncTimeout))
	for len(b) > 0 {
		k := len(b)
		if fc.split > 0 {
			k = min(k, fc.split)
		}
		n, err := fc.nc.Write(b[:k])
		fc.m.feed(b[:n])
		if err != nil {
			fc.wdead = true
			return
		}
		b = b[k:]
	}
}

// halfClose closes the client's sending side: the server sees EOF.
func (fc *fconn) halfClose() {
	if fc.halfed || fc.wdead {
		return
	}
	fc.halfed = true
	if tc, ok := fc.nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// finish ends the session and judges the server's behaviour: if the
// protocol says the connection is open, a PUBLISH with ACK after the
// client's last frame must be acknowledged, and by then every request must
// have had exactly one answer; if it says the server must close, the server
// must announce it with an allowed fatal ERROR and close. Either way the
// server's output must have followed outCheck's rules. finish closes the
// connection and waits for the reader.
func (fc *fconn) finish() error {
	defer func() {
		abort(fc.nc)
		<-fc.done
	}()
	if !fc.wdead && !fc.halfed {
		fc.write(fc.m.filler())
		if !fc.m.closed {
			// PUBACKs go out after every other answer to the frames
			// before them, so the marker's PUBACK is a barrier: when it
			// arrives, every request has been answered.
			if !fc.m.hello {
				fc.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "harness"}))
			}
			// Random, so that a fuzzer-made request cannot carry it by chance.
			id := 0x80000000 | rand.Uint32()
			fc.marker.Store(id)
			fc.write(wire.AppendPublish(nil, id, wire.FlagAck, "fz.sync", nil))
		}
	}
	timer := time.NewTimer(syncTimeout)
	defer timer.Stop()
	switch {
	case fc.halfed:
		// The server sees EOF and closes; any earlier rule still holds.
		select {
		case <-fc.done:
		case <-timer.C:
			return fmt.Errorf("server kept a connection open for %v after the client's EOF", syncTimeout)
		}
		return fc.bad
	case !fc.m.closed:
		select {
		case <-fc.synced:
			abort(fc.nc)
			<-fc.done
			if fc.bad != nil {
				return fc.bad
			}
			if fc.oc.features != fc.m.features {
				return fmt.Errorf("WELCOME accepted features %#x, the HELLO offered %#x of the server's", fc.oc.features, fc.m.features)
			}
			return fc.m.checkAnswers(fc.oc.answers)
		case <-fc.done:
		case <-timer.C:
			return fmt.Errorf("no PUBACK for the closing marker within %v after %d frames (pending %d bytes)", syncTimeout, fc.m.frames, len(fc.m.pending))
		}
		if fc.bad != nil {
			return fc.bad
		}
		if fc.oc.fatal != nil && serverSide(fc.oc.fatal.Code) {
			return nil
		}
		return fmt.Errorf("server closed a connection the protocol keeps open after %d frames (fatal %v, read %v)",
			fc.m.frames, fc.oc.fatal, fc.readErr)
	default:
		select {
		case <-fc.done:
		case <-timer.C:
			return fmt.Errorf("server kept the connection open for %v after %s", syncTimeout, fc.m.why)
		}
		if fc.bad != nil {
			return fc.bad
		}
		switch f := fc.oc.fatal; {
		case f == nil:
			return fmt.Errorf("server closed after %s without a fatal ERROR (read %v)", fc.m.why, fc.readErr)
		case !fc.m.allows(f.Code) && !serverSide(f.Code):
			return fmt.Errorf("server answered %s with %v, want one of %v", fc.m.why, f, fc.m.codes)
		}
		return nil
	}
}
