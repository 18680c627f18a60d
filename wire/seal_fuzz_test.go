package wire_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// FuzzNodeHandshake drives both sides of the node handshake with
// fuzzer-chosen bytes.
//
// Acceptor: data, cut in two at cut, is a NODE_HELLO body and a NODE_PROOF
// body. Neither decoding nor Finish panics; errors wrap ErrMalformed or
// ErrNodeAuth; and Finish succeeds exactly when the proof is the dialer's
// proof over this handshake's transcript (which the fuzzer cannot know
// unless it copied it from a seed: the seeds hold one).
//
// Dialer: data is the whole byte stream an acceptor sends. NodeHandshake
// never panics, fails only with the node's Error, ErrNodeAuth,
// ErrMalformed or a short stream, and succeeds only when the stream's
// NODE_WELCOME carries the acceptor's proof over the transcript of the
// NODE_HELLO it wrote and the NODE_CHALLENGE it read.
func FuzzNodeHandshake(f *testing.F) {
	f.Add(append(goldenFile(f, "1_node_hello.hex")[wire.HeaderLen:], goldenFile(f, "3_node_proof.hex")[wire.HeaderLen:]...), uint16(55))
	f.Add(cat(goldenFile(f, "2_node_challenge.hex"), goldenFile(f, "4_node_welcome.hex")), uint16(0))
	f.Add(cat(goldenFile(f, "2_node_challenge.hex"), wire.AppendError(nil, 0, wire.Error{Code: wire.CodeUnauthenticated, Text: "no"})), uint16(3))
	f.Add([]byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		// Acceptor.
		c := min(int(cut), len(data))
		helloBody, proofBody := data[:c], data[c:]
		if h, err := wire.DecodeNodeHello(helloBody); err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("DecodeNodeHello: %v", err)
			}
		} else if a := wire.AcceptNodeHello(hsSecret, "node-a", h, nonceA); a != nil {
			out, s, err := a.Finish([]byte("x"), proofBody)
			want := wire.ComputeNodeProof(hsSecret, wire.RoleDialer, wire.NodeTranscript(h, wire.NodeChallenge{Name: "node-a", Nonce: nonceA}))
			valid := bytes.Equal(proofBody, want[:])
			switch {
			case valid && (err != nil || s == nil || len(out) != 1+wire.HeaderLen+wire.NodeProofLen):
				t.Fatalf("the right proof was refused: %v", err)
			case !valid && (err == nil || s != nil || string(out) != "x"):
				t.Fatalf("a wrong proof %x was accepted", proofBody)
			case err != nil && !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, wire.ErrNodeAuth):
				t.Fatalf("Finish: %v", err)
			}
		}

		// Dialer.
		p := &rw{in: bytes.NewReader(data)}
		d := wire.NodeDial{Name: "node-b", ClientAddr: "10.0.0.2:4222", Secret: hsSecret, Rand: fixedRand(nonceD)}
		s, err := wire.NodeHandshake(p, d)
		if err != nil {
			var we wire.Error
			if !errors.As(err, &we) && !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, wire.ErrNodeAuth) &&
				err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("NodeHandshake: %v", err)
			}
			return
		}
		_, cb, n, err := wire.Split(data, wire.MinMaxBody)
		if err != nil {
			t.Fatalf("handshake succeeded on an unsplittable stream: %v", err)
		}
		ch, err := wire.DecodeNodeChallenge(cb)
		if err != nil || ch.Name != s.Peer {
			t.Fatalf("handshake succeeded without a NODE_CHALLENGE first: %v", err)
		}
		_, wb, _, err := wire.Split(data[n:], wire.MinMaxBody)
		if err != nil {
			t.Fatal(err)
		}
		hello := wire.NodeHello{Version: wire.NodeVersion, Name: d.Name, ClientAddr: d.ClientAddr, Nonce: nonceD}
		want := wire.ComputeNodeProof(hsSecret, wire.RoleAcceptor, wire.NodeTranscript(hello, ch))
		if !bytes.Equal(wb, want[:]) {
			t.Fatalf("handshake succeeded with proof %x, want %x", wb, want)
		}
		if s.Keys != wire.DeriveNodeKeys(hsSecret, hello, ch) {
			t.Fatal("session keys are not the derived ones")
		}
	})
}

// FuzzSealedRecords checks the record layer three ways on fuzzer input:
//   - opened as a record stream, arbitrary bytes never panic, fail only
//     with ErrSeal (ErrIncomplete for a partial record), and never yield
//     plaintext (the fuzzer cannot forge a GCM tag);
//   - data sealed (split into two vectors at cut) and opened again, fed in
//     pieces of size step, comes back exactly, and never more than one
//     record is pending;
//   - the same stream with the byte at flip changed fails to open, with
//     no plaintext past the record that holds the change.
func FuzzSealedRecords(f *testing.F) {
	f.Add(goldenFile(f, "5_sealed_dialer_0.hex"), uint16(0), uint16(7), uint16(3))
	f.Add(cat(goldenFile(f, "5_sealed_dialer_0.hex"), goldenFile(f, "6_sealed_dialer_1.hex")), uint16(20), uint16(1), uint16(40))
	f.Add(bytes.Repeat([]byte("x"), 70000), uint16(30000), uint16(4096), uint16(65535))
	keys := testKeys()
	f.Fuzz(func(t *testing.T, data []byte, cut, step, flip uint16) {
		// Arbitrary bytes as records (of a key the fuzzer does not know
		// except through the golden seeds, which open as expected).
		o := wire.NewOpener(keys.DialerToAcceptor)
		plain, n, err := o.OpenAll(nil, data)
		if err != nil && !errors.Is(err, wire.ErrSeal) {
			t.Fatalf("OpenAll: %v", err)
		}
		if n > len(data) || len(plain) > n {
			t.Fatalf("took %d of %d bytes, %d plaintext", n, len(data), len(plain))
		}

		// Round trip.
		s := wire.NewSealer(keys.AcceptorToDialer)
		c := min(int(cut), len(data))
		stream, err := s.SealVec(nil, [][]byte{data[:c], data[c:]})
		if err != nil {
			t.Fatal(err)
		}
		o = wire.NewOpener(keys.AcceptorToDialer)
		st := max(int(step), 1)
		var got, buf []byte
		for off := 0; off < len(stream); off += st {
			buf = append(buf, stream[off:min(off+st, len(stream))]...)
			got, n, err = o.OpenAll(got, buf)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			buf = buf[n:]
			if len(buf) >= wire.MaxSealedPlain+wire.SealOverhead {
				t.Fatalf("%d bytes pending", len(buf))
			}
		}
		if len(buf) != 0 || !bytes.Equal(got, data) {
			t.Fatalf("round trip: %d of %d bytes, %d pending", len(got), len(data), len(buf))
		}

		// A flipped byte.
		if len(stream) == 0 {
			return
		}
		i := int(flip) % len(stream)
		bad := bytes.Clone(stream)
		bad[i] ^= 0x80
		o = wire.NewOpener(keys.AcceptorToDialer)
		plain, n, err = o.OpenAll(nil, bad)
		if err == nil && n == len(bad) {
			t.Fatalf("stream with byte %d flipped opened", i)
		}
		// Everything opened lies in records wholly before the change.
		if n > i {
			t.Fatalf("opened %d bytes past the flipped byte %d", n, i)
		}
		if !bytes.Equal(plain, data[:len(plain)]) {
			t.Fatal("opened plaintext differs from what was sealed")
		}
	})
}
