package wire

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
)

// ErrNodeAuth is wrapped by the dialer's errors about an acceptor that did
// not prove knowledge of the cluster secret, or answered for another node
// or with the dialer's own values (a reflected handshake).
var ErrNodeAuth = errors.New("wire: node handshake: peer not authenticated")

// NodeDial is the dialer's side of a node handshake.
type NodeDial struct {
	Name       string // the dialing node's name (1..255 bytes)
	ClientAddr string // its client address
	Secret     string // the cluster secret ("" if the cluster has none)
	Expect     string // the acceptor's name the dialer means to reach; "" takes any
	Rand       io.Reader
}

// NodeSession is the outcome of a completed handshake, on either side.
type NodeSession struct {
	Peer string   // the other node's name
	Role NodeRole // this side's role
	Keys NodeKeys
	// Rest holds bytes read from the stream after NODE_WELCOME (the
	// dialer's side): they start the acceptor's record stream.
	Rest []byte
}

// Sealer returns the Sealer of this side's sending direction.
func (s *NodeSession) Sealer() *Sealer { return NewSealer(s.Keys.Send(s.Role)) }

// Opener returns the Opener of the peer's sending direction.
func (s *NodeSession) Opener() *Opener { return NewOpener(s.Keys.Receive(s.Role)) }

// Conn returns rw as a SealedConn keyed by the session (with Rest).
func (s *NodeSession) Conn(rw io.ReadWriter) *SealedConn {
	return NewSealedConn(rw, s.Keys.Send(s.Role), s.Keys.Receive(s.Role), s.Rest)
}

// NodeHandshake is the dialer's side of the node handshake on rw
// (PROTOCOL.md 9.1): it writes NODE_HELLO with a fresh nonce, reads
// NODE_CHALLENGE, writes NODE_PROOF and reads NODE_WELCOME, whose proof it
// checks, all with the pre-handshake body limit (MinMaxBody). A refusal is
// returned as the node's Error (match it with errors.As); an acceptor that
// fails to prove itself, names another node than d.Expect, or echoes the
// dialer's own name or nonce wraps ErrNodeAuth; any other unexpected
// answer wraps ErrMalformed. Deadlines are the caller's (set them on rw).
// Every frame after the handshake must go through the session's records.
func NodeHandshake(rw io.ReadWriter, d NodeDial) (*NodeSession, error) {
	src := d.Rand
	if src == nil {
		src = rand.Reader
	}
	h := NodeHello{Version: NodeVersion, Name: d.Name, ClientAddr: d.ClientAddr}
	if _, err := io.ReadFull(src, h.Nonce[:]); err != nil {
		return nil, fmt.Errorf("wire: node handshake: nonce: %w", err)
	}
	if _, err := rw.Write(AppendNodeHello(nil, h)); err != nil {
		return nil, err
	}
	r := NewReader(rw, MinMaxBody)
	body, err := expectFrame(r, TypeNodeChallenge, TypeNodeHello)
	if err != nil {
		return nil, err
	}
	ch, err := DecodeNodeChallenge(body)
	if err != nil {
		return nil, err
	}
	switch {
	case ch.Nonce == h.Nonce || ch.Name == h.Name:
		return nil, fmt.Errorf("%w: NODE_CHALLENGE repeats this node's own name or nonce (a reflected NODE_HELLO)", ErrNodeAuth)
	case d.Expect != "" && ch.Name != d.Expect:
		return nil, fmt.Errorf("%w: is node %q, not %q", ErrNodeAuth, ch.Name, d.Expect)
	}
	t := NodeTranscript(h, ch)
	if _, err := rw.Write(AppendNodeProof(nil, ComputeNodeProof(d.Secret, RoleDialer, t))); err != nil {
		return nil, err
	}
	body, err = expectFrame(r, TypeNodeWelcome, TypeNodeProof)
	if err != nil {
		return nil, err
	}
	proof, err := DecodeNodeWelcome(body)
	if err != nil {
		return nil, err
	}
	if !CheckNodeProof(d.Secret, RoleAcceptor, t, proof) {
		return nil, fmt.Errorf("%w: node %q sent a NODE_WELCOME proof that does not match the cluster secret", ErrNodeAuth, ch.Name)
	}
	s := &NodeSession{Peer: ch.Name, Role: RoleDialer, Keys: DeriveNodeKeys(d.Secret, h, ch)}
	if n := r.Buffered(); n > 0 {
		s.Rest = append([]byte(nil), r.buf[r.r:r.w]...)
	}
	return s, nil
}

// expectFrame reads the next frame and returns its body if it has type
// want; an ERROR is returned as the node's Error.
func expectFrame(r *Reader, want, after Type) ([]byte, error) {
	hd, body, err := r.Next()
	if err != nil {
		return nil, err
	}
	switch hd.Type {
	case want:
		return body, nil
	case TypeError:
		e, err := DecodeError(hd, body)
		if err != nil {
			return nil, err
		}
		return nil, e
	}
	return nil, fmt.Errorf("%w: %v in answer to %v, want %v", ErrMalformed, hd.Type, after, want)
}

// NodeAcceptor is the acceptor's state between NODE_HELLO and NODE_PROOF.
// It is pure: the caller reads and writes the frames.
type NodeAcceptor struct {
	secret string
	hello  NodeHello
	ch     NodeChallenge
	t      []byte
}

// AcceptNodeHello starts the acceptor's side for a decoded NODE_HELLO
// whose version the caller checked; self is the acceptor's name and nonce
// its fresh random nonce. It returns nil when the hello reflects the
// acceptor's own name or nonce.
func AcceptNodeHello(secret, self string, h NodeHello, nonce [NodeNonceLen]byte) *NodeAcceptor {
	if h.Name == self || h.Nonce == nonce {
		return nil
	}
	a := &NodeAcceptor{secret: secret, hello: h, ch: NodeChallenge{Name: self, Nonce: nonce}}
	a.t = NodeTranscript(h, a.ch)
	return a
}

// Hello returns the NODE_HELLO being answered.
func (a *NodeAcceptor) Hello() NodeHello { return a.hello }

// AppendChallenge appends the NODE_CHALLENGE to send.
func (a *NodeAcceptor) AppendChallenge(dst []byte) []byte { return AppendNodeChallenge(dst, a.ch) }

// Finish checks the dialer's NODE_PROOF body (in constant time). On
// success it appends the NODE_WELCOME to send to dst and returns the
// session; on failure it returns dst unchanged, a nil session and an error
// (wrapping ErrMalformed for a malformed body, else ErrNodeAuth).
func (a *NodeAcceptor) Finish(dst, proofBody []byte) ([]byte, *NodeSession, error) {
	proof, err := DecodeNodeProof(proofBody)
	if err != nil {
		return dst, nil, err
	}
	if !CheckNodeProof(a.secret, RoleDialer, a.t, proof) {
		return dst, nil, fmt.Errorf("%w: bad node proof from %q", ErrNodeAuth, a.hello.Name)
	}
	dst = AppendNodeWelcome(dst, ComputeNodeProof(a.secret, RoleAcceptor, a.t))
	return dst, &NodeSession{Peer: a.hello.Name, Role: RoleAcceptor, Keys: DeriveNodeKeys(a.secret, a.hello, a.ch)}, nil
}
