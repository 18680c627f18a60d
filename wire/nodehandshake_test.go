package wire_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

const hsSecret = "0123456789abcdef0123456789abcdef"

// rw is a scripted peer: what is written goes to out, reads come from in.
type rw struct {
	in  io.Reader
	out bytes.Buffer
}

func (p *rw) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *rw) Write(b []byte) (int, error) { return p.out.Write(b) }

// fixedRand yields the same 32 bytes forever (deterministic nonces).
type fixedRand [32]byte

func (f fixedRand) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = f[i%32]
	}
	return len(b), nil
}

// acceptOne runs the acceptor's side of one handshake on c, the way the
// engine does on its loop: NODE_HELLO -> NODE_CHALLENGE, NODE_PROOF ->
// NODE_WELCOME, or an ERROR. It returns the session or the refusal.
func acceptOne(c io.ReadWriter, secret, self string, nonce [32]byte) (*wire.NodeSession, error) {
	r := wire.NewReader(c, wire.MinMaxBody)
	h, body, err := r.Next()
	if err != nil {
		return nil, err
	}
	refuse := func(code wire.Code, text string) error {
		_, _ = c.Write(wire.AppendError(nil, 0, wire.Error{Code: code, Text: text}))
		return wire.Error{Code: code, Text: text}
	}
	if h.Type != wire.TypeNodeHello {
		return nil, refuse(wire.CodeHelloRequired, h.Type.String())
	}
	hello, err := wire.DecodeNodeHello(body)
	if err != nil {
		return nil, refuse(wire.CodeProtocolError, err.Error())
	}
	a := wire.AcceptNodeHello(secret, self, hello, nonce)
	if a == nil {
		return nil, refuse(wire.CodeUnauthenticated, "reflected")
	}
	if _, err := c.Write(a.AppendChallenge(nil)); err != nil {
		return nil, err
	}
	h, body, err = r.Next()
	if err != nil {
		return nil, err
	}
	if h.Type != wire.TypeNodeProof {
		return nil, refuse(wire.CodeProtocolError, h.Type.String())
	}
	out, s, err := a.Finish(nil, body)
	if err != nil {
		return nil, refuse(wire.CodeUnauthenticated, err.Error())
	}
	_, err = c.Write(out)
	return s, err
}

// pipeHandshake runs a dialer against acceptOne over a net.Pipe.
func pipeHandshake(t *testing.T, d wire.NodeDial, secret, self string) (ds, as *wire.NodeSession, a, b net.Conn, derr, aerr error) {
	t.Helper()
	a, b = net.Pipe()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	type res struct {
		s   *wire.NodeSession
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := acceptOne(b, secret, self, seq32(0xa0))
		if err != nil {
			b.Close() // as the engine closes after a refusal
		}
		ch <- res{s, err}
	}()
	ds, derr = wire.NodeHandshake(a, d)
	if derr != nil {
		a.Close()
	}
	r := <-ch
	return ds, r.s, a, b, derr, r.err
}

// TestNodeHandshakeMutual: both sides end with the same keys, each side's
// sending key is the other's receiving key, the names are exchanged, and a
// sealed frame goes through in both directions.
func TestNodeHandshakeMutual(t *testing.T) {
	ds, as, a, b, derr, aerr := pipeHandshake(t, wire.NodeDial{Name: "node-b", ClientAddr: "10.0.0.2:4222", Secret: hsSecret, Expect: "node-a"}, hsSecret, "node-a")
	if derr != nil || aerr != nil {
		t.Fatalf("dialer %v, acceptor %v", derr, aerr)
	}
	defer a.Close()
	defer b.Close()
	if ds.Peer != "node-a" || as.Peer != "node-b" || ds.Keys != as.Keys || ds.Keys.DialerToAcceptor == ds.Keys.AcceptorToDialer {
		t.Fatalf("sessions %+v / %+v", ds, as)
	}
	dc, ac := ds.Conn(a), as.Conn(b)
	go func() { _, _ = dc.Write(wire.AppendPing(nil, 9)) }()
	r := wire.NewReader(ac, wire.MinMaxBody)
	if h, _, err := r.Next(); err != nil || h.Type != wire.TypePing || h.ID != 9 {
		t.Fatalf("acceptor read %+v, %v", h, err)
	}
	go func() { _, _ = ac.Write(wire.AppendPong(nil, 9)) }()
	r = wire.NewReader(dc, wire.MinMaxBody)
	if h, _, err := r.Next(); err != nil || h.Type != wire.TypePong || h.ID != 9 {
		t.Fatalf("dialer read %+v, %v", h, err)
	}
}

// TestNodeHandshakeWrongSecret: a dialer without the secret is refused
// after its NODE_PROOF and never receives a proof or a key; an acceptor
// without the secret is found out by the dialer.
func TestNodeHandshakeWrongSecret(t *testing.T) {
	for _, tc := range []struct{ dial, accept string }{{"", hsSecret}, {strings.Repeat("x", 32), hsSecret}, {hsSecret, strings.Repeat("y", 32)}} {
		_, as, a, b, derr, aerr := pipeHandshake(t, wire.NodeDial{Name: "x", Secret: tc.dial}, tc.accept, "node-a")
		a.Close()
		b.Close()
		if as != nil || aerr == nil {
			t.Fatalf("%q vs %q: acceptor accepted", tc.dial, tc.accept)
		}
		var we wire.Error
		if !errors.As(derr, &we) || we.Code != wire.CodeUnauthenticated {
			t.Fatalf("%q vs %q: dialer got %v, want the UNAUTHENTICATED refusal", tc.dial, tc.accept, derr)
		}
	}
}

// TestNodeHandshakeReplayRefused: a recorded NODE_HELLO and NODE_PROOF of
// a good handshake, replayed on a new connection, are refused: the
// acceptor's new nonce makes the recorded proof wrong.
func TestNodeHandshakeReplayRefused(t *testing.T) {
	rec := &recorder{}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = acceptOne(b, hsSecret, "node-a", seq32(0xa0)) }()
	rec.c = a
	if _, err := wire.NodeHandshake(rec, wire.NodeDial{Name: "node-b", Secret: hsSecret}); err != nil {
		t.Fatal(err)
	}
	frames := splitHeaders(t, rec.sent.Bytes())
	if len(frames) != 2 || frames[0].Type != wire.TypeNodeHello || frames[1].Type != wire.TypeNodeProof {
		t.Fatalf("recorded %v", frames)
	}
	// The replay, against an acceptor whose nonce differs (as a fresh
	// random one does).
	p := &rw{in: bytes.NewReader(rec.sent.Bytes())}
	_, err := acceptOne(p, hsSecret, "node-a", seq32(0x10))
	var we wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated {
		t.Fatalf("replayed handshake: %v, want UNAUTHENTICATED", err)
	}
	if hasType(t, p.out.Bytes(), wire.TypeNodeWelcome) {
		t.Fatal("the replay got a NODE_WELCOME")
	}
}

// TestNodeHandshakeReflectionRefused: the acceptor's proof cannot stand in
// for the dialer's (the labels differ), an acceptor that echoes the
// dialer's NODE_HELLO back as its challenge is refused by the dialer, and
// an acceptor refuses a NODE_HELLO with its own name.
func TestNodeHandshakeReflectionRefused(t *testing.T) {
	h := wire.NodeHello{Version: wire.NodeVersion, Name: "node-b", Nonce: nonceD}
	c := wire.NodeChallenge{Name: "node-a", Nonce: nonceA}
	tr := wire.NodeTranscript(h, c)
	if wire.CheckNodeProof(hsSecret, wire.RoleDialer, tr, wire.ComputeNodeProof(hsSecret, wire.RoleAcceptor, tr)) ||
		wire.CheckNodeProof(hsSecret, wire.RoleAcceptor, tr, wire.ComputeNodeProof(hsSecret, wire.RoleDialer, tr)) {
		t.Fatal("a proof of one direction passes for the other")
	}
	// The acceptor's NODE_WELCOME, sent back as a NODE_PROOF.
	a := wire.AcceptNodeHello(hsSecret, "node-a", h, nonceA)
	welcome, _, err := a.Finish(nil, wire.AppendNodeProof(nil, wire.ComputeNodeProof(hsSecret, wire.RoleDialer, tr))[wire.HeaderLen:])
	if err != nil {
		t.Fatal(err)
	}
	a = wire.AcceptNodeHello(hsSecret, "node-a", h, nonceA)
	if _, s, err := a.Finish(nil, welcome[wire.HeaderLen:]); s != nil || !errors.Is(err, wire.ErrNodeAuth) {
		t.Fatalf("reflected NODE_WELCOME as NODE_PROOF: %v, %v", s, err)
	}
	if wire.AcceptNodeHello(hsSecret, "node-b", h, nonceA) != nil || wire.AcceptNodeHello(hsSecret, "node-a", h, nonceD) != nil {
		t.Fatal("acceptor took its own name or nonce")
	}

	// A "node" that mirrors the dialer: its challenge is the dialer's own
	// name and nonce.
	a1, b1 := net.Pipe()
	defer a1.Close()
	defer b1.Close()
	go func() {
		r := wire.NewReader(b1, wire.MinMaxBody)
		_, body, err := r.Next()
		if err != nil {
			return
		}
		hh, _ := wire.DecodeNodeHello(body)
		_, _ = b1.Write(wire.AppendNodeChallenge(nil, wire.NodeChallenge{Name: hh.Name, Nonce: hh.Nonce}))
	}()
	_ = a1.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := wire.NodeHandshake(a1, wire.NodeDial{Name: "node-b", Secret: hsSecret}); !errors.Is(err, wire.ErrNodeAuth) {
		t.Fatalf("mirrored challenge: %v, want ErrNodeAuth", err)
	}
}

// TestNodeHandshakeAcceptorMustProve: a NODE_WELCOME whose proof is wrong
// (an impostor that has the dialer's proof but not the secret), or a
// challenge from another node than expected, fails the dialer.
func TestNodeHandshakeAcceptorMustProve(t *testing.T) {
	script := func(name string, welcome [32]byte) []byte {
		return append(wire.AppendNodeChallenge(nil, wire.NodeChallenge{Name: name, Nonce: nonceA}), wire.AppendNodeWelcome(nil, welcome)...)
	}
	d := wire.NodeDial{Name: "node-b", Secret: hsSecret, Expect: "node-a", Rand: fixedRand(nonceD)}
	tr := wire.NodeTranscript(wire.NodeHello{Version: wire.NodeVersion, Name: "node-b", Nonce: nonceD}, wire.NodeChallenge{Name: "node-a", Nonce: nonceA})
	for name, in := range map[string][]byte{
		"zero proof":       script("node-a", [32]byte{}),
		"dialer's proof":   script("node-a", wire.ComputeNodeProof(hsSecret, wire.RoleDialer, tr)),
		"other secret":     script("node-a", wire.ComputeNodeProof(strings.Repeat("z", 32), wire.RoleAcceptor, tr)),
		"another node":     script("node-c", wire.ComputeNodeProof(hsSecret, wire.RoleAcceptor, tr)),
		"welcome too soon": wire.AppendNodeWelcome(nil, wire.ComputeNodeProof(hsSecret, wire.RoleAcceptor, tr)),
	} {
		_, err := wire.NodeHandshake(&rw{in: bytes.NewReader(in)}, d)
		if !errors.Is(err, wire.ErrNodeAuth) && !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v, want ErrNodeAuth or ErrMalformed", name, err)
		}
	}
	// The right proof passes (the control).
	if _, err := wire.NodeHandshake(&rw{in: bytes.NewReader(script("node-a", wire.ComputeNodeProof(hsSecret, wire.RoleAcceptor, tr)))}, d); err != nil {
		t.Fatalf("control: %v", err)
	}
	refused := wire.AppendError(nil, 0, wire.Error{Code: wire.CodeUnauthenticated, Text: "bad node proof"})
	_, err := wire.NodeHandshake(&rw{in: bytes.NewReader(refused)}, d)
	var we wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated {
		t.Fatalf("refusal: %v, want the node's ERROR", err)
	}
	if _, err := wire.NodeHandshake(&rw{in: bytes.NewReader(nil)}, d); !errors.Is(err, io.EOF) {
		t.Fatalf("no answer: %v, want EOF", err)
	}
}

// TestNodeHandshakeRestIsSealed: bytes the acceptor sent right after
// NODE_WELCOME are not lost: they start the record stream.
func TestNodeHandshakeRestIsSealed(t *testing.T) {
	d := wire.NodeDial{Name: "node-b", Secret: hsSecret, Rand: fixedRand(nonceD)}
	h := wire.NodeHello{Version: wire.NodeVersion, Name: "node-b", Nonce: nonceD}
	a := wire.AcceptNodeHello(hsSecret, "node-a", h, nonceA)
	tr := wire.NodeTranscript(h, wire.NodeChallenge{Name: "node-a", Nonce: nonceA})
	welcome, as, err := a.Finish(nil, wire.AppendNodeProof(nil, wire.ComputeNodeProof(hsSecret, wire.RoleDialer, tr))[wire.HeaderLen:])
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := as.Sealer().Seal(nil, wire.AppendPong(nil, 3))
	in := append(append(a.AppendChallenge(nil), welcome...), rec...)
	p := &rw{in: bytes.NewReader(in)}
	ds, err := wire.NodeHandshake(p, d)
	if err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(ds.Conn(p), wire.MinMaxBody)
	if hd, _, err := r.Next(); err != nil || hd.Type != wire.TypePong || hd.ID != 3 {
		t.Fatalf("first sealed frame: %+v %v", hd, err)
	}
}

type recorder struct {
	c    net.Conn
	sent bytes.Buffer
}

func (r *recorder) Read(b []byte) (int, error) { return r.c.Read(b) }
func (r *recorder) Write(b []byte) (int, error) {
	r.sent.Write(b)
	return r.c.Write(b)
}

func splitHeaders(t *testing.T, b []byte) []wire.Header {
	t.Helper()
	var hs []wire.Header
	for len(b) > 0 {
		h, _, n, err := wire.Split(b, wire.MinMaxBody)
		if err != nil {
			t.Fatal(err)
		}
		hs, b = append(hs, h), b[n:]
	}
	return hs
}

func hasType(t *testing.T, b []byte, ty wire.Type) bool {
	for _, h := range splitHeaders(t, b) {
		if h.Type == ty {
			return true
		}
	}
	return false
}
