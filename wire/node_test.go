package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// This file tests the node-to-node frames (types 0x40..0x48, PROTOCOL.md
// section 9) and the NodeEnc/NodeDec op-body helpers. The model types and
// decodeNode are shared with node_fuzz_test.go.

// Test-side values of decoded node frames (comparable with reflect.DeepEqual).
type (
	nodeHelloV struct {
		Version          uint16
		Name, ClientAddr string
		Nonce            string
	}
	nodeChallengeV struct {
		Name, Nonce string
	}
	nodeProofV   string
	nodeWelcomeV string
	nodeRequestV struct {
		Op   wire.NodeOp
		Body string
	}
	nodeResponseV struct {
		Status       uint8
		Result, Text string
	}
	nodeAppendV struct {
		wire.NodeAppend
		Records []string
	}
	nodeFeedV struct {
		wire.NodeFeed
		Stamps  []int64
		Records []string
	}
	nodeReadV struct {
		Streamlet uint64
		From      uint32
	}
	nodeUnreadV    uint64
	nodeReplicateV struct {
		wire.NodeReplicate
		Stamps  []int64
		Records []string
	}
)

// records iterates a record run validated by a decoder; it fails if the run
// does not hold exactly count records.
func records(t wire.Type, run []byte, count uint32) ([]string, error) {
	var out []string
	for {
		p, rest, ok := wire.NextRecord(run)
		if !ok {
			break
		}
		out, run = append(out, string(p)), rest
	}
	if len(run) != 0 || uint32(len(out)) != count {
		return nil, fmt.Errorf("test: %v: NextRecord yielded %d of %d records, %d bytes left", t, len(out), count, len(run))
	}
	return out, nil
}

// decodeNode decodes body with the node decoder for h.Type into a
// comparable value.
func decodeNode(h wire.Header, body []byte) (any, error) {
	switch h.Type {
	case wire.TypeNodeHello:
		v, err := wire.DecodeNodeHello(body)
		return nodeHelloV{v.Version, v.Name, v.ClientAddr, string(v.Nonce[:])}, err
	case wire.TypeNodeChallenge:
		v, err := wire.DecodeNodeChallenge(body)
		return nodeChallengeV{v.Name, string(v.Nonce[:])}, err
	case wire.TypeNodeProof:
		v, err := wire.DecodeNodeProof(body)
		return nodeProofV(v[:]), err
	case wire.TypeNodeWelcome:
		v, err := wire.DecodeNodeWelcome(body)
		return nodeWelcomeV(v[:]), err
	case wire.TypeNodeRequest:
		op, b, err := wire.DecodeNodeRequest(body)
		return nodeRequestV{op, string(b)}, err
	case wire.TypeNodeResponse:
		st, res, text, err := wire.DecodeNodeResponse(body)
		return nodeResponseV{st, string(res), text}, err
	case wire.TypeNodeAppend:
		a, run, err := wire.DecodeNodeAppend(body)
		if err != nil {
			return nil, err
		}
		recs, err := records(h.Type, run, a.Count)
		return nodeAppendV{a, recs}, err
	case wire.TypeNodeAppended:
		return wire.DecodeNodeAppended(body)
	case wire.TypeNodeFeed:
		f, stamps, run, err := wire.DecodeNodeFeed(body)
		if err != nil {
			return nil, err
		}
		if len(stamps) != 8*int(f.Count) {
			return nil, fmt.Errorf("test: NODE_FEED: %d stamp bytes for count %d", len(stamps), f.Count)
		}
		v := nodeFeedV{NodeFeed: f}
		for i := range int(f.Count) {
			v.Stamps = append(v.Stamps, wire.FeedStamp(stamps, i))
		}
		if f.Count == 0 {
			if len(run) != 0 {
				return nil, fmt.Errorf("test: NODE_FEED: empty feed with %d run bytes", len(run))
			}
			return v, nil
		}
		v.Records, err = records(h.Type, run, f.Count)
		return v, err
	case wire.TypeNodeReplicate:
		r, stamps, run, err := wire.DecodeNodeReplicate(body)
		if err != nil {
			return nil, err
		}
		v := nodeReplicateV{NodeReplicate: r}
		for i := range int(r.Count) {
			v.Stamps = append(v.Stamps, wire.FeedStamp(stamps, i))
		}
		if r.Count > 0 {
			v.Records, err = records(h.Type, run, r.Count)
		}
		return v, err
	case wire.TypeNodeReplicated:
		return wire.DecodeNodeReplicated(body)
	case wire.TypeNodeRead:
		s, from, err := wire.DecodeNodeRead(body)
		return nodeReadV{s, from}, err
	case wire.TypeNodeUnread:
		s, err := wire.DecodeNodeUnread(body)
		return nodeUnreadV(s), err
	}
	return nil, fmt.Errorf("test: no node decoder for %v", h.Type)
}

// nodeAppendFrame builds a whole NODE_APPEND with AppendNodeAppendHeader
// and AppendRecord, the way a gateway does.
func nodeAppendFrame(dst []byte, id uint32, streamlet, epoch uint64, payloads ...string) []byte {
	n := 0
	for _, p := range payloads {
		n += wire.RecordHeaderLen + len(p)
	}
	dst = wire.AppendNodeAppendHeader(dst, id, wire.NodeAppend{Streamlet: streamlet, Epoch: epoch, Count: uint32(len(payloads))}, n)
	for _, p := range payloads {
		dst = wire.AppendRecord(dst, []byte(p))
	}
	return dst
}

// nodeFeedFrame builds a whole NODE_FEED, one stamp per payload.
func nodeFeedFrame(dst []byte, f wire.NodeFeed, stamps []int64, payloads ...string) []byte {
	n := 0
	for _, p := range payloads {
		n += wire.RecordHeaderLen + len(p)
	}
	dst = wire.AppendNodeFeedHeader(dst, f, stamps, n)
	for _, p := range payloads {
		dst = wire.AppendRecord(dst, []byte(p))
	}
	return dst
}

// nodeReplicateFrame builds a whole NODE_REPLICATE the way an orderer does.
func nodeReplicateFrame(dst []byte, r wire.NodeReplicate, stamps []int64, payloads ...string) []byte {
	n := 0
	for _, p := range payloads {
		n += wire.RecordHeaderLen + len(p)
	}
	dst = wire.AppendNodeReplicateHeader(dst, r, stamps, n)
	for _, p := range payloads {
		dst = wire.AppendRecord(dst, []byte(p))
	}
	return dst
}

// Example nonces and proof of the handshake frames.
var (
	nonceD = seq32(0xd0) // the dialer's: d0 d1 .. ef
	nonceA = seq32(0xa0) // the acceptor's: a0 a1 .. bf
	proofX = [32]byte{0: 0x5a, 31: 0xa5}
)

func seq32(first byte) (b [32]byte) {
	for i := range b {
		b[i] = first + byte(i)
	}
	return b
}

// Example values of the golden vectors.
const (
	goldenSecret = "cluster-secret"
	stamp0       = 1700000000000000000 // 2023-11-14T22:13:20Z in unix ns
	stamp1       = stamp0 + 500000     // half a millisecond later
)

// nodeFrameTypes are the node frames with a decoder (NODE_SEALED is a
// record, tested in seal_test.go).
var nodeFrameTypes = []wire.Type{wire.TypeNodeHello, wire.TypeNodeWelcome, wire.TypeNodeRequest, wire.TypeNodeResponse,
	wire.TypeNodeAppend, wire.TypeNodeAppended, wire.TypeNodeFeed, wire.TypeNodeRead, wire.TypeNodeUnread,
	wire.TypeNodeReplicate, wire.TypeNodeReplicated, wire.TypeNodeChallenge, wire.TypeNodeProof}

// opBody builds an op body with NodeEnc.
func opBody(fill func(e *wire.NodeEnc)) []byte {
	var e wire.NodeEnc
	fill(&e)
	return e.B
}

// nodeCase is one well-formed node frame, its expected decoding and, for
// the golden ones, its annotated hex encoding.
type nodeCase struct {
	name   string
	frame  []byte
	want   msg
	golden string // annotated hex (format of testdata/*.hex); "" if none
}

func nodeCases() []nodeCase {
	grantReq := opBody(func(e *wire.NodeEnc) { e.Str8("prices.eu"); e.U64(1000) })
	sealRes := opBody(func(e *wire.NodeEnc) { e.U64(1010) })
	copyReq := opBody(func(e *wire.NodeEnc) {
		e.Str8("prices.eu")
		e.U64(7)
		e.U64(1000)
		e.Str8("node-c")
		e.U64(5000)
		e.U64(5500)
	})
	drainReq := opBody(func(e *wire.NodeEnc) { e.Str8("node-b") })
	return []nodeCase{
		// The handshake frames' golden vectors are the files of
		// testdata/node_handshake (node_handshake_test.go).
		{"node_hello", wire.AppendNodeHello(nil, wire.NodeHello{Version: wire.NodeVersion, Name: "node-b", ClientAddr: "10.0.0.2:4222", Nonce: nonceD}),
			msg{hdr(wire.TypeNodeHello, 0, 0, 55), nodeHelloV{3, "node-b", "10.0.0.2:4222", string(nonceD[:])}}, ""},
		{"node_hello_noaddr", wire.AppendNodeHello(nil, wire.NodeHello{Version: 2, Name: "n", ClientAddr: ""}),
			msg{hdr(wire.TypeNodeHello, 0, 0, 37), nodeHelloV{2, "n", "", string(make([]byte, 32))}}, ""},
		{"node_challenge", wire.AppendNodeChallenge(nil, wire.NodeChallenge{Name: "node-a", Nonce: nonceA}),
			msg{hdr(wire.TypeNodeChallenge, 0, 0, 39), nodeChallengeV{"node-a", string(nonceA[:])}}, ""},
		{"node_proof", wire.AppendNodeProof(nil, proofX),
			msg{hdr(wire.TypeNodeProof, 0, 0, 32), nodeProofV(proofX[:])}, ""},
		{"node_welcome", wire.AppendNodeWelcome(nil, proofX),
			msg{hdr(wire.TypeNodeWelcome, 0, 0, 32), nodeWelcomeV(proofX[:])}, ""},
		{"node_request", wire.AppendNodeRequest(nil, 5, wire.OpWriteGrant, grantReq),
			msg{hdr(wire.TypeNodeRequest, 0, 5, 19), nodeRequestV{wire.OpWriteGrant, string(grantReq)}}, `
# NODE_REQUEST 5: WRITE_GRANT for channel "prices.eu" after streamlet 1000
# -- header --
00 00 00 13                 # body length 19 = 1 + 18
42                          # type NODE_REQUEST
00                          # flags none
00 00 00 05                 # id 5 (request id)
# -- body --
01                          # op 1 = WRITE_GRANT
09                          # channelLen 9
70 72 69 63 65 73 2e 65 75  # channel "prices.eu"
00 00 00 00 00 00 03 e8     # after 1000 (the streamlet the caller found closed)
`},
		{"node_request_copy", wire.AppendNodeRequest(nil, 9, wire.OpCopy, copyReq),
			msg{hdr(wire.TypeNodeRequest, 0, 9, 50), nodeRequestV{wire.OpCopy, string(copyReq)}}, `
# NODE_REQUEST 9: COPY streamlet 1000 of "prices.eu" (epoch 7) from node-c, positions [5000, 5500)
# -- header --
00 00 00 32                 # body length 50 = 1 + 49
42                          # type NODE_REQUEST
00                          # flags none
00 00 00 09                 # id 9 (request id)
# -- body --
0d                          # op 13 = COPY
09                          # channelLen 9
70 72 69 63 65 73 2e 65 75  # channel "prices.eu"
00 00 00 00 00 00 00 07     # epoch 7
00 00 00 00 00 00 03 e8     # id 1000 (the streamlet)
06                          # holderLen 6
6e 6f 64 65 2d 63           # holder "node-c" (where to read it)
00 00 00 00 00 00 13 88     # first 5000
00 00 00 00 00 00 15 7c     # end 5500 (one past its last position)
`},
		{"node_request_drain", wire.AppendNodeRequest(nil, 10, wire.OpDrain, drainReq),
			msg{hdr(wire.TypeNodeRequest, 0, 10, 8), nodeRequestV{wire.OpDrain, string(drainReq)}}, `
# NODE_REQUEST 10: DRAIN node-b
# -- header --
00 00 00 08                 # body length 8 = 1 + 7
42                          # type NODE_REQUEST
00                          # flags none
00 00 00 0a                 # id 10 (request id)
# -- body --
0e                          # op 14 = DRAIN
06                          # nodeLen 6
6e 6f 64 65 2d 62           # node "node-b" (the member to drain)
`},
		{"node_request_status", wire.AppendNodeRequest(nil, 6, wire.OpStatus, nil),
			msg{hdr(wire.TypeNodeRequest, 0, 6, 1), nodeRequestV{wire.OpStatus, ""}}, ""},
		{"node_response_ok", wire.AppendNodeResponse(nil, 6, wire.NodeOK, sealRes, "ignored"),
			msg{hdr(wire.TypeNodeResponse, 0, 6, 9), nodeResponseV{wire.NodeOK, string(sealRes), ""}}, `
# NODE_RESPONSE 6: OK, result of a SEAL: end 1010
# -- header --
00 00 00 09                 # body length 9
43                          # type NODE_RESPONSE
00                          # flags none
00 00 00 06                 # id 6 (the request answered)
# -- body --
00                          # status 0 = OK
00 00 00 00 00 00 03 f2     # result: end 1010
`},
		{"node_response_ok_empty", wire.AppendNodeResponse(nil, 7, wire.NodeOK, nil, ""),
			msg{hdr(wire.TypeNodeResponse, 0, 7, 1), nodeResponseV{wire.NodeOK, "", ""}}, ""},
		{"node_response_error", wire.AppendNodeResponse(nil, 5, wire.NodeStale, []byte("ignored"), "epoch 7 != 8"),
			msg{hdr(wire.TypeNodeResponse, 0, 5, 15), nodeResponseV{wire.NodeStale, "", "epoch 7 != 8"}}, `
# NODE_RESPONSE 5: STALE "epoch 7 != 8"
# -- header --
00 00 00 0f                 # body length 15 = 1 + 2 + 12
43                          # type NODE_RESPONSE
00                          # flags none
00 00 00 05                 # id 5 (the request answered)
# -- body --
03                          # status 3 = STALE
00 0c                       # textLen 12
65 70 6f 63 68 20 37 20 21 3d 20 38   # text "epoch 7 != 8"
`},
		{"node_response_error_empty", wire.AppendNodeResponse(nil, 8, wire.NodeOverload, nil, ""),
			msg{hdr(wire.TypeNodeResponse, 0, 8, 3), nodeResponseV{wire.NodeOverload, "", ""}}, ""},
		{"node_append", nodeAppendFrame(nil, 9, 42, 7, "a", "bc"),
			msg{hdr(wire.TypeNodeAppend, 0, 9, 31), nodeAppendV{wire.NodeAppend{Streamlet: 42, Epoch: 7, Count: 2}, []string{"a", "bc"}}}, `
# NODE_APPEND 9: streamlet 42, epoch 7, records "a" and "bc"
# -- header --
00 00 00 1f                 # body length 31 = 20 + (4+1) + (4+2)
44                          # type NODE_APPEND
00                          # flags none
00 00 00 09                 # id 9 (request id)
# -- body: prefix --
00 00 00 00 00 00 00 2a     # streamlet 42
00 00 00 00 00 00 00 07     # epoch 7 (of the grant)
00 00 00 02                 # count 2
# -- body: record run (the DATA layout) --
00 00 00 01                 # record 0 length 1
61                          # record 0 payload "a"
00 00 00 02                 # record 1 length 2
62 63                       # record 1 payload "bc"
`},
		{"node_append_empty_record", nodeAppendFrame(nil, 10, 1, 1, ""),
			msg{hdr(wire.TypeNodeAppend, 0, 10, 24), nodeAppendV{wire.NodeAppend{Streamlet: 1, Epoch: 1, Count: 1}, []string{""}}}, ""},
		{"node_appended", wire.AppendNodeAppended(nil, 9, wire.NodeAppended{Status: wire.NodeOK, Done: 2, First: 1001}),
			msg{hdr(wire.TypeNodeAppended, 0, 9, 13), wire.NodeAppended{Status: wire.NodeOK, Done: 2, First: 1001}}, `
# NODE_APPENDED 9: OK, 2 records appended at positions 1001 and 1002
# -- header --
00 00 00 0d                 # body length 13
45                          # type NODE_APPENDED
00                          # flags none
00 00 00 09                 # id 9 (the NODE_APPEND answered)
# -- body --
00                          # status 0 = OK
00 00 00 02                 # done 2
00 00 00 00 00 00 03 e9     # first 1001
`},
		{"node_appended_dups", wire.AppendNodeAppended(nil, 9, wire.NodeAppended{Status: wire.NodeOK, Done: 3, First: 1001,
			Dups: []wire.NodeDup{{Index: 1, Position: 17}}}),
			msg{hdr(wire.TypeNodeAppended, 0, 9, 29), wire.NodeAppended{Status: wire.NodeOK, Done: 3, First: 1001,
				Dups: []wire.NodeDup{{Index: 1, Position: 17}}}}, `
# NODE_APPENDED 9: OK, 3 records handled: record 1 repeated the message id
# of position 17 and was not stored; records 0 and 2 got 1001 and 1002
# -- header --
00 00 00 1d                 # body length 29 = 13 + 4 + 12 x 1
45                          # type NODE_APPENDED
00                          # flags none
00 00 00 09                 # id 9 (the NODE_APPEND answered)
# -- body --
00                          # status 0 = OK
00 00 00 03                 # done 3
00 00 00 00 00 00 03 e9     # first 1001 (the first appended record)
00 00 00 01                 # dup count 1
00 00 00 01                 # dup 0: index 1 in the NODE_APPEND
00 00 00 00 00 00 00 11     # dup 0: position 17, where the id was first stored
`},
		{"node_appended_closed", wire.AppendNodeAppended(nil, 11, wire.NodeAppended{Status: wire.NodeClosed}),
			msg{hdr(wire.TypeNodeAppended, 0, 11, 13), wire.NodeAppended{Status: wire.NodeClosed}}, ""},
		{"node_feed", nodeFeedFrame(nil, wire.NodeFeed{Streamlet: 42, Start: 4999, Flags: wire.FeedSealed}, []int64{stamp0, stamp1}, "a", "bc"),
			msg{hdr(wire.TypeNodeFeed, 0, 0, 44), nodeFeedV{wire.NodeFeed{Streamlet: 42, Start: 4999, Flags: wire.FeedSealed, Count: 2},
				[]int64{stamp0, stamp1}, []string{"a", "bc"}}}, `
# NODE_FEED: streamlet 42, records 4999 and 5000 ("a", "bc"), then sealed
# -- header --
00 00 00 2c                 # body length 44 = 17 + 2x8 + (4+1) + (4+2)
46                          # type NODE_FEED
00                          # flags none
00 00 00 00                 # id 0
# -- body: prefix --
00 00 00 00 00 00 00 2a     # streamlet 42
00 00 13 87                 # start 4999 (index of record 0 in the streamlet)
01                          # flags SEALED
00 00 00 02                 # count 2
# -- body: stamps --
17 97 9c fe 36 2a 00 00     # stamp 0: 1700000000000000000 ns
17 97 9c fe 36 31 a1 20     # stamp 1: 1700000000000500000 ns
# -- body: record run --
00 00 00 01                 # record 0 length 1
61                          # record 0 payload "a"
00 00 00 02                 # record 1 length 2
62 63                       # record 1 payload "bc"
`},
		{"node_feed_gone", nodeFeedFrame(nil, wire.NodeFeed{Streamlet: 43, Start: 7, Flags: wire.FeedGone}, nil),
			msg{hdr(wire.TypeNodeFeed, 0, 0, 17), nodeFeedV{NodeFeed: wire.NodeFeed{Streamlet: 43, Start: 7, Flags: wire.FeedGone}}}, ""},
		{"node_feed_open", nodeFeedFrame(nil, wire.NodeFeed{Streamlet: 44}, []int64{-1}, "x"),
			msg{hdr(wire.TypeNodeFeed, 0, 0, 30), nodeFeedV{wire.NodeFeed{Streamlet: 44, Count: 1}, []int64{-1}, []string{"x"}}}, ""},
		{"node_replicate", nodeReplicateFrame(nil, wire.NodeReplicate{Streamlet: 42, Epoch: 7, Start: 4998, Commit: 4998}, []int64{stamp0, stamp1}, "a", "bc"),
			msg{hdr(wire.TypeNodeReplicate, 0, 0, 56), nodeReplicateV{wire.NodeReplicate{Streamlet: 42, Epoch: 7, Start: 4998, Commit: 4998, Count: 2},
				[]int64{stamp0, stamp1}, []string{"a", "bc"}}}, `
# NODE_REPLICATE: the orderer forwards records 4998 and 4999 ("a", "bc") of
# streamlet 42 to a follower; every replica holds the first 4998
# -- header --
00 00 00 38                 # body length 56 = 29 + 2x8 + (4+1) + (4+2)
49                          # type NODE_REPLICATE
00                          # flags none
00 00 00 00                 # id 0
# -- body: prefix --
00 00 00 00 00 00 00 2a     # streamlet 42
00 00 00 00 00 00 00 07     # epoch 7
00 00 13 86                 # start 4998 (index of record 0 in the streamlet)
00 00 13 86                 # commit 4998 (records every replica holds)
00                          # flags none
00 00 00 02                 # count 2
# -- body: stamps --
17 97 9c fe 36 2a 00 00     # stamp 0: 1700000000000000000 ns
17 97 9c fe 36 31 a1 20     # stamp 1: 1700000000000500000 ns
# -- body: record run --
00 00 00 01                 # record 0 length 1
61                          # record 0 payload "a"
00 00 00 02                 # record 1 length 2
62 63                       # record 1 payload "bc"
`},
		{"node_replicate_sealed", nodeReplicateFrame(nil, wire.NodeReplicate{Streamlet: 42, Epoch: 7, Start: 5000, Commit: 5000, Flags: wire.ReplicateSealed}, nil),
			msg{hdr(wire.TypeNodeReplicate, 0, 0, 29), nodeReplicateV{NodeReplicate: wire.NodeReplicate{Streamlet: 42, Epoch: 7, Start: 5000, Commit: 5000, Flags: wire.ReplicateSealed}}}, ""},
		{"node_replicated", wire.AppendNodeReplicated(nil, wire.NodeReplicated{Streamlet: 42, Status: wire.NodeOK, Held: 5000}),
			msg{hdr(wire.TypeNodeReplicated, 0, 0, 13), wire.NodeReplicated{Streamlet: 42, Status: wire.NodeOK, Held: 5000}}, `
# NODE_REPLICATED: the follower holds 5000 records of streamlet 42
# -- header --
00 00 00 0d                 # body length 13
4a                          # type NODE_REPLICATED
00                          # flags none
00 00 00 00                 # id 0
# -- body --
00 00 00 00 00 00 00 2a     # streamlet 42
00                          # status 0 = OK
00 00 13 88                 # held 5000
`},
		{"node_replicated_fenced", wire.AppendNodeReplicated(nil, wire.NodeReplicated{Streamlet: 42, Status: wire.NodeFenced, Held: 17}),
			msg{hdr(wire.TypeNodeReplicated, 0, 0, 13), wire.NodeReplicated{Streamlet: 42, Status: wire.NodeFenced, Held: 17}}, ""},
		{"node_read", wire.AppendNodeRead(nil, 42, 4999),
			msg{hdr(wire.TypeNodeRead, 0, 0, 12), nodeReadV{42, 4999}}, `
# NODE_READ: streamlet 42 from record index 4999
# -- header --
00 00 00 0c                 # body length 12
47                          # type NODE_READ
00                          # flags none
00 00 00 00                 # id 0
# -- body --
00 00 00 00 00 00 00 2a     # streamlet 42
00 00 13 87                 # from 4999
`},
		{"node_unread", wire.AppendNodeUnread(nil, 42),
			msg{hdr(wire.TypeNodeUnread, 0, 0, 8), nodeUnreadV(42)}, `
# NODE_UNREAD: streamlet 42
# -- header --
00 00 00 08                 # body length 8
48                          # type NODE_UNREAD
00                          # flags none
00 00 00 00                 # id 0
# -- body --
00 00 00 00 00 00 00 2a     # streamlet 42
`},
	}
}

// parseHex parses annotated hex in the testdata/*.hex format.
func parseHex(t testing.TB, src string) []byte {
	t.Helper()
	var digits strings.Builder
	for _, line := range strings.Split(src, "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("golden hex: %v", err)
	}
	return b
}

// TestNodeRoundTrip: every node frame type, encoded with its Append
// function, comes back from Split and its decoder unchanged.
func TestNodeRoundTrip(t *testing.T) {
	covered := map[wire.Type]bool{}
	for _, tc := range nodeCases() {
		t.Run(tc.name, func(t *testing.T) {
			h, body, n, err := wire.Split(tc.frame, testMaxBody)
			if err != nil || n != len(tc.frame) || int(h.Len) != len(body) {
				t.Fatalf("Split: h=%+v n=%d of %d, %v", h, n, len(tc.frame), err)
			}
			if cap(body) != len(body) {
				t.Errorf("body capacity %d not capped to %d", cap(body), len(body))
			}
			v, err := decodeNode(h, body)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got := (msg{h, v}); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded\n got %#v\nwant %#v", got, tc.want)
			}
			covered[h.Type] = true
		})
	}
	for _, ty := range nodeFrameTypes {
		if !covered[ty] {
			t.Errorf("no round-trip case for %v", ty)
		}
	}
}

// TestNodeGolden checks the annotated vectors in both directions:
// encode(value) == golden and decode(golden) == value.
func TestNodeGolden(t *testing.T) {
	covered := map[wire.Type]bool{}
	for _, tc := range nodeCases() {
		if tc.golden == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			golden := parseHex(t, tc.golden)
			if !bytes.Equal(tc.frame, golden) {
				t.Fatalf("encoded\n% x\ngolden\n% x", tc.frame, golden)
			}
			h, body, n, err := wire.Split(golden, testMaxBody)
			if err != nil || n != len(golden) {
				t.Fatalf("Split(golden): n=%d err=%v", n, err)
			}
			v, err := decodeNode(h, body)
			if err != nil || !reflect.DeepEqual(msg{h, v}, tc.want) {
				t.Fatalf("decode(golden) = %#v, %v\nwant %#v", msg{h, v}, err, tc.want)
			}
			covered[h.Type] = true
		})
	}
	for _, ty := range nodeFrameTypes {
		if !covered[ty] && ty != wire.TypeNodeHello && ty != wire.TypeNodeChallenge && ty != wire.TypeNodeProof && ty != wire.TypeNodeWelcome {
			t.Errorf("no golden vector for %v", ty)
		}
	}
}

// TestNodeStreamSplit: all node frames back to back split and decode in
// order, as a node reads them off one connection.
func TestNodeStreamSplit(t *testing.T) {
	var stream []byte
	cases := nodeCases()
	for _, tc := range cases {
		stream = append(stream, tc.frame...)
	}
	for i, tc := range cases {
		h, body, n, err := wire.Split(stream, testMaxBody)
		if err != nil {
			t.Fatalf("frame %d (%s): %v", i, tc.name, err)
		}
		v, err := decodeNode(h, body)
		if err != nil || !reflect.DeepEqual(msg{h, v}, tc.want) {
			t.Fatalf("frame %d (%s): got %#v, %v", i, tc.name, msg{h, v}, err)
		}
		stream = stream[n:]
	}
	if len(stream) != 0 {
		t.Fatalf("%d bytes left", len(stream))
	}
}

// TestNodeAppendKeepsPrefix: every node encoder appends to dst and leaves
// its bytes alone.
func TestNodeAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("prefix")
	for name, enc := range map[string]func([]byte) []byte{
		"hello":     func(d []byte) []byte { return wire.AppendNodeHello(d, wire.NodeHello{Version: 2, Name: "n"}) },
		"challenge": func(d []byte) []byte { return wire.AppendNodeChallenge(d, wire.NodeChallenge{Name: "n"}) },
		"proof":     func(d []byte) []byte { return wire.AppendNodeProof(d, proofX) },
		"welcome":   func(d []byte) []byte { return wire.AppendNodeWelcome(d, proofX) },
		"request":   func(d []byte) []byte { return wire.AppendNodeRequest(d, 1, wire.OpFree, u64(3)) },
		"response":  func(d []byte) []byte { return wire.AppendNodeResponse(d, 1, wire.NodeFailed, nil, "x") },
		"append":    func(d []byte) []byte { return nodeAppendFrame(d, 1, 2, 3, "p") },
		"appended":  func(d []byte) []byte { return wire.AppendNodeAppended(d, 1, wire.NodeAppended{Done: 1, First: 1}) },
		"feed":      func(d []byte) []byte { return nodeFeedFrame(d, wire.NodeFeed{Streamlet: 1}, []int64{1}, "p") },
		"read":      func(d []byte) []byte { return wire.AppendNodeRead(d, 1, 2) },
		"unread":    func(d []byte) []byte { return wire.AppendNodeUnread(d, 1) },
	} {
		got := enc(bytes.Clone(prefix))
		want := append(bytes.Clone(prefix), enc(nil)...)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got % x, want % x", name, got, want)
		}
	}
}

// TestNodeTruncated: every strict prefix of a node body whose length is
// fixed by its fields is malformed, never a panic; NODE_REQUEST and an OK
// NODE_RESPONSE end in an op body that runs to the end of the frame, so a
// prefix of those is malformed only when it loses the op or status byte
// (the op body is then checked by NodeDec, see TestNodeDecTruncated).
func TestNodeTruncated(t *testing.T) {
	for _, tc := range nodeCases() {
		t.Run(tc.name, func(t *testing.T) {
			_, body, _, err := wire.Split(tc.frame, testMaxBody)
			if err != nil {
				t.Fatal(err)
			}
			tailed := tc.want.H.Type == wire.TypeNodeRequest ||
				tc.want.H.Type == wire.TypeNodeResponse && tc.want.V.(nodeResponseV).Status == wire.NodeOK
			for i := 0; i < len(body); i++ {
				h := tc.want.H
				h.Len = uint32(i)
				v, err := decodeNode(h, bytes.Clone(body[:i]))
				if tailed && i >= 1 {
					if err != nil {
						t.Fatalf("prefix %d/%d: %v", i, len(body), err)
					}
					continue
				}
				if h.Type == wire.TypeNodeAppended && i == 13 {
					// The dup list is optional: its absence is a valid
					// NODE_APPENDED without dups.
					if err != nil || len(v.(wire.NodeAppended).Dups) != 0 {
						t.Fatalf("prefix 13: %v %v", v, err)
					}
					continue
				}
				if !errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
					t.Fatalf("prefix %d/%d: decoded %#v, err %v; want ErrMalformed", i, len(body), v, err)
				}
				if !strings.Contains(err.Error(), tc.want.H.Type.String()) {
					t.Fatalf("prefix %d/%d: error %q does not name %v", i, len(body), err, tc.want.H.Type)
				}
			}
		})
	}
}

// TestNodeTrailing: one byte more than the fields is malformed for every
// node body whose length the fields fix.
func TestNodeTrailing(t *testing.T) {
	for _, tc := range nodeCases() {
		ty := tc.want.H.Type
		if ty == wire.TypeNodeRequest || ty == wire.TypeNodeResponse && tc.want.V.(nodeResponseV).Status == wire.NodeOK {
			continue // the op body runs to the end of the frame
		}
		t.Run(tc.name, func(t *testing.T) {
			_, body, _, _ := wire.Split(tc.frame, testMaxBody)
			long := append(bytes.Clone(body), 0)
			_, err := decodeNode(wire.Header{Type: ty, Len: uint32(len(long))}, long)
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("trailing byte: err %v, want ErrMalformed", err)
			}
		})
	}
}

// nodeMalformedCase is one malformed node body and a piece of the error
// text that says what is wrong.
type nodeMalformedCase struct {
	name  string
	ty    wire.Type
	body  []byte
	where string
}

func nodeMalformedCases() []nodeMalformedCase {
	helloHead := func(name string) []byte { return append(u16(1), append(u8(uint8(len(name))), name...)...) }
	appendPrefix := append(u64(42), u64(7)...)
	feedPrefix := func(flags uint8, count uint32) []byte {
		return append(append(u64(42), u32(0)...), append(u8(flags), u32(count)...)...)
	}
	rec := func(p string) []byte { return append(u32(uint32(len(p))), p...) }
	return []nodeMalformedCase{
		{"HELLO/empty", wire.TypeNodeHello, nil, "version"},
		{"HELLO/truncated version", wire.TypeNodeHello, u8(0), "version"},
		{"HELLO/name overruns", wire.TypeNodeHello, cat(u16(1), u8(9), str("ab")), "name"},
		{"HELLO/empty name", wire.TypeNodeHello, cat(helloHead(""), u8(0), make([]byte, 32)), "empty node name"},
		{"HELLO/missing client address", wire.TypeNodeHello, helloHead("n"), "client address"},
		{"HELLO/missing nonce", wire.TypeNodeHello, cat(helloHead("n"), u8(0)), "nonce at offset 5 needs 32 bytes"},
		{"HELLO/short nonce", wire.TypeNodeHello, cat(helloHead("n"), u8(0), make([]byte, 31)), "nonce at offset 5 needs 32 bytes"},
		{"HELLO/trailing", wire.TypeNodeHello, cat(helloHead("n"), u8(0), make([]byte, 33)), "trailing"},

		{"CHALLENGE/empty", wire.TypeNodeChallenge, nil, "name"},
		{"CHALLENGE/empty name", wire.TypeNodeChallenge, cat(u8(0), make([]byte, 32)), "empty node name"},
		{"CHALLENGE/name overruns", wire.TypeNodeChallenge, cat(u8(3), str("ab")), "name"},
		{"CHALLENGE/short nonce", wire.TypeNodeChallenge, cat(u8(1), str("a"), make([]byte, 30)), "nonce at offset 2"},
		{"CHALLENGE/trailing", wire.TypeNodeChallenge, cat(u8(1), str("a"), make([]byte, 33)), "trailing"},

		{"PROOF/empty", wire.TypeNodeProof, nil, "proof at offset 0 needs 32"},
		{"PROOF/short", wire.TypeNodeProof, make([]byte, 31), "proof at offset 0 needs 32"},
		{"PROOF/trailing", wire.TypeNodeProof, make([]byte, 33), "trailing"},

		{"WELCOME/empty", wire.TypeNodeWelcome, nil, "proof"},
		{"WELCOME/short", wire.TypeNodeWelcome, make([]byte, 16), "proof"},
		{"WELCOME/trailing", wire.TypeNodeWelcome, make([]byte, 33), "trailing"},

		{"REQUEST/empty", wire.TypeNodeRequest, nil, "op"},
		{"REQUEST/op 0", wire.TypeNodeRequest, u8(0), "unknown op 0"},
		{"REQUEST/op after the last", wire.TypeNodeRequest, cat(u8(uint8(wire.OpInterest)+1), u64(1)), fmt.Sprintf("unknown op %d", wire.OpInterest+1)},
		{"REQUEST/op 255", wire.TypeNodeRequest, u8(255), "unknown op 255"},

		{"RESPONSE/empty", wire.TypeNodeResponse, nil, "status"},
		{"RESPONSE/status 12", wire.TypeNodeResponse, cat(u8(12), u16(0)), "unknown status 12"},
		{"RESPONSE/status 255", wire.TypeNodeResponse, u8(255), "unknown status 255"},
		{"RESPONSE/missing text length", wire.TypeNodeResponse, u8(wire.NodeFailed), "text length"},
		{"RESPONSE/short text length", wire.TypeNodeResponse, cat(u8(wire.NodeFailed), u8(0)), "text length"},
		{"RESPONSE/text overruns", wire.TypeNodeResponse, cat(u8(wire.NodeFailed), u16(5), str("ab")), "text"},
		{"RESPONSE/trailing after text", wire.TypeNodeResponse, cat(u8(wire.NodeFailed), u16(1), str("ab")), "trailing"},

		{"APPEND/short prefix", wire.TypeNodeAppend, cat(appendPrefix, u16(1)), "count"},
		{"APPEND/count 0", wire.TypeNodeAppend, cat(appendPrefix, u32(0)), "count 0"},
		{"APPEND/count 0 with records", wire.TypeNodeAppend, cat(appendPrefix, u32(0), rec("a")), "count 0"},
		{"APPEND/record overruns", wire.TypeNodeAppend, cat(appendPrefix, u32(1), u32(9), str("abc")), "record 0 of 1 overruns"},
		{"APPEND/record huge length", wire.TypeNodeAppend, cat(appendPrefix, u32(1), u32(math.MaxUint32), str("abc")), "record 0 of 1 overruns"},
		{"APPEND/fewer records than count", wire.TypeNodeAppend, cat(appendPrefix, u32(3), rec("a"), rec("b")), "record 2 of 3 overruns"},
		{"APPEND/count huge", wire.TypeNodeAppend, cat(appendPrefix, u32(math.MaxUint32), rec("")), "record 1 of 4294967295"},
		{"APPEND/partial length field", wire.TypeNodeAppend, cat(appendPrefix, u32(2), rec("a"), u16(0)), "record 1 of 2 overruns"},
		{"APPEND/trailing after records", wire.TypeNodeAppend, cat(appendPrefix, u32(1), rec("a"), u8(0)), "1 bytes after record 1"},

		{"APPENDED/empty", wire.TypeNodeAppended, nil, "status"},
		{"APPENDED/truncated", wire.TypeNodeAppended, cat(u8(0), u32(1), u32(0)), "first"},
		{"APPENDED/trailing", wire.TypeNodeAppended, cat(u8(0), u32(1), u64(1), u8(0)), "dup count"},
		{"APPENDED/dup count 0", wire.TypeNodeAppended, cat(u8(0), u32(1), u64(1), u32(0)), "dup count 0"},
		{"APPENDED/dups short", wire.TypeNodeAppended, cat(u8(0), u32(2), u64(1), u32(2), u32(0), u64(5)), "2 dups need 24 bytes"},
		{"APPENDED/dup index not below done", wire.TypeNodeAppended, cat(u8(0), u32(1), u64(1), u32(1), u32(1), u64(5)), "not below done"},
		{"APPENDED/dup indexes out of order", wire.TypeNodeAppended, cat(u8(0), u32(3), u64(1), u32(2), u32(1), u64(5), u32(1), u64(6)), "out of order"},
		{"APPENDED/status 12", wire.TypeNodeAppended, cat(u8(12), u32(1), u64(1)), "unknown status 12"},

		{"REPLICATE/short prefix", wire.TypeNodeReplicate, cat(u64(42), u64(7), u32(0), u32(0), u8(0), u16(0)), "count"},
		{"REPLICATE/flags 0x02", wire.TypeNodeReplicate, cat(u64(42), u64(7), u32(0), u32(0), u8(2), u32(0)), "unknown flags 0x02"},
		{"REPLICATE/commit past the records", wire.TypeNodeReplicate, cat(u64(42), u64(7), u32(3), u32(5), u8(0), u32(1), u64(1), rec("a")), "commit 5 past start 3 + count 1"},
		{"REPLICATE/stamps overrun huge count", wire.TypeNodeReplicate, cat(u64(42), u64(7), u32(0), u32(0), u8(0), u32(math.MaxUint32), u64(1)), "4294967295 stamps overrun"},
		{"REPLICATE/fewer records than count", wire.TypeNodeReplicate, cat(u64(42), u64(7), u32(0), u32(0), u8(0), u32(2), u64(1), u64(2), rec("a")), "record 1 of 2 overruns"},
		{"REPLICATE/trailing after an empty one", wire.TypeNodeReplicate, cat(u64(42), u64(7), u32(0), u32(0), u8(1), u32(0), u8(0)), "bytes after an empty replicate"},
		{"REPLICATED/status 12", wire.TypeNodeReplicated, cat(u64(42), u8(12), u32(1)), "unknown status 12"},
		{"REPLICATED/short", wire.TypeNodeReplicated, cat(u64(42), u8(0), u16(1)), "held"},
		{"REPLICATED/trailing", wire.TypeNodeReplicated, cat(u64(42), u8(0), u32(1), u8(0)), ""},

		{"FEED/short prefix", wire.TypeNodeFeed, cat(u64(42), u32(0), u8(0), u16(0)), "count"},
		{"FEED/flags 0x04", wire.TypeNodeFeed, feedPrefix(4, 0), "unknown flags 0x04"},
		{"FEED/flags 0x80", wire.TypeNodeFeed, cat(feedPrefix(0x81, 1), u64(1), rec("a")), "unknown flags 0x81"},
		{"FEED/stamps overrun", wire.TypeNodeFeed, cat(feedPrefix(0, 3), u64(1), u64(2), u32(0)), "3 stamps overrun"},
		{"FEED/stamps overrun huge count", wire.TypeNodeFeed, cat(feedPrefix(0, math.MaxUint32), u64(1), u32(0)), "4294967295 stamps overrun"},
		{"FEED/no records after stamps", wire.TypeNodeFeed, cat(feedPrefix(0, 1), u64(1)), "record 0 of 1 overruns"},
		{"FEED/record overruns", wire.TypeNodeFeed, cat(feedPrefix(0, 1), u64(1), u32(5), str("ab")), "record 0 of 1 overruns"},
		{"FEED/fewer records than count", wire.TypeNodeFeed, cat(feedPrefix(0, 2), u64(1), u64(2), rec("a"), u8(0), u8(0), u8(0)), "record 1 of 2 overruns"},
		{"FEED/trailing after records", wire.TypeNodeFeed, cat(feedPrefix(wire.FeedSealed, 1), u64(1), rec("a"), u8(0)), "1 bytes after record 1"},
		{"FEED/trailing after empty feed", wire.TypeNodeFeed, cat(feedPrefix(wire.FeedGone, 0), u8(0)), "bytes after an empty feed"},

		{"READ/short", wire.TypeNodeRead, u64(1), "from"},
		{"READ/trailing", wire.TypeNodeRead, cat(u64(1), u32(1), u8(0)), "trailing"},
		{"UNREAD/short", wire.TypeNodeUnread, u32(1), "streamlet"},
		{"UNREAD/trailing", wire.TypeNodeUnread, cat(u64(1), u8(0)), "trailing"},
	}
}

// TestNodeMalformed: each malformed class is refused with an error that
// wraps ErrMalformed, names the frame type and says what is wrong.
func TestNodeMalformed(t *testing.T) {
	for _, tc := range nodeMalformedCases() {
		t.Run(tc.name, func(t *testing.T) {
			frame := raw(tc.ty, 0, 1, tc.body)
			h, body, _, err := wire.Split(frame, testMaxBody)
			if err != nil {
				t.Fatal(err)
			}
			v, err := decodeNode(h, body)
			if !errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
				t.Fatalf("decoded %#v, err %v; want ErrMalformed", v, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.ty.String()) || !strings.Contains(msg, tc.where) {
				t.Fatalf("error %q should name %v and %q", msg, tc.ty, tc.where)
			}
		})
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestNodeStatuses: every defined status decodes in NODE_RESPONSE (as an
// error with its text, or OK with its result) and in NODE_APPENDED.
func TestNodeStatuses(t *testing.T) {
	for st := wire.NodeOK; st <= wire.NodeOverload; st++ {
		f := wire.AppendNodeResponse(nil, 1, st, []byte("res"), "why")
		_, body, _, _ := wire.Split(f, testMaxBody)
		gotSt, res, text, err := wire.DecodeNodeResponse(body)
		want := nodeResponseV{st, "", "why"}
		if st == wire.NodeOK {
			want = nodeResponseV{st, "res", ""}
		}
		if err != nil || !reflect.DeepEqual(nodeResponseV{gotSt, string(res), text}, want) {
			t.Errorf("NODE_RESPONSE status %d: %v %q %q, %v", st, gotSt, res, text, err)
		}
		f = wire.AppendNodeAppended(nil, 1, wire.NodeAppended{Status: st})
		_, body, _, _ = wire.Split(f, testMaxBody)
		if a, err := wire.DecodeNodeAppended(body); err != nil || a.Status != st {
			t.Errorf("NODE_APPENDED status %d: %+v, %v", st, a, err)
		}
	}
	if wire.NodeClosed != 1 || wire.NodeUnknown != 2 || wire.NodeStale != 3 || wire.NodeFailed != 4 ||
		wire.NodeBadOp != 5 || wire.NodeShutdown != 6 || wire.NodeOverload != 7 {
		t.Fatal("status constants moved (PROTOCOL.md 9.3)")
	}
	if wire.OpDedupIDs != 12 || wire.OpWriteGrant != 1 || wire.OpHost != 4 || wire.OpSeal != 5 ||
		wire.OpFree != 6 || wire.OpList != 7 || wire.OpStatus != 9 || wire.OpLen != 10 ||
		wire.OpExpire != 11 || wire.OpCopy != 13 || wire.OpDrain != 14 || wire.OpFence != 15 || wire.OpSealAt != 16 ||
		wire.OpUnreachable != 17 || wire.OpCreate != 20 || wire.OpInterest != 21 {
		t.Fatal("op constants moved (PROTOCOL.md 9.4)")
	}
	for op := wire.OpWriteGrant; op <= wire.OpDrain; op++ {
		f := wire.AppendNodeRequest(nil, 1, op, nil)
		if gotOp, rest, err := wire.DecodeNodeRequest(f[wire.HeaderLen:]); err != nil || gotOp != op || len(rest) != 0 {
			t.Errorf("op %d: %d % x, %v", op, gotOp, rest, err)
		}
	}
}

// TestNodeResponseTextTruncated: an error text over 1024 bytes is cut to
// 1024 by the encoder, so a NODE_RESPONSE stays small.
func TestNodeResponseTextTruncated(t *testing.T) {
	long := strings.Repeat("x", 1500)
	f := wire.AppendNodeResponse(nil, 1, wire.NodeFailed, nil, long)
	_, body, _, err := wire.Split(f, testMaxBody)
	if err != nil || len(body) != 1+2+1024 {
		t.Fatalf("body %d bytes, %v", len(body), err)
	}
	if _, _, text, err := wire.DecodeNodeResponse(body); err != nil || text != long[:1024] {
		t.Fatalf("text %d bytes, %v", len(text), err)
	}
}

// TestNodeDecodersCapSlices: slices returned by node decoders alias the
// body with their capacity capped, so appending to them cannot overwrite
// the next field or frame.
func TestNodeDecodersCapSlices(t *testing.T) {
	cases := nodeCases()
	for _, tc := range cases {
		_, body, _, _ := wire.Split(tc.frame, testMaxBody)
		var parts [][]byte
		switch tc.want.H.Type {
		case wire.TypeNodeRequest:
			_, rest, _ := wire.DecodeNodeRequest(body)
			parts = append(parts, rest)
		case wire.TypeNodeResponse:
			_, res, _, _ := wire.DecodeNodeResponse(body)
			parts = append(parts, res)
		case wire.TypeNodeAppend:
			_, run, _ := wire.DecodeNodeAppend(body)
			parts = append(parts, run)
		case wire.TypeNodeFeed:
			_, stamps, run, _ := wire.DecodeNodeFeed(body)
			parts = append(parts, stamps, run)
		}
		for i, p := range parts {
			if cap(p) != len(p) {
				t.Errorf("%s: slice %d has len %d cap %d", tc.name, i, len(p), cap(p))
			}
		}
	}
}

func TestNodeTypes(t *testing.T) {
	names := map[wire.Type]string{
		0x40: "NODE_HELLO", 0x41: "NODE_WELCOME", 0x42: "NODE_REQUEST", 0x43: "NODE_RESPONSE", 0x44: "NODE_APPEND",
		0x45: "NODE_APPENDED", 0x46: "NODE_FEED", 0x47: "NODE_READ", 0x48: "NODE_UNREAD", 0x49: "NODE_REPLICATE", 0x4A: "NODE_REPLICATED",
		0x4D: "NODE_CHALLENGE", 0x4E: "NODE_PROOF", 0x4F: "NODE_SEALED",
	}
	consts := []wire.Type{wire.TypeNodeHello, wire.TypeNodeWelcome, wire.TypeNodeRequest, wire.TypeNodeResponse,
		wire.TypeNodeAppend, wire.TypeNodeAppended, wire.TypeNodeFeed, wire.TypeNodeRead, wire.TypeNodeUnread,
		wire.TypeNodeReplicate, wire.TypeNodeReplicated}
	if wire.TypeNodeChallenge != 0x4D || wire.TypeNodeProof != 0x4E || wire.TypeNodeSealed != 0x4F {
		t.Error("handshake and record types moved")
	}
	for i, ty := range consts {
		if ty != wire.Type(0x40+i) {
			t.Errorf("%v = 0x%02X, want 0x%02X", ty, uint8(ty), 0x40+i)
		}
	}
	for v := 0; v <= 0xFF; v++ {
		ty := wire.Type(v)
		name, isNode := names[ty]
		if ty.IsNode() != isNode {
			t.Errorf("Type(0x%02X).IsNode() = %v", v, ty.IsNode())
		}
		if isNode {
			if ty.String() != name {
				t.Errorf("Type(0x%02X).String() = %q, want %q", v, ty.String(), name)
			}
			if ty.Known() || ty < wire.TypeNodeFirst || ty > wire.TypeNodeLast {
				t.Errorf("%v: Known=%v, outside the node range", ty, ty.Known())
			}
		} else if !ty.Known() && ty.String() != fmt.Sprintf("Type(0x%02X)", v) {
			t.Errorf("Type(0x%02X).String() = %q", v, ty.String())
		}
	}
}

// TestNodeEncoderPanics: values the format cannot carry are programming
// errors and panic in the encoder instead of producing a bad frame.
func TestNodeEncoderPanics(t *testing.T) {
	long := strings.Repeat("n", 256)
	for name, fn := range map[string]func(){
		"hello name 256":      func() { wire.AppendNodeHello(nil, wire.NodeHello{Name: long}) },
		"hello address 256":   func() { wire.AppendNodeHello(nil, wire.NodeHello{Name: "n", ClientAddr: long}) },
		"challenge name 256":  func() { wire.AppendNodeChallenge(nil, wire.NodeChallenge{Name: long}) },
		"NodeEnc.Str8 256":    func() { new(wire.NodeEnc).Str8(long) },
		"feed header len < 0": func() { wire.AppendNodeFeedHeader(nil, wire.NodeFeed{}, nil, -wire.NodeFeedPrefixLen-1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			fn()
		})
	}
	// The largest values that fit do not panic.
	f := wire.AppendNodeHello(nil, wire.NodeHello{Name: long[:255], ClientAddr: long[:255]})
	if _, err := wire.DecodeNodeHello(f[wire.HeaderLen:]); err != nil {
		t.Fatal(err)
	}
}

// Op-body shapes, one letter per field: b u8, h u16, w u32, q u64, i i64,
// s str8; "h[...]" is a u16 count followed by that many copies of the group.
// The result shapes of PROTOCOL.md 9.4 (a SEAL result is "q", a LEN result
// "bw"; an INFO result for an unknown channel is only its found byte 0).
const (
	shapeGrant = "sqqsqwwi"       // channel, epoch, streamlet, host, first, limitMsgs, limitSize, leaseEnd
	shapeInfo  = "bqqqh[qsqqbii]" // a REF list as the grant's prior streamlets use it
	shapeList  = "h[qqqwbiw]"     // n x HOSTED
	// DEDUP_IDS: done, next, n x (streamlet index, record index, stamp, id)
	shapeIDPage = "hwh[hwis]"
	// UNREACHABLE: flags, len, n x replica
	shapeRecovered = "bwh[s]"
)

// opRequestShapes are the NODE_REQUEST op bodies of PROTOCOL.md 9.4.
var opRequestShapes = map[wire.NodeOp]string{
	wire.OpWriteGrant: "sq", wire.OpHost: "h[qsqq]" + shapeGrant,
	wire.OpSeal: "q", wire.OpFree: "q", wire.OpList: "s", wire.OpStatus: "", wire.OpLen: "q",
	wire.OpExpire: "sq", wire.OpDedupIDs: "iwh[q]", wire.OpCopy: "sqqsqq", wire.OpDrain: "s",
	wire.OpFence: "q", wire.OpSealAt: "qwh[s]", wire.OpUnreachable: "sqss", wire.OpCreate: "s",
	wire.OpInterest: "h[sw]",
}

// walkShape reads the fields of shape from dec and writes each value it
// read to enc; a sticky decoder error ends the walk early.
func walkShape(dec *wire.NodeDec, enc *wire.NodeEnc, shape string) {
	for i := 0; i < len(shape) && dec.Err() == nil; i++ {
		switch shape[i] {
		case 'b':
			enc.U8(dec.U8())
		case 'h':
			n := dec.U16()
			enc.U16(n)
			if i+1 < len(shape) && shape[i+1] == '[' {
				end := i + 1 + strings.IndexByte(shape[i+1:], ']')
				for k := 0; k < int(n) && dec.Err() == nil; k++ {
					walkShape(dec, enc, shape[i+2:end])
				}
				i = end
			}
		case 'w':
			enc.U32(dec.U32())
		case 'q':
			enc.U64(dec.U64())
		case 'i':
			enc.I64(dec.I64())
		case 's':
			enc.Str8(dec.Str8())
		default:
			panic("bad shape " + shape)
		}
	}
}

// TestNodeEncDecRoundTrip: every field kind written by NodeEnc reads back
// unchanged from NodeDec, in the op-body shapes of the protocol.
func TestNodeEncDecRoundTrip(t *testing.T) {
	var e wire.NodeEnc
	e.U8(0xAB)
	e.U16(0xBEEF)
	e.U32(0xDEADBEEF)
	e.U64(0x0123456789ABCDEF)
	e.I64(-2)
	e.I64(math.MinInt64)
	e.Str8("")
	e.Str8("prices.eu")
	e.Str8(strings.Repeat("z", 255))
	e.U32(uint32(0xFFFFFFFF)) // an OpInterest delta of -1
	want := cat(u8(0xAB), u16(0xBEEF), u32(0xDEADBEEF), u64(0x0123456789ABCDEF), u64(math.MaxUint64-1),
		u64(1<<63), u8(0), u8(9), str("prices.eu"), u8(255), str(strings.Repeat("z", 255)), u32(math.MaxUint32))
	if !bytes.Equal(e.B, want) {
		t.Fatalf("NodeEnc wrote\n% x\nwant\n% x", e.B, want)
	}
	d := wire.NewNodeDec(wire.TypeNodeRequest, e.B)
	got := []any{d.U8(), d.U16(), d.U32(), d.U64(), d.I64(), d.I64(), d.Str8(), d.Str8(), d.Str8(), int32(d.U32())}
	wantV := []any{uint8(0xAB), uint16(0xBEEF), uint32(0xDEADBEEF), uint64(0x0123456789ABCDEF), int64(-2),
		int64(math.MinInt64), "", "prices.eu", strings.Repeat("z", 255), int32(-1)}
	if !reflect.DeepEqual(got, wantV) {
		t.Fatalf("NodeDec read %v\nwant %v", got, wantV)
	}
	if err := d.Done(); err != nil || d.Err() != nil {
		t.Fatalf("Done %v, Err %v", err, d.Err())
	}

	// The list shapes: a GRANT, an INFO result with two REFs, a LIST result.
	var in wire.NodeEnc
	in.Str8("prices.eu")
	in.U64(7)
	in.U64(42)
	in.Str8("10.0.0.2:4222")
	in.U64(1001)
	in.U32(5000)
	in.U32(2 << 20)
	in.I64(stamp0)
	grant := bytes.Clone(in.B)
	in.B = nil
	in.U8(1)
	in.U64(7)
	in.U64(900)
	in.U64(1010)
	in.U16(2)
	for i := range uint64(2) {
		in.U64(41 + i)
		in.Str8("node-a")
		in.U64(900 + 50*i)
		in.U64(950 + 60*i)
		in.U8(uint8(1 - i))
		in.I64(stamp0)
		in.I64(stamp1)
	}
	info := bytes.Clone(in.B)
	in.B = nil
	in.U16(1)
	in.U64(42)
	in.U64(7)
	in.U64(1001)
	in.U32(9)
	in.U8(1)
	in.I64(stamp1)
	in.U32(5000)
	list := bytes.Clone(in.B)
	for _, c := range []struct {
		name, shape string
		body        []byte
	}{{"grant", shapeGrant, grant}, {"info", shapeInfo, info}, {"list", shapeList, list}} {
		d := wire.NewNodeDec(wire.TypeNodeResponse, c.body)
		var re wire.NodeEnc
		walkShape(d, &re, c.shape)
		if err := d.Done(); err != nil || !bytes.Equal(re.B, c.body) {
			t.Errorf("%s: re-encoded\n% x\nwant\n% x\n%v", c.name, re.B, c.body, err)
		}
	}
}

// TestNodeDecSticky: after a short read every later read returns zero
// values and the first error stays; Done reports it, or leftover bytes.
func TestNodeDecSticky(t *testing.T) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, cat(u16(7), u8(20), str("ab"), u64(9)))
	if d.U16() != 7 {
		t.Fatal("u16")
	}
	if s := d.Str8(); s != "" {
		t.Fatalf("string overrunning the body read as %q", s)
	}
	first := d.Err()
	if !errors.Is(first, wire.ErrMalformed) || !strings.Contains(first.Error(), "NODE_RESPONSE") || !strings.Contains(first.Error(), "string") {
		t.Fatalf("err %v", first)
	}
	if d.U8() != 0 || d.U16() != 0 || d.U32() != 0 || d.U64() != 0 || d.I64() != 0 || d.Str8() != "" {
		t.Fatal("reads after the error return values")
	}
	d.Fail("count %d over limit", 9)
	if d.Err() != first || d.Done() != first {
		t.Fatalf("error changed to %v / %v", d.Err(), d.Done())
	}

	// Every short read is an error, for every field kind.
	for kind, size := range map[string]int{"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i64": 8, "string": 2} {
		for n := 0; n < size; n++ {
			b := make([]byte, n)
			if kind == "string" && n == 1 {
				b[0] = 1
			}
			d := wire.NewNodeDec(wire.TypeNodeRequest, b)
			switch kind {
			case "u8":
				d.U8()
			case "u16":
				d.U16()
			case "u32":
				d.U32()
			case "u64":
				d.U64()
			case "i64":
				d.I64()
			case "string":
				d.Str8()
			}
			if err := d.Err(); !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), kind) {
				t.Errorf("%s from %d bytes: err %v", kind, n, err)
			}
		}
	}

	// Fail records a semantic error; Done reports leftover bytes.
	d = wire.NewNodeDec(wire.TypeNodeRequest, u16(300))
	if n := d.U16(); n > 256 {
		d.Fail("count %d over %d", n, 256)
	}
	if err := d.Done(); !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), "count 300 over 256") {
		t.Fatalf("Fail: %v", err)
	}
	d = wire.NewNodeDec(wire.TypeNodeRequest, u16(1))
	d.U8()
	if d.Err() != nil || !errors.Is(d.Done(), wire.ErrMalformed) || !strings.Contains(d.Done().Error(), "trailing") {
		t.Fatalf("leftover byte: Err %v Done %v", d.Err(), d.Done())
	}
}

// TestNodeDecTruncated: every strict prefix of a well-formed op body of
// every request shape fails in NodeDec, never panics.
func TestNodeDecTruncated(t *testing.T) {
	fill := map[byte]func(e *wire.NodeEnc){
		'b': func(e *wire.NodeEnc) { e.U8(1) }, 'h': func(e *wire.NodeEnc) { e.U16(0) },
		'w': func(e *wire.NodeEnc) { e.U32(3) }, 'q': func(e *wire.NodeEnc) { e.U64(4) },
		'i': func(e *wire.NodeEnc) { e.I64(-5) }, 's': func(e *wire.NodeEnc) { e.Str8("ch") },
	}
	for op := wire.OpWriteGrant; op <= wire.OpInterest; op++ {
		switch op {
		case 2, 3, 8, 18, 19: // retired (PROTOCOL.md 9.4)
			continue
		}
		if _, ok := opRequestShapes[op]; !ok {
			t.Errorf("op %d has no request shape", op)
		}
	}
	for op, shape := range opRequestShapes {
		var e wire.NodeEnc
		for i := 0; i < len(shape); i++ {
			if shape[i] == '[' { // after a count of 0: the group is absent
				i += strings.IndexByte(shape[i:], ']')
				continue
			}
			fill[shape[i]](&e)
		}
		for n := 0; n <= len(e.B); n++ {
			d := wire.NewNodeDec(wire.TypeNodeRequest, e.B[:n])
			var re wire.NodeEnc
			walkShape(d, &re, shape)
			err := d.Done()
			if n == len(e.B) {
				if err != nil || !bytes.Equal(re.B, e.B) {
					t.Errorf("op %d: whole body: %v", op, err)
				}
			} else if !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("op %d: prefix %d/%d: err %v", op, n, len(e.B), err)
			}
		}
	}
}

// TestNodeZeroAllocs: the data-path decoders (NODE_APPEND on the host,
// NODE_FEED on the gateway) and their encoders do not allocate.
func TestNodeZeroAllocs(t *testing.T) {
	payload := make([]byte, 128)
	var run []byte
	for range 3 {
		run = wire.AppendRecord(run, payload)
	}
	stamps := []int64{stamp0, stamp0 + 1, stamp0 + 2}
	app := append(wire.AppendNodeAppendHeader(nil, 9, wire.NodeAppend{Streamlet: 42, Epoch: 7, Count: 3}, len(run)), run...)
	feed := append(wire.AppendNodeFeedHeader(nil, wire.NodeFeed{Streamlet: 42, Start: 10, Flags: wire.FeedSealed}, stamps, len(run)), run...)
	buf := make([]byte, 0, 1024)
	var sink int64
	for name, fn := range map[string]func(){
		"DecodeNodeAppend+NextRecord": func() {
			_, body, _, err := wire.Split(app, testMaxBody)
			a, recs, err2 := wire.DecodeNodeAppend(body)
			if err != nil || err2 != nil || a.Count != 3 {
				t.Fatal(err, err2)
			}
			for ok := true; ok; {
				_, recs, ok = wire.NextRecord(recs)
			}
		},
		"DecodeNodeFeed+FeedStamp": func() {
			_, body, _, err := wire.Split(feed, testMaxBody)
			f, st, recs, err2 := wire.DecodeNodeFeed(body)
			if err != nil || err2 != nil || f.Count != 3 {
				t.Fatal(err, err2)
			}
			for i := range int(f.Count) {
				sink += wire.FeedStamp(st, i)
			}
			for ok := true; ok; {
				_, recs, ok = wire.NextRecord(recs)
			}
		},
		"AppendNodeAppendHeader": func() {
			buf = wire.AppendNodeAppendHeader(buf[:0], 9, wire.NodeAppend{Streamlet: 42, Epoch: 7, Count: 3}, len(run))
			buf = append(buf, run...)
		},
		"AppendNodeFeedHeader": func() {
			buf = wire.AppendNodeFeedHeader(buf[:0], wire.NodeFeed{Streamlet: 42}, stamps, len(run))
			buf = append(buf, run...)
		},
		"AppendNodeAppended": func() { buf = wire.AppendNodeAppended(buf[:0], 9, wire.NodeAppended{Done: 3, First: 1}) },
		"DecodeNodeAppended": func() {
			if _, err := wire.DecodeNodeAppended(wire.AppendNodeAppended(buf[:0], 9, wire.NodeAppended{})[wire.HeaderLen:]); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", name, n)
		}
	}
	_ = sink
}

var nodeBenchBatches = []int{1, 16, 100}

// BenchmarkAppendNodeAppend encodes a NODE_APPEND the way a gateway does:
// header and prefix, then each record of the batch.
func BenchmarkAppendNodeAppend(b *testing.B) {
	for _, batch := range nodeBenchBatches {
		for _, size := range []int{16, 128} {
			b.Run(fmt.Sprintf("batch=%d/size=%d", batch, size), func(b *testing.B) {
				payload := make([]byte, size)
				recsLen := batch * (wire.RecordHeaderLen + size)
				buf := make([]byte, 0, wire.HeaderLen+wire.NodeAppendPrefixLen+recsLen)
				b.SetBytes(int64(cap(buf)))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					buf = wire.AppendNodeAppendHeader(buf[:0], uint32(i), wire.NodeAppend{Streamlet: 42, Epoch: 7, Count: uint32(batch)}, recsLen)
					for range batch {
						buf = wire.AppendRecord(buf, payload)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeNodeFeed splits a NODE_FEED, validates it and walks its
// stamps and records, as a gateway does before fanning out.
func BenchmarkDecodeNodeFeed(b *testing.B) {
	for _, batch := range nodeBenchBatches {
		for _, size := range []int{16, 128} {
			b.Run(fmt.Sprintf("batch=%d/size=%d", batch, size), func(b *testing.B) {
				payloads := make([]string, batch)
				stamps := make([]int64, batch)
				for i := range payloads {
					payloads[i] = string(make([]byte, size))
					stamps[i] = stamp0 + int64(i)
				}
				frame := nodeFeedFrame(nil, wire.NodeFeed{Streamlet: 42, Start: 1}, stamps, payloads...)
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				var sink int64
				for b.Loop() {
					_, body, _, err := wire.Split(frame, 3<<20)
					if err != nil {
						b.Fatal(err)
					}
					f, st, recs, err := wire.DecodeNodeFeed(body)
					if err != nil {
						b.Fatal(err)
					}
					for i := range int(f.Count) {
						var p []byte
						p, recs, _ = wire.NextRecord(recs)
						sink += wire.FeedStamp(st, i) + int64(len(p))
					}
				}
				_ = sink
			})
		}
	}
}
