package engine

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// FuzzNodeConn writes fuzzer bytes on a node connection of a one-node
// cluster, after a completed node handshake, in fuzzer-chosen pieces,
// each sealed as one record; or, when the first cut byte has its top bit
// set, unsealed, as an outsider's bytes on the record stream (which the
// node must refuse by closing). Properties:
// every frame the node sends decodes and is one a node sends on such a
// connection; the connection either answers a final OpStatus request (a
// barrier: every earlier frame was handled) or is closed with an ERROR;
// and the node still serves clients and a fresh node connection.
func FuzzNodeConn(f *testing.F) {
	s := startNode(f, "fz", nil, nil)
	name := "fz"
	ch := "fz.node"
	// Seeds: every node frame the acceptor takes, valid and broken.
	var e wire.NodeEnc
	e.Str8(ch)
	e.U64(0)
	grant := wire.AppendNodeRequest(nil, 1, wire.OpWriteGrant, e.B)
	var ei wire.NodeEnc
	ei.Str8(ch)
	info := wire.AppendNodeRequest(nil, 2, wire.OpCreate, ei.B)
	app := wire.AppendNodeAppendHeader(nil, 3, wire.NodeAppend{Streamlet: 1, Epoch: 1, Count: 1}, 8)
	app = wire.AppendRecord(app, []byte("abcd"))
	f.Add(grant, []byte{0})
	f.Add(append(append(info, wire.AppendNodeRead(nil, 1, 0)...), wire.AppendNodeUnread(nil, 1)...), []byte{3, 7})
	f.Add(app, []byte{1})
	var ec wire.NodeEnc // COPY from a holder that is no member, and truncated
	ec.Str8(ch)
	ec.U64(1)
	ec.U64(7)
	ec.Str8("nobody")
	ec.U64(0)
	ec.U64(10)
	cp := wire.AppendNodeRequest(nil, 5, wire.OpCopy, ec.B)
	f.Add(cp, []byte{0})
	f.Add(wire.AppendNodeRequest(nil, 6, wire.OpCopy, ec.B[:9]), []byte(nil))
	var ed wire.NodeEnc // DRAIN of a node that is no member
	ed.Str8("nobody")
	f.Add(wire.AppendNodeRequest(nil, 7, wire.OpDrain, ed.B), []byte(nil))
	var eu wire.NodeEnc // UNREACHABLE of a streamlet the manager does not list, and truncated
	eu.Str8(ch)
	eu.U64(7)
	eu.Str8("fz")
	eu.Str8("nobody")
	f.Add(wire.AppendNodeRequest(nil, 8, wire.OpUnreachable, eu.B), []byte{0})
	f.Add(wire.AppendNodeRequest(nil, 10, wire.OpUnreachable, eu.B[:12]), []byte(nil))
	f.Add(wire.AppendPing(nil, 9), []byte(nil))
	f.Add(wire.AppendPublish(nil, 4, wire.FlagAck, ch, []byte("x")), []byte(nil))
	f.Add([]byte{0, 0, 0, 1, 0x42, 0, 0, 0, 0, 1, 99}, []byte(nil))
	f.Add(wire.AppendHeader(nil, wire.TypeNodeAppend, 0, 1, 1<<30), []byte(nil))
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		if err := nodeConnCheck(s.Addr(), name, stream, cuts); err != nil {
			t.Fatal(err)
		}
		if err := nodeConnCheck(s.Addr(), name, nil, nil); err != nil {
			t.Fatalf("a fresh node connection fails after the input: %v", err)
		}
		c, err := dialErr(t, s.Addr(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer c.nc.Close()
		if _, err := c.handshakeErr(); err != nil {
			t.Fatalf("clients are refused after the input: %v", err)
		}
		if _, err := c.publishBatch("fz.probe", [][]byte{[]byte("p")}); err != nil {
			t.Fatalf("a client cannot publish after the input: %v", err)
		}
	})
}

// nodeConnCheck runs one input; see FuzzNodeConn.
func nodeConnCheck(addr, name string, stream, cuts []byte) error {
	nc, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	sess, err := wire.NodeHandshake(nc, wire.NodeDial{Name: "fuzzer", ClientAddr: "127.0.0.1:1", Expect: name})
	if err != nil {
		return fmt.Errorf("node handshake: %w", err)
	}
	sc := sess.Conn(nc)
	raw := len(cuts) > 0 && cuts[0]&0x80 != 0
	var w io.Writer = sc
	if raw {
		w = nc
	}
	stream = stream[:min(len(stream), 64<<10)]
	stream0 := stream
	for i := 0; len(stream) > 0; i++ {
		k := len(stream)
		if len(cuts) > 0 {
			k = min(k, 1+int(cuts[i%len(cuts)])%64)
		}
		if _, err := w.Write(stream[:k]); err != nil {
			break // the node closed the connection: judged below
		}
		stream = stream[k:]
	}
	// Complete a frame the input left unfinished, so that the marker is
	// read as a frame of its own (the node rightly waits for the rest).
	_, _ = w.Write(completion(stream0))
	marker := 0x80000000 | rand.Uint32()
	_, _ = w.Write(wire.AppendNodeRequest(nil, marker, wire.OpStatus, nil))
	r := wire.NewReader(sc, 8<<20)
	welcomed := true // by the handshake
	for {
		h, body, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return nil // closed: legitimate after a malformed frame
			}
			return fmt.Errorf("reading the node's answers: %w", err)
		}
		if raw && h.Type != wire.TypeError {
			return fmt.Errorf("unsealed bytes on the record stream were answered with %v", h.Type)
		}
		if err := checkNodeFrame(h, body, welcomed); err != nil {
			return err
		}
		if h.Type == wire.TypeNodeResponse && h.ID == marker {
			return nil
		}
	}
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// completion returns the bytes that complete the last frame of written
// (zeros), or nothing when it ends on a frame boundary or the node must
// close anyway (a declared length over its limit).
func completion(written []byte) []byte {
	var pad []byte
	for {
		b := append(written, pad...)
		for {
			_, _, n, err := wire.Split(b, peerLimitForTests)
			if err == wire.ErrIncomplete {
				break
			}
			if err != nil {
				return pad
			}
			b = b[n:]
		}
		if len(b) == 0 {
			return pad
		}
		need := wire.HeaderLen - len(b)
		if len(b) >= wire.HeaderLen {
			h, _ := wire.ParseHeader(b, peerLimitForTests)
			need = wire.HeaderLen + int(h.Len) - len(b)
		}
		pad = append(pad, make([]byte, need)...)
	}
}

// peerLimitForTests is the node body limit of a server with default
// options (Server.peerMaxBody).
var peerLimitForTests = uint32(3*max(1<<20, int(wire.MaxBodyFor(uint32(DefaultOptions().MaxPayload)))) + 64)

// checkNodeFrame checks one frame a node sent on a node connection.
func checkNodeFrame(h wire.Header, body []byte, welcomed bool) error {
	var err error
	switch h.Type {
	case wire.TypeNodeWelcome:
		if welcomed {
			return errors.New("a second NODE_WELCOME")
		}
		_, err = wire.DecodeNodeWelcome(body)
	case wire.TypeNodeResponse:
		_, _, _, err = wire.DecodeNodeResponse(body)
	case wire.TypeNodeAppended:
		_, err = wire.DecodeNodeAppended(body)
	case wire.TypeNodeFeed:
		_, _, _, err = wire.DecodeNodeFeed(body)
	case wire.TypePong:
		err = wire.DecodePong(body)
	case wire.TypeError:
		_, err = wire.DecodeError(h, body)
	default:
		return fmt.Errorf("a node sent %v on a node connection", h.Type)
	}
	if err != nil {
		return fmt.Errorf("the node sent a malformed %v: %w", h.Type, err)
	}
	if !welcomed && h.Type != wire.TypeNodeWelcome && h.Type != wire.TypeError {
		return fmt.Errorf("%v before NODE_WELCOME", h.Type)
	}
	return nil
}
