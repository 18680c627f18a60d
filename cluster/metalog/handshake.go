package metalog

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// The acceptor's side of the node handshake (PROTOCOL.md 9.1), in blocking
// form for the Raft transport: read NODE_HELLO, answer NODE_CHALLENGE, read
// NODE_PROOF, answer NODE_WELCOME. Frames are read exactly (header, then
// the body the header declares, checked against wire.MinMaxBody before
// anything is allocated), so nothing past NODE_PROOF is consumed: the
// dialer sends its first sealed record only after NODE_WELCOME. A refusal
// is answered with a fatal ERROR, as the node links' acceptor does, and the
// caller closes the connection.

// errHandshake is wrapped by every acceptor-side handshake failure.
var errHandshake = errors.New("metalog: node handshake refused")

// acceptHandshake runs the acceptor's side on c, which it bounds by
// deadline; on success it clears the deadline and returns the session.
func acceptHandshake(c net.Conn, self, secret string, deadline time.Time) (*wire.NodeSession, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	h, body, err := readFrame(c)
	if err != nil {
		return nil, refuse(c, err)
	}
	if h.Type != wire.TypeNodeHello {
		return nil, refuseCode(c, wire.CodeHelloRequired, fmt.Sprintf("%v before NODE_HELLO", h.Type))
	}
	hello, err := wire.DecodeNodeHello(body)
	if err != nil || hello.Version != wire.NodeVersion {
		if len(body) >= 2 && hello.Version != wire.NodeVersion {
			return nil, refuseCode(c, wire.CodeUnsupportedVersion,
				fmt.Sprintf("node protocol %d, this node speaks %d", hello.Version, wire.NodeVersion))
		}
		return nil, refuse(c, err)
	}
	var nonce [wire.NodeNonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, refuseCode(c, wire.CodeInternal, "no randomness for the node handshake")
	}
	acc := wire.AcceptNodeHello(secret, self, hello, nonce)
	if acc == nil {
		return nil, refuseCode(c, wire.CodeUnauthenticated, "NODE_HELLO carries this node's own name or nonce (a reflected handshake)")
	}
	if _, err := c.Write(acc.AppendChallenge(nil)); err != nil {
		return nil, fmt.Errorf("%w: %v", errHandshake, err)
	}
	h, body, err = readFrame(c)
	if err != nil {
		return nil, refuse(c, err)
	}
	if h.Type != wire.TypeNodeProof {
		return nil, refuseCode(c, wire.CodeProtocolError, fmt.Sprintf("%v during the node handshake, want NODE_PROOF", h.Type))
	}
	welcome, sess, err := acc.Finish(nil, body)
	if err != nil {
		if errors.Is(err, wire.ErrNodeAuth) {
			refuseCode(c, wire.CodeUnauthenticated, "bad node proof")
			return nil, fmt.Errorf("%w: node %q: %v", errHandshake, hello.Name, err)
		}
		return nil, refuse(c, err)
	}
	if _, err := c.Write(welcome); err != nil {
		return nil, fmt.Errorf("%w: %v", errHandshake, err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return sess, nil
}

// readFrame reads one whole plaintext frame from r: the 10-byte header,
// then a body of at most wire.MinMaxBody bytes.
func readFrame(r io.Reader) (wire.Header, []byte, error) {
	var hb [wire.HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.ParseHeader(hb[:], wire.MinMaxBody)
	if err != nil {
		return h, nil, err
	}
	if h.Flags != 0 {
		return h, nil, fmt.Errorf("%w: %v has flags %#x during the node handshake", wire.ErrMalformed, h.Type, h.Flags)
	}
	body := make([]byte, h.Len)
	if _, err := io.ReadFull(r, body); err != nil {
		return h, nil, err
	}
	return h, body, nil
}

// refuse answers a malformed or too large frame with its ERROR; a read
// error (the peer went away, the deadline passed) gets no answer.
func refuse(c net.Conn, err error) error {
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return refuseCode(c, wire.CodeFrameTooLarge, err.Error())
	case errors.Is(err, wire.ErrMalformed):
		return refuseCode(c, wire.CodeProtocolError, err.Error())
	}
	return fmt.Errorf("%w: %v", errHandshake, err)
}

// refuseCode writes a fatal ERROR (within the handshake's deadline) and
// returns the failure.
func refuseCode(c net.Conn, code wire.Code, text string) error {
	if len(text) > 1024 {
		text = text[:1024]
	}
	_, _ = c.Write(wire.AppendError(nil, 0, wire.Error{Code: code, Retriable: code.Retriable(), Text: text}))
	return fmt.Errorf("%w: %v: %s", errHandshake, code, text)
}
