package wire_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// The seed corpus of FuzzNodeFrames lives in testdata/fuzz/FuzzNodeFrames/:
// every frame of nodeCases (golden-<name>), all of them back to back
// (golden-all), an over-long error text (long-text), and every malformed
// class of nodeMalformedCases (malformed-<name>). TestNodeFuzzSeeds keeps the files in step with the
// cases; `go test -run TestNodeFuzzSeeds -update-node-seeds ./wire/`
// rewrites them after a case changed.

var updateNodeSeeds = flag.Bool("update-node-seeds", false, "rewrite testdata/fuzz/FuzzNodeFrames from the node test cases")

// nodeFuzzMaxBody is FuzzNodeFrames' body limit: small, so that the fuzzer
// spends its time inside bodies, yet over the 1,024 bytes at which an
// error text is truncated.
const nodeFuzzMaxBody = 2048

// nodeSeeds returns the seed corpus by file name.
func nodeSeeds() map[string][]byte {
	seeds := map[string][]byte{}
	var all []byte
	for _, tc := range nodeCases() {
		seeds["golden-"+tc.name] = tc.frame
		all = append(all, tc.frame...)
	}
	seeds["golden-all"] = all
	// An error text over the 1,024 bytes the encoder keeps.
	seeds["long-text"] = raw(wire.TypeNodeResponse, 0, 3, u8(wire.NodeFailed), u16(1100), bytes.Repeat([]byte("t"), 1100))
	unsafe := regexp.MustCompile(`[^A-Za-z0-9_.-]+`)
	for _, tc := range nodeMalformedCases() {
		seeds["malformed-"+unsafe.ReplaceAllString(tc.name, "_")] = raw(tc.ty, 0, 1, tc.body)
	}
	return seeds
}

func seedFile(b []byte) string { return fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b) }

// TestNodeFuzzSeeds: the committed seed corpus holds exactly the current
// cases, byte for byte.
func TestNodeFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzNodeFrames")
	seeds := nodeSeeds()
	if *updateNodeSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seeds {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(seedFile(b)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, b := range seeds {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("seed %s: %v (run with -update-node-seeds)", name, err)
			continue
		}
		if string(got) != seedFile(b) {
			t.Errorf("seed %s is out of date (run with -update-node-seeds)", name)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := seeds[e.Name()]; !ok {
			t.Logf("extra seed %s (a fuzzer find; keep it as a regression input)", e.Name())
		}
	}
}

// FuzzNodeFrames: arbitrary bytes split with a limit and decoded by the
// decoder of each frame's type never panic, never yield a body over the
// limit, and fail only with errors wrapping ErrMalformed (ErrTooLarge only
// from Split). Whatever decodes re-encodes, with the matching Append
// function, to the same header fields and the same body bytes: every node
// encoding is canonical (an error text over 1,024 bytes excepted, which the
// encoder truncates). Op bodies of NODE_REQUEST and results of NODE_RESPONSE
// are walked with NodeDec in the shapes of PROTOCOL.md 9.4 with the same
// properties. Every node decoder also runs on the raw input.
func FuzzNodeFrames(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		for rest := data; ; {
			h, body, n, err := wire.Split(rest, nodeFuzzMaxBody)
			if err == wire.ErrIncomplete {
				break
			}
			if err != nil {
				if !errors.Is(err, wire.ErrTooLarge) {
					t.Fatalf("Split error %v: only the length can be wrong in a header", err)
				}
				break
			}
			if len(body) > nodeFuzzMaxBody || len(body) != int(h.Len) || n != wire.HeaderLen+len(body) || cap(body) != len(body) {
				t.Fatalf("Split: h=%+v len(body)=%d cap=%d n=%d", h, len(body), cap(body), n)
			}
			if h.Type.IsNode() {
				checkNodeFrame(t, h.Type, h.ID, body)
			}
			rest = rest[n:]
		}
		for _, ty := range nodeFrameTypes {
			checkNodeFrame(t, ty, 7, data)
		}
	})
}

// checkNodeFrame decodes body as a frame of type ty and, if that succeeds,
// checks that re-encoding gives the same frame (with id as the header's id
// for the types that carry one, 0 for the others).
func checkNodeFrame(t *testing.T, ty wire.Type, id uint32, body []byte) {
	t.Helper()
	var re []byte
	var err error
	switch ty {
	case wire.TypeNodeHello:
		var v wire.NodeHello
		if v, err = wire.DecodeNodeHello(body); err == nil {
			if v.Name == "" {
				t.Fatalf("NODE_HELLO accepted %+v", v)
			}
			re, id = wire.AppendNodeHello(nil, v), 0
		}
	case wire.TypeNodeChallenge:
		var v wire.NodeChallenge
		if v, err = wire.DecodeNodeChallenge(body); err == nil {
			if v.Name == "" {
				t.Fatalf("NODE_CHALLENGE accepted %+v", v)
			}
			re, id = wire.AppendNodeChallenge(nil, v), 0
		}
	case wire.TypeNodeProof:
		var p [wire.NodeProofLen]byte
		if p, err = wire.DecodeNodeProof(body); err == nil {
			re, id = wire.AppendNodeProof(nil, p), 0
		}
	case wire.TypeNodeWelcome:
		var p [wire.NodeProofLen]byte
		if p, err = wire.DecodeNodeWelcome(body); err == nil {
			re, id = wire.AppendNodeWelcome(nil, p), 0
		}
	case wire.TypeNodeRequest:
		var op wire.NodeOp
		var opBody []byte
		if op, opBody, err = wire.DecodeNodeRequest(body); err == nil {
			switch {
			case op >= wire.OpServiceFirst:
				checkServiceOp(t, op, opBody)
			case retiredOps[op]:
				// A retired op decodes (its body opaque) and is answered
				// BAD_OP by the node; only the re-encoding is checked.
			default:
				shape, ok := opRequestShapes[op]
				if !ok {
					t.Fatalf("NODE_REQUEST accepted op %d, which has no shape in PROTOCOL.md 9.4", op)
				}
				checkShape(t, shape, opBody)
			}
			re = wire.AppendNodeRequest(nil, id, op, opBody)
		}
	case wire.TypeNodeResponse:
		var st uint8
		var res []byte
		var text string
		if st, res, text, err = wire.DecodeNodeResponse(body); err == nil {
			if st == wire.NodeOK {
				for _, shape := range []string{shapeGrant, shapeInfo, shapeList, "q", "bw", shapeIDPage, "bwqs", shapeRecovered} {
					checkShape(t, shape, res)
				}
			} else if len(text) > 1024 {
				// The encoder truncates long texts: compare with the cut frame.
				body = append(append([]byte(nil), body[:3]...), text[:1024]...)
				body[1], body[2] = 1024>>8, 1024&0xFF
			}
			re = wire.AppendNodeResponse(nil, id, st, res, text)
		}
	case wire.TypeNodeAppend:
		var a wire.NodeAppend
		var run []byte
		if a, run, err = wire.DecodeNodeAppend(body); err == nil {
			payloads := splitRun(t, ty, run, a.Count)
			re = wire.AppendNodeAppendHeader(nil, id, a, len(run))
			for _, p := range payloads {
				re = wire.AppendRecord(re, p)
			}
		}
	case wire.TypeNodeAppended:
		var a wire.NodeAppended
		if a, err = wire.DecodeNodeAppended(body); err == nil {
			re = wire.AppendNodeAppended(nil, id, a)
		}
	case wire.TypeNodeFeed:
		var fd wire.NodeFeed
		var stampBytes, run []byte
		if fd, stampBytes, run, err = wire.DecodeNodeFeed(body); err == nil {
			if len(stampBytes) != 8*int(fd.Count) || fd.Flags&^(wire.FeedSealed|wire.FeedGone) != 0 {
				t.Fatalf("NODE_FEED %+v with %d stamp bytes", fd, len(stampBytes))
			}
			var stamps []int64
			for i := range int(fd.Count) {
				stamps = append(stamps, wire.FeedStamp(stampBytes, i))
			}
			var payloads [][]byte
			if fd.Count > 0 {
				payloads = splitRun(t, ty, run, fd.Count)
			} else if len(run) != 0 {
				t.Fatalf("NODE_FEED count 0 with %d run bytes", len(run))
			}
			re, id = wire.AppendNodeFeedHeader(nil, fd, stamps, len(run)), 0
			for _, p := range payloads {
				re = wire.AppendRecord(re, p)
			}
		}
	case wire.TypeNodeRead:
		var s uint64
		var from uint32
		if s, from, err = wire.DecodeNodeRead(body); err == nil {
			re, id = wire.AppendNodeRead(nil, s, from), 0
		}
	case wire.TypeNodeReplicate:
		var r wire.NodeReplicate
		var stampBytes, run []byte
		if r, stampBytes, run, err = wire.DecodeNodeReplicate(body); err == nil {
			stamps := make([]int64, r.Count)
			for i := range stamps {
				stamps[i] = wire.FeedStamp(stampBytes, i)
			}
			re, id = wire.AppendNodeReplicateHeader(nil, r, stamps, len(run)), 0
			if r.Count > 0 {
				for _, p := range splitRun(t, ty, run, r.Count) {
					re = wire.AppendRecord(re, p)
				}
			}
		}
	case wire.TypeNodeReplicated:
		var r wire.NodeReplicated
		if r, err = wire.DecodeNodeReplicated(body); err == nil {
			re, id = wire.AppendNodeReplicated(nil, r), 0
		}
	case wire.TypeNodeUnread:
		var s uint64
		if s, err = wire.DecodeNodeUnread(body); err == nil {
			re, id = wire.AppendNodeUnread(nil, s), 0
		}
	case wire.TypeNodeSealed:
		// Ciphertext under a connection's keys: it has no plain decoder to
		// round-trip. FuzzSealedRecords fuzzes the record layer.
		return
	default:
		t.Fatalf("checkNodeFrame: %v is not a node type", ty)
	}
	if err != nil {
		if !errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
			t.Fatalf("%v: error %v does not wrap ErrMalformed (alone)", ty, err)
		}
		return
	}
	h, reBody, n, err := wire.Split(re, ^uint32(0))
	if err != nil || n != len(re) {
		t.Fatalf("%v: Split(re-encoded) n=%d of %d, %v", ty, n, len(re), err)
	}
	if want := (wire.Header{Len: uint32(len(body)), Type: ty, ID: id}); h != want {
		t.Fatalf("%v: re-encoded header %+v, want %+v", ty, h, want)
	}
	if !bytes.Equal(reBody, body) {
		t.Fatalf("%v: re-encoded body\n% x\nwant\n% x", ty, reBody, body)
	}
}

// splitRun iterates a record run a decoder validated for count records.
func splitRun(t *testing.T, ty wire.Type, run []byte, count uint32) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		p, rest, ok := wire.NextRecord(run)
		if !ok {
			break
		}
		if cap(p) != len(p) {
			t.Fatalf("%v: record capacity %d not capped to %d", ty, cap(p), len(p))
		}
		out, run = append(out, p), rest
	}
	if len(run) != 0 || uint32(len(out)) != count {
		t.Fatalf("%v: validated run yields %d of %d records, %d bytes left", ty, len(out), count, len(run))
	}
	return out
}

// checkShape reads b in the given op-body shape with NodeDec and writes
// what it read back with NodeEnc: a complete read (Done nil) re-encodes to
// b exactly, a read that stopped early without error to a prefix of b, and
// a failed read fails with ErrMalformed.
func checkShape(t *testing.T, shape string, b []byte) {
	t.Helper()
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	var e wire.NodeEnc
	walkShape(d, &e, shape)
	switch err := d.Done(); {
	case err == nil:
		if !bytes.Equal(e.B, b) {
			t.Fatalf("shape %q: re-encoded % x, body % x", shape, e.B, b)
		}
	case d.Err() == nil:
		if !bytes.HasPrefix(b, e.B) || len(e.B) == len(b) {
			t.Fatalf("shape %q: re-encoded % x is not a strict prefix of % x", shape, e.B, b)
		}
	default:
		if !errors.Is(err, wire.ErrMalformed) {
			t.Fatalf("shape %q: error %v does not wrap ErrMalformed", shape, err)
		}
	}
}

// checkServiceOp checks the body of a service op (PROTOCOL.md 9.5, op 32
// and up), which has a decoder of its own rather than a 9.4 shape: it
// fails only with ErrMalformed, and what decodes re-encodes to the same
// bytes.
func checkServiceOp(t *testing.T, op wire.NodeOp, body []byte) {
	t.Helper()
	if op != wire.OpPresenceSync {
		t.Fatalf("NODE_REQUEST accepted service op %d, which has no decoder", op)
	}
	p, items, err := wire.DecodePresenceSync(body, nil)
	if err != nil {
		if !errors.Is(err, wire.ErrMalformed) {
			t.Fatalf("PRESENCE_SYNC: %v does not wrap ErrMalformed", err)
		}
		return
	}
	var enc []byte
	for i := range items {
		enc = wire.AppendSyncItem(enc, &items[i])
	}
	if re := wire.AppendPresenceSync(nil, p, enc); !bytes.Equal(re, body) {
		t.Fatalf("PRESENCE_SYNC %x re-encodes to %x", body, re)
	}
}

// retiredOps are the ops of the coordination the metadata log replaced
// (PROTOCOL.md 9.4: never sent, answered BAD_OP): NODE_REQUEST still
// decodes them, with no body shape.
var retiredOps = map[wire.NodeOp]bool{2: true, 3: true, 8: true, 18: true, 19: true}
