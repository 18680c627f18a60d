package metalog

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// scriptConn is a net.Conn that reads a fixed script and records writes.
type scriptConn struct {
	net.Conn // nil: only the methods below are used
	in       *bytes.Reader
	out      bytes.Buffer
}

func (c *scriptConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzAcceptHandshake: whatever a peer without the secret sends, the
// acceptor never completes the handshake and writes only whole frames: at
// most a NODE_CHALLENGE and an ERROR.
func FuzzAcceptHandshake(f *testing.F) {
	hello := wire.AppendNodeHello(nil, wire.NodeHello{Version: wire.NodeVersion, Name: sid("x", 1), Nonce: [32]byte{7}})
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), wire.AppendNodeProof(nil, [32]byte{9})...))
	f.Add(wire.AppendHeader(nil, wire.TypeNodeHello, 0, 0, 0xFFFFFFFF))
	f.Add([]byte("garbage that is not a frame"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &scriptConn{in: bytes.NewReader(in)}
		sess, err := acceptHandshake(c, sid("b", 1), testSecret, time.Now().Add(time.Second))
		if sess != nil || err == nil {
			t.Fatal("a handshake completed without the secret")
		}
		out := c.out.Bytes()
		for n := 0; len(out) > 0; n++ {
			h, _, k, err := wire.Split(out, wire.MinMaxBody)
			if err != nil || n > 1 || h.Type != wire.TypeNodeChallenge && h.Type != wire.TypeError {
				t.Fatalf("wrote %x: %v", c.out.Bytes(), err)
			}
			out = out[k:]
		}
	})
}
