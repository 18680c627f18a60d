package fuzz

import (
	"fmt"
	"slices"

	"github.com/sluice-rtm/sluice/internal/filter"
	"github.com/sluice-rtm/sluice/wire"
)

// model predicts, from the bytes a client wrote on one connection, what
// PROTOCOL.md requires of the server: whether the connection must still be
// open, and if not, which ERROR codes may announce the close; and the
// answer each request must get in the connection's state. It frames
// the stream exactly as a receiver must (section 1.1: the declared length
// is checked before the body is awaited) and judges every whole frame by
// sections 2, 3 and 7. It is deliberately simple and independent of the
// engine: a difference between the two is a finding.
type model struct {
	pending []byte // bytes of a frame not yet complete
	hello   bool   // a HELLO was accepted
	// features the HELLO offered that the server must accept (headers,
	// S2): EXT and COMPRESSED PUBLISHes are judged by them.
	features wire.Features
	closed   bool // the protocol requires the server to close
	codes    []wire.Code
	why      string // the frame that required the close
	frames   int    // whole frames judged
	after    int    // bytes written after the frame that required the close

	// expect lists, in order, the answer every request must get: every
	// SUBSCRIBE, UNSUBSCRIBE and PING, every PUBLISH with ACK, and every
	// PUBLISH the server must refuse.
	expect []expectation
	// subs are the subscription ids the server must consider active.
	subs map[uint32]bool
}

// expectation is the answer one request must get: a frame of type ok
// (carrying subID, for SUBSCRIBED and UNSUBSCRIBED), or an ERROR with one
// of codes. The request's own id identifies it.
type expectation struct {
	id    uint32
	what  string
	ok    wire.Type // 0: only an ERROR can answer
	sub   uint32
	codes []wire.Code
	done  bool
}

func newModel() model { return model{subs: map[uint32]bool{}} }

// feed accounts for bytes the client wrote.
func (m *model) feed(b []byte) {
	if m.closed {
		m.after += len(b)
		return
	}
	m.pending = append(m.pending, b...)
	for !m.closed {
		h, body, n, err := wire.Split(m.pending, serverMaxBody)
		if err == wire.ErrIncomplete {
			break
		}
		if err != nil {
			m.fatal(fmt.Sprintf("header %v", err), wire.CodeFrameTooLarge)
			m.after = len(m.pending) - wire.HeaderLen
			break
		}
		m.frames++
		m.judge(h, body)
		m.pending = m.pending[n:]
		if m.closed {
			m.after = len(m.pending)
		}
	}
	if m.closed {
		m.pending = nil
	} else if len(m.pending) == 0 {
		m.pending = m.pending[:0:0]
	}
}

func (m *model) fatal(why string, codes ...wire.Code) {
	m.closed, m.why, m.codes = true, why, codes
}

// judge applies the protocol's rules to one whole frame.
func (m *model) judge(h wire.Header, body []byte) {
	if h.Flags&wire.FlagCompressed != 0 && m.hello && m.features&wire.FeatureS2 != 0 && h.Type == wire.TypePublish {
		// Section 2.15: after S2 was negotiated a PUBLISH may carry the
		// bytes after its channel as one S2 block that declares at most
		// max payload bytes; it is then judged as the inflated PUBLISH.
		pl, err := wire.PublishPrefixLen(body)
		var n int
		if err == nil {
			n, err = wire.S2DecodedLen(body[pl:], maxPayload, wire.TypePublish)
		}
		if err == nil {
			body, err = wire.Inflate(nil, body, pl, uint32(pl+n), wire.TypePublish)
		}
		if err != nil {
			m.fatal("compressed PUBLISH: "+err.Error(), wire.CodeProtocolError)
			return
		}
		h.Flags &^= wire.FlagCompressed
	}
	if h.Flags&wire.FlagCompressed != 0 {
		// Section 1.3: COMPRESSED without a negotiated S2 (or on another
		// type) is malformed. Before the handshake HELLO_REQUIRED is as
		// good an answer.
		if m.hello {
			m.fatal(fmt.Sprintf("%v with COMPRESSED", h.Type), wire.CodeProtocolError)
		} else {
			m.fatal(fmt.Sprintf("%v with COMPRESSED", h.Type), wire.CodeProtocolError, wire.CodeHelloRequired)
		}
		return
	}
	if !m.hello {
		if h.Type != wire.TypeHello {
			m.fatal(fmt.Sprintf("%v before HELLO", h.Type), wire.CodeHelloRequired)
			return
		}
		hello, err := wire.DecodeHello(body)
		if err != nil {
			m.fatal(err.Error(), wire.CodeProtocolError)
			return
		}
		if _, ok := wire.Negotiate(hello.MinVersion, hello.MaxVersion, wire.Version1, wire.Version1); !ok {
			m.fatal(fmt.Sprintf("HELLO versions %d..%d", hello.MinVersion, hello.MaxVersion), wire.CodeUnsupportedVersion)
			return
		}
		if len(hello.Token) > wire.MaxTokenLen {
			m.fatal(fmt.Sprintf("HELLO token of %d bytes", len(hello.Token)), wire.CodeUnauthenticated)
			return
		}
		m.hello = true
		m.features = hello.Features & (wire.FeatureHeaders | wire.FeatureS2 | wire.FeatureRefresh | wire.FeaturePresence | wire.FeatureFilters)
		return
	}
	var err error
	switch h.Type {
	case wire.TypePublish:
		var name, payload []byte
		if name, payload, err = wire.DecodePublish(body); err == nil {
			e := expectation{id: h.ID, what: fmt.Sprintf("PUBLISH to %q", name)}
			if h.Flags&wire.FlagExt != 0 && len(payload) <= maxPayload {
				// Sections 1.3, 2.3 and 2.14 (a payload over the limit is
				// refused first): EXT without negotiated headers, or an
				// extended body whose layout is wrong, is malformed; keys
				// or values that break the rules get INVALID_HEADERS.
				if m.features&wire.FeatureHeaders == 0 {
					m.fatal("PUBLISH with EXT", wire.CodeProtocolError)
					return
				}
				x, err := wire.ParseExt(payload, wire.TypePublish)
				if err != nil {
					m.fatal("PUBLISH with EXT: "+err.Error(), wire.CodeProtocolError)
					return
				}
				if wire.CheckHeaderBlock(x.Headers) != nil {
					e.codes = append(e.codes, wire.CodeInvalidHeaders)
				}
			}
			if wire.ValidChannel(name) != nil {
				e.codes = append(e.codes, wire.CodeInvalidChannel)
			}
			if len(payload) > maxPayload {
				e.codes = append(e.codes, wire.CodePayloadTooLarge)
			}
			if len(e.codes) == 0 && h.Flags&wire.FlagAck != 0 {
				e.ok = wire.TypePubAck
			}
			if len(e.codes) > 0 || e.ok != 0 { // an accepted PUBLISH without ACK has no answer
				m.expect = append(m.expect, e)
			}
		}
	case wire.TypeSubscribe:
		var sb wire.Subscribe
		var flt []byte
		switch {
		case h.Flags&wire.FlagFilter == 0:
			sb, err = wire.DecodeSubscribe(body)
		case m.features&wire.FeatureFilters == 0: // 1.3: FILTER not negotiated is malformed
			err = fmt.Errorf("SUBSCRIBE with FILTER without FeatureFilters")
		default:
			sb, flt, err = wire.DecodeSubscribeFilter(body)
		}
		if err == nil {
			e := expectation{id: h.ID, what: fmt.Sprintf("SUBSCRIBE %d to %q", sb.SubID, sb.Channel), sub: sb.SubID}
			if flt != nil && (len(flt) > wire.MaxFilterLen || !compiles(string(flt))) {
				e.codes = append(e.codes, wire.CodeInvalidFilter)
			}
			if wire.ValidChannel(sb.Channel) != nil {
				e.codes = append(e.codes, wire.CodeInvalidChannel)
			}
			if len(m.subs) >= maxSubs {
				e.codes = append(e.codes, wire.CodeTooManySubscriptions)
			}
			if m.subs[sb.SubID] {
				e.codes = append(e.codes, wire.CodeSubscriptionExists)
			}
			if sb.Start == wire.StartPosition && sb.Arg == 0 {
				e.codes = append(e.codes, wire.CodeInvalidStart)
			}
			if len(e.codes) == 0 {
				e.ok = wire.TypeSubscribed
				m.subs[sb.SubID] = true
			}
			m.expect = append(m.expect, e)
		}
	case wire.TypeUnsubscribe:
		var sub uint32
		if sub, err = wire.DecodeUnsubscribe(body); err == nil {
			e := expectation{id: h.ID, what: fmt.Sprintf("UNSUBSCRIBE %d", sub), sub: sub}
			if m.subs[sub] {
				e.ok = wire.TypeUnsubscribed
				delete(m.subs, sub)
			} else {
				e.codes = []wire.Code{wire.CodeUnknownSubscription}
			}
			m.expect = append(m.expect, e)
		}
	case wire.TypePresence:
		// Section 2.18: without FeaturePresence the type may not be sent
		// (UNKNOWN_TYPE); with it, a query of a valid channel gets a
		// PRESENCE_STATE (the harness's server has no permissions).
		if m.features&wire.FeaturePresence == 0 {
			m.fatal("PRESENCE without FeaturePresence", wire.CodeUnknownType)
			return
		}
		var ch []byte
		if ch, err = wire.DecodePresence(body); err == nil {
			e := expectation{id: h.ID, what: fmt.Sprintf("PRESENCE of %q", ch), ok: wire.TypePresenceState}
			if wire.ValidChannel(ch) != nil {
				e.ok, e.codes = 0, []wire.Code{wire.CodeInvalidChannel}
			}
			m.expect = append(m.expect, e)
		}
	case wire.TypePing:
		if err = wire.DecodePing(body); err == nil {
			m.expect = append(m.expect, expectation{id: h.ID, what: "PING", ok: wire.TypePong})
		}
	case wire.TypePong:
		err = wire.DecodePong(body)
	case wire.TypeRefresh:
		if m.features&wire.FeatureRefresh == 0 {
			m.fatal("REFRESH without FeatureRefresh", wire.CodeUnknownType)
			return
		}
		if _, err = wire.DecodeRefresh(body); err == nil {
			// Authentication is off: every REFRESH gets AUTHED (2.16).
			m.expect = append(m.expect, expectation{id: h.ID, what: "REFRESH", ok: wire.TypeAuthed})
		}
	case wire.TypeHello:
		m.fatal("second HELLO", wire.CodeHelloRequired)
		return
	default:
		// A server-to-client type is one the server "may not receive"
		// (7.2 UNKNOWN_TYPE); PROTOCOL_ERROR is accepted for it too.
		if h.Type.Known() {
			m.fatal(fmt.Sprintf("client sent %v", h.Type), wire.CodeUnknownType, wire.CodeProtocolError)
		} else {
			m.fatal(fmt.Sprintf("client sent %v", h.Type), wire.CodeUnknownType)
		}
		return
	}
	if err != nil {
		m.fatal(err.Error(), wire.CodeProtocolError)
	}
}

// filler returns the bytes that complete the pending partial frame (with
// zeros), so that the next frame the client writes is framed where the
// client means it to be. A completed header may itself be too large, in
// which case the model is closed once filler is fed.
func (m *model) filler() []byte {
	if m.closed || len(m.pending) == 0 {
		return nil
	}
	var f []byte
	if len(m.pending) < wire.HeaderLen {
		f = make([]byte, wire.HeaderLen-len(m.pending))
	}
	hdr := append(slices.Clip(m.pending), f...)
	h, err := wire.ParseHeader(hdr, serverMaxBody)
	if err != nil {
		return f
	}
	need := wire.HeaderLen + int(h.Len) - len(m.pending) - len(f)
	return append(f, make([]byte, need)...)
}

// allows reports whether c may announce the close the model predicts.
func (m *model) allows(c wire.Code) bool { return slices.Contains(m.codes, c) }

// serverSide reports whether c is a fatal code the server may send on its
// own initiative, whatever the client wrote: a timeout, a slow reader, a
// shutdown.
func serverSide(c wire.Code) bool {
	switch c {
	case wire.CodeHandshakeTimeout, wire.CodeIdleTimeout, wire.CodeSlowConsumer,
		wire.CodeShuttingDown, wire.CodeTooManyConnections:
		return true
	}
	return false
}

// answer is one answer of the server to a request: a PUBACK entry,
// SUBSCRIBED, UNSUBSCRIBED, PONG, or a non-fatal ERROR.
type answer struct {
	typ  wire.Type
	id   uint32
	sub  uint32    // SUBSCRIBED, UNSUBSCRIBED
	code wire.Code // ERROR
}

// checkAnswers matches the answers the server sent (in the order they
// arrived) with the requests the model saw: each request gets exactly one
// answer, the one PROTOCOL.md prescribes for it in the state the
// connection was in (2.3 to 2.10, 4). Answers to one id come in request
// order, except that PUBACK entries may come after answers to later
// requests, which matching by type allows. It is meaningful only once
// every answer has arrived.
func (m *model) checkAnswers(got []answer) error {
	for _, a := range got {
		found := false
		for i := range m.expect {
			e := &m.expect[i]
			if e.done || e.id != a.id {
				continue
			}
			if a.typ == wire.TypeError && slices.Contains(e.codes, a.code) ||
				a.typ == e.ok && (a.typ != wire.TypeSubscribed && a.typ != wire.TypeUnsubscribed || a.sub == e.sub) {
				e.done, found = true, true
				break
			}
		}
		if !found {
			return fmt.Errorf("answer %v (code %v, sub %d) to request id %d matches no request waiting for one",
				a.typ, a.code, a.sub, a.id)
		}
	}
	for _, e := range m.expect {
		if !e.done {
			want := e.codes
			if e.ok != 0 {
				return fmt.Errorf("%s (id %d) got no %v (nor ERROR %v)", e.what, e.id, e.ok, want)
			}
			return fmt.Errorf("%s (id %d) got no ERROR %v", e.what, e.id, want)
		}
	}
	return nil
}

// compiles reports whether a filter expression compiles (the expression
// language is internal/filter's business, tested there; the model only
// needs its verdict).
func compiles(src string) bool {
	_, err := filter.Compile(src)
	return err == nil
}
