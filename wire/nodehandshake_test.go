package wire_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// rw is a scripted peer: what is written goes to out, reads come from in.
type rw struct {
	in  io.Reader
	out bytes.Buffer
}

func (p *rw) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *rw) Write(b []byte) (int, error) { return p.out.Write(b) }

func TestNodeProofMatchesTheGoldenVector(t *testing.T) {
	if !bytes.Equal(wire.NodeProof(goldenSecret, "node-b"), nodeProof(goldenSecret, "node-b")) {
		t.Fatal("wire.NodeProof differs from PROTOCOL.md 9.1")
	}
	if wire.NodeProof("", "node-b") != nil {
		t.Fatal("a proof without a secret")
	}
}

func TestNodeHandshake(t *testing.T) {
	hello := wire.NodeHello{Version: wire.NodeVersion, Name: "a", ClientAddr: "127.0.0.1:1", Proof: wire.NodeProof("s", "a")}
	p := &rw{in: bytes.NewReader(append(wire.AppendNodeWelcome(nil, "b"), wire.AppendPong(nil, 7)...))}
	r, name, err := wire.NodeHandshake(p, hello)
	if err != nil || name != "b" {
		t.Fatalf("welcome: %q, %v", name, err)
	}
	if !bytes.Equal(p.out.Bytes(), wire.AppendNodeHello(nil, hello)) {
		t.Fatal("NODE_HELLO not written as encoded")
	}
	if h, _, err := r.Next(); err != nil || h.Type != wire.TypePong || h.ID != 7 {
		t.Fatalf("the returned Reader lost what followed: %v %v", h, err)
	}

	refused := wire.AppendError(nil, 0, wire.Error{Code: wire.CodeUnauthenticated, Text: "bad node proof"})
	_, _, err = wire.NodeHandshake(&rw{in: bytes.NewReader(refused)}, hello)
	var we wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated {
		t.Fatalf("refusal: %v, want the node's ERROR", err)
	}

	_, _, err = wire.NodeHandshake(&rw{in: bytes.NewReader(wire.AppendPong(nil, 1))}, hello)
	if !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("a PONG answer: %v, want ErrMalformed", err)
	}
	_, _, err = wire.NodeHandshake(&rw{in: bytes.NewReader(nil)}, hello)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("no answer: %v, want EOF", err)
	}
}
