package wire_test

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

func goldenFile(t testing.TB, name string) []byte {
	return readHex(t, filepath.Join("testdata", "node_handshake", name))
}

// TestNodeHandshakeGolden: the handshake and the first records of
// testdata/node_handshake, both ways: the code produces the files' bytes
// from their stated inputs, and a dialer and an acceptor that are fed the
// files complete the handshake and open the records.
func TestNodeHandshakeGolden(t *testing.T) {
	h := wire.NodeHello{Version: wire.NodeVersion, Name: "node-b", ClientAddr: "10.0.0.2:4222", Nonce: nonceD}
	c := wire.NodeChallenge{Name: "node-a", Nonce: nonceA}
	tr := wire.NodeTranscript(h, c)
	keys := wire.DeriveNodeKeys(hsSecret, h, c)
	dSeal, aSeal := wire.NewSealer(keys.DialerToAcceptor), wire.NewSealer(keys.AcceptorToDialer)
	rec := func(s *wire.Sealer, frame []byte) []byte {
		b, err := s.Seal(nil, frame)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, got := range map[string][]byte{
		"1_node_hello.hex":        wire.AppendNodeHello(nil, h),
		"2_node_challenge.hex":    wire.AppendNodeChallenge(nil, c),
		"transcript.hex":          tr,
		"3_node_proof.hex":        wire.AppendNodeProof(nil, wire.ComputeNodeProof(hsSecret, wire.RoleDialer, tr)),
		"4_node_welcome.hex":      wire.AppendNodeWelcome(nil, wire.ComputeNodeProof(hsSecret, wire.RoleAcceptor, tr)),
		"keys.hex":                append(keys.DialerToAcceptor[:], keys.AcceptorToDialer[:]...),
		"5_sealed_dialer_0.hex":   rec(dSeal, wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil)),
		"6_sealed_dialer_1.hex":   rec(dSeal, wire.AppendPing(nil, 2)),
		"7_sealed_acceptor_0.hex": rec(aSeal, wire.AppendPong(nil, 2)),
	} {
		if want := goldenFile(t, name); !bytes.Equal(got, want) {
			t.Errorf("%s: encoded\n% x\ngolden\n% x", name, got, want)
		}
	}

	// Decode direction: a dialer fed the acceptor's files.
	p := &rw{in: bytes.NewReader(cat(goldenFile(t, "2_node_challenge.hex"), goldenFile(t, "4_node_welcome.hex"), goldenFile(t, "7_sealed_acceptor_0.hex")))}
	ds, err := wire.NodeHandshake(p, wire.NodeDial{Name: "node-b", ClientAddr: "10.0.0.2:4222", Secret: hsSecret, Expect: "node-a", Rand: fixedRand(nonceD)})
	if err != nil {
		t.Fatal(err)
	}
	if want := cat(goldenFile(t, "1_node_hello.hex"), goldenFile(t, "3_node_proof.hex")); !bytes.Equal(p.out.Bytes(), want) {
		t.Fatalf("dialer wrote\n% x\nwant\n% x", p.out.Bytes(), want)
	}
	r := wire.NewReader(ds.Conn(p), wire.MinMaxBody)
	if hd, _, err := r.Next(); err != nil || hd.Type != wire.TypePong || hd.ID != 2 {
		t.Fatalf("dialer opened %+v, %v", hd, err)
	}
	// An acceptor fed the dialer's files.
	hello, err := wire.DecodeNodeHello(goldenFile(t, "1_node_hello.hex")[wire.HeaderLen:])
	if err != nil || hello != h {
		t.Fatalf("hello %+v, %v", hello, err)
	}
	a := wire.AcceptNodeHello(hsSecret, "node-a", hello, nonceA)
	welcome, as, err := a.Finish(nil, goldenFile(t, "3_node_proof.hex")[wire.HeaderLen:])
	if err != nil || !bytes.Equal(welcome, goldenFile(t, "4_node_welcome.hex")) {
		t.Fatalf("acceptor: % x, %v", welcome, err)
	}
	o := as.Opener()
	plain, n, err := o.OpenAll(nil, cat(goldenFile(t, "5_sealed_dialer_0.hex"), goldenFile(t, "6_sealed_dialer_1.hex")))
	if err != nil || n != 37+36 || !bytes.Equal(plain, cat(wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil), wire.AppendPing(nil, 2))) {
		t.Fatalf("acceptor opened % x (%d bytes), %v", plain, n, err)
	}
}

func testKeys() wire.NodeKeys {
	return wire.DeriveNodeKeys(hsSecret, wire.NodeHello{Version: wire.NodeVersion, Name: "node-b", Nonce: nonceD}, wire.NodeChallenge{Name: "node-a", Nonce: nonceA})
}

// TestSealedRoundTrip: plaintexts of every size around the record limit
// come back whole, in records of at most MaxSealedPlain bytes.
func TestSealedRoundTrip(t *testing.T) {
	k := testKeys()
	s, o := wire.NewSealer(k.DialerToAcceptor), wire.NewOpener(k.DialerToAcceptor)
	var all, stream []byte
	for _, n := range []int{1, 2, 100, wire.MaxSealedPlain - 1, wire.MaxSealedPlain, wire.MaxSealedPlain + 1, 3*wire.MaxSealedPlain + 7} {
		p := bytes.Repeat([]byte{byte(n)}, n)
		before := s.Seq()
		var err error
		stream, err = s.SealVec(stream, [][]byte{p[:n/2], nil, p[n/2:]})
		if err != nil {
			t.Fatal(err)
		}
		if recs := s.Seq() - before; recs != uint64((n+wire.MaxSealedPlain-1)/wire.MaxSealedPlain) {
			t.Fatalf("%d bytes: %d records", n, recs)
		}
		all = append(all, p...)
	}
	if b, _ := s.Seal(nil, nil); len(b) != 0 {
		t.Fatal("an empty plaintext made a record")
	}
	// Fed in pieces of 1000 bytes, as a socket might deliver them.
	var got, buf []byte
	for off := 0; off < len(stream); off += 1000 {
		buf = append(buf, stream[off:min(off+1000, len(stream))]...)
		var n int
		var err error
		got, n, err = o.OpenAll(got, buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(buf)-n > wire.MaxSealedPlain+wire.SealOverhead {
			t.Fatalf("%d bytes pending: more than one record", len(buf)-n)
		}
		buf = append(buf[:0], buf[n:]...)
	}
	if len(buf) != 0 || !bytes.Equal(got, all) {
		t.Fatalf("round trip: %d bytes left, %d of %d bytes back", len(buf), len(got), len(all))
	}
}

// TestSealedTamperingFails: flipping any bit of any record, dropping,
// repeating or swapping records, truncating one, injecting a plaintext
// frame, or opening with the other direction's key fails, with ErrSeal,
// and the failure is sticky.
func TestSealedTamperingFails(t *testing.T) {
	k := testKeys()
	s := wire.NewSealer(k.DialerToAcceptor)
	r0, _ := s.Seal(nil, wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil))
	r1, _ := s.Seal(nil, wire.AppendPing(nil, 2))
	r2, _ := s.Seal(nil, []byte("third"))
	open := func(key [32]byte, stream []byte) error {
		o := wire.NewOpener(key)
		_, n, err := o.OpenAll(nil, stream)
		if err == nil && n != len(stream) {
			return io.ErrUnexpectedEOF
		}
		if err != nil && o.Err() == nil {
			t.Fatalf("error %v not sticky", err)
		}
		return err
	}
	good := cat(r0, r1, r2)
	if err := open(k.DialerToAcceptor, good); err != nil {
		t.Fatal(err)
	}
	for i := range good {
		for bit := range 8 {
			bad := bytes.Clone(good)
			bad[i] ^= 1 << bit
			if err := open(k.DialerToAcceptor, bad); err == nil || (!errors.Is(err, wire.ErrSeal) && err != io.ErrUnexpectedEOF) {
				t.Fatalf("bit %d of byte %d flipped: %v", bit, i, err)
			}
		}
	}
	for name, stream := range map[string][]byte{
		"dropped":        cat(r0, r2),
		"replayed":       cat(r0, r0),
		"swapped":        cat(r1, r0),
		"plain injected": cat(r0, wire.AppendNodeRequest(nil, 9, wire.OpStatus, nil)),
		"zero length":    cat(r0, []byte{0, 0, 0, 0, 0x4f, 0, 0, 0, 0, 1}),
		"tag only":       cat(r0, []byte{0, 0, 0, 16, 0x4f, 0, 0, 0, 0, 1}, make([]byte, 16)),
	} {
		if err := open(k.DialerToAcceptor, stream); !errors.Is(err, wire.ErrSeal) || !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v, want ErrSeal", name, err)
		}
	}
	if err := open(k.AcceptorToDialer, good); !errors.Is(err, wire.ErrSeal) {
		t.Errorf("other direction's key: %v", err)
	}
	if err := open(wire.DeriveNodeKeys("another secret of 32 bytes......", wire.NodeHello{Version: 2, Name: "node-b", Nonce: nonceD},
		wire.NodeChallenge{Name: "node-a", Nonce: nonceA}).DialerToAcceptor, good); !errors.Is(err, wire.ErrSeal) {
		t.Errorf("other secret: %v", err)
	}
	// The errors say where.
	err := open(k.DialerToAcceptor, cat(r0, r0))
	if !strings.Contains(err.Error(), "record 1 at stream offset 37") || !strings.Contains(err.Error(), "sequence 0, want 1") {
		t.Errorf("error %q does not say where", err)
	}
}

// TestSealedHeaderCheckedBeforeBuffering: a record header declaring a
// length over the limit fails as soon as its 10 bytes are there, so a
// receiver never waits for (or buffers) more than one record.
func TestSealedHeaderCheckedBeforeBuffering(t *testing.T) {
	o := wire.NewOpener(testKeys().DialerToAcceptor)
	hdr := wire.AppendHeader(nil, wire.TypeNodeSealed, 0, 0, wire.MaxSealedPlain+wire.SealTagLen+1)
	if _, _, err := o.Open(nil, hdr[:9]); err != wire.ErrIncomplete {
		t.Fatalf("9 bytes: %v, want ErrIncomplete", err)
	}
	if _, _, err := o.Open(nil, hdr); !errors.Is(err, wire.ErrSeal) || !strings.Contains(err.Error(), "length 65553") {
		t.Fatalf("oversized header: %v", err)
	}
	o = wire.NewOpener(testKeys().DialerToAcceptor)
	ok := wire.AppendHeader(nil, wire.TypeNodeSealed, 0, 0, wire.MaxSealedPlain+wire.SealTagLen)
	if _, _, err := o.Open(nil, ok); err != wire.ErrIncomplete {
		t.Fatalf("largest header: %v, want ErrIncomplete", err)
	}
	if _, _, err := o.Open(nil, wire.AppendHeader(nil, wire.TypeNodeSealed, 0x80, 0, 20)); !errors.Is(err, wire.ErrSeal) {
		t.Fatalf("flags: %v", err)
	}
}

// TestSealedConnFlippedByteFails: over a SealedConn a changed byte makes
// Read fail with ErrSeal instead of returning a frame.
func TestSealedConnFlippedByteFails(t *testing.T) {
	k := testKeys()
	s := wire.NewSealer(k.DialerToAcceptor)
	stream, _ := s.Seal(nil, wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil))
	stream[len(stream)-20] ^= 0x01
	c := wire.NewSealedConn(&rw{in: bytes.NewReader(stream)}, k.AcceptorToDialer, k.DialerToAcceptor, nil)
	r := wire.NewReader(c, wire.MinMaxBody)
	if h, _, err := r.Next(); !errors.Is(err, wire.ErrSeal) {
		t.Fatalf("read %+v, %v; want ErrSeal", h, err)
	}
	// A stream cut inside a record is an unexpected EOF, not a frame.
	stream, _ = wire.NewSealer(k.DialerToAcceptor).Seal(nil, wire.AppendPing(nil, 1))
	c = wire.NewSealedConn(&rw{in: bytes.NewReader(stream[:len(stream)-1])}, k.AcceptorToDialer, k.DialerToAcceptor, nil)
	if _, err := c.Read(make([]byte, 10)); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut record: %v", err)
	}
}
