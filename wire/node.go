package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Node-to-node frames (types 0x40..0x4F; PROTOCOL.md section 9). A node
// opens one connection to each peer it talks to, on the peer's client
// port, and identifies itself with NODE_HELLO instead of HELLO. Requests
// travel from the dialer to the acceptor; the acceptor answers on the same
// connection and pushes NODE_FEED on it for the streamlets the dialer
// asked to read. Every multi-byte field is big-endian, as in the client
// protocol; strings are u8 length + bytes unless said otherwise.
const (
	TypeNodeHello    Type = 0x40 // dialer -> acceptor, first frame
	TypeNodeWelcome  Type = 0x41 // acceptor -> dialer, answer to NODE_HELLO
	TypeNodeRequest  Type = 0x42 // dialer -> acceptor, id = request id
	TypeNodeResponse Type = 0x43 // acceptor -> dialer, id = request id
	TypeNodeAppend   Type = 0x44 // dialer -> acceptor, id = request id
	TypeNodeAppended Type = 0x45 // acceptor -> dialer, id = request id
	TypeNodeFeed     Type = 0x46 // acceptor -> dialer, id 0
	TypeNodeRead     Type = 0x47 // dialer -> acceptor, id 0
	TypeNodeUnread   Type = 0x48 // dialer -> acceptor, id 0
	// Replication (PROTOCOL.md 9.9): the orderer of a replicated
	// streamlet forwards its appends to each follower on its link to it.
	TypeNodeReplicate  Type = 0x49 // dialer (orderer) -> acceptor (follower), id 0
	TypeNodeReplicated Type = 0x4A // acceptor -> dialer, id 0

	// The handshake's second and third flights and the sealed record
	// that carries every frame after it (nodeauth.go, seal.go).
	TypeNodeChallenge Type = 0x4D // acceptor -> dialer, answer to NODE_HELLO
	TypeNodeProof     Type = 0x4E // dialer -> acceptor, answer to NODE_CHALLENGE
	TypeNodeSealed    Type = 0x4F // both directions after NODE_WELCOME, id = record sequence (low 32 bits)
)

// IsNode reports whether t is a node-to-node frame type defined here.
func (t Type) IsNode() bool {
	return t >= TypeNodeHello && t <= TypeNodeSealed && nodeTypeNames[t-TypeNodeHello] != ""
}

var nodeTypeNames = [...]string{"NODE_HELLO", "NODE_WELCOME", "NODE_REQUEST", "NODE_RESPONSE",
	"NODE_APPEND", "NODE_APPENDED", "NODE_FEED", "NODE_READ", "NODE_UNREAD", "NODE_REPLICATE", "NODE_REPLICATED", "", "",
	"NODE_CHALLENGE", "NODE_PROOF", "NODE_SEALED"}

func appendStr8(dst []byte, t Type, field, s string) []byte {
	mustFit(t, field, len(s), math.MaxUint8)
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

func (d *decoder) str8(field string) string {
	n := int(d.u8(field))
	return string(d.bytes(n, field))
}

// NodeOp is the operation of a NODE_REQUEST (its first body byte).
type NodeOp uint8

// Node operations; the body after the op byte is given per op in
// PROTOCOL.md 9.4 and built with NodeEnc.
const (
	OpWriteGrant NodeOp = 1  // leader: str8 channel, u64 after -> grant
	OpHost       NodeOp = 4  // host: grant, prior streamlets -> empty
	OpSeal       NodeOp = 5  // host: u64 id -> u64 end (once durable)
	OpFree       NodeOp = 6  // host: u64 id -> empty
	OpList       NodeOp = 7  // host: str8 channel -> hosted list (diagnostics)
	OpStatus     NodeOp = 9  // any: empty -> JSON status document
	OpLen        NodeOp = 10 // host: u64 id -> u8 found, u32 len
	OpExpire     NodeOp = 11 // leader: str8 channel, u64 through -> u32 expired
	OpDedupIDs   NodeOp = 12 // host: i64 since, u32 from, u16 n, n x u64 id -> a page of message ids
	OpCopy       NodeOp = 13 // host: str8 channel, u64 epoch, u64 id, str8 holder, u64 first, u64 end -> empty
	OpDrain      NodeOp = 14 // any: str8 node -> empty
	OpFence      NodeOp = 15 // host: u64 id -> u8 flags, u32 held
	OpSealAt     NodeOp = 16 // host: u64 id, u32 len, u16 n, n x str8 keep -> empty
	// leader: str8 channel, u64 id, str8 orderer, str8 follower
	// -> u8 flags, u32 len, u16 n, n x str8 replicas
	OpUnreachable NodeOp = 17
	OpCreate      NodeOp = 20 // leader: str8 channel -> u64 index at which it exists
	OpInterest    NodeOp = 21 // leader: u16 n, n x (str8 channel, u32 loops) -> empty
	opMax                = OpInterest
)

// Ops 2 (INFO), 3 (INTEREST by delta), 8 (NOTIFY), 18 (CLAIM) and 19
// (MANAGER) belonged to the coordination that the metadata log replaced
// (node protocol version 3); they are never sent and answered BAD_OP.

// Node response statuses (NODE_RESPONSE's first body byte; NODE_APPENDED's
// too). A non-zero status is followed by a str16 error text in
// NODE_RESPONSE.
const (
	NodeOK          uint8 = 0
	NodeClosed      uint8 = 1  // the streamlet refuses writes: ask for a new grant
	NodeUnknown     uint8 = 2  // no such streamlet on this host
	NodeStale       uint8 = 3  // the grant's epoch does not match the streamlet's
	NodeFailed      uint8 = 4  // the operation failed; see the text
	NodeBadOp       uint8 = 5  // unknown op or malformed op body
	NodeShutdown    uint8 = 6  // the node is shutting down
	NodeOverload    uint8 = 7  // the node's backlog is over its limit
	NodeFenced      uint8 = 8  // NODE_REPLICATED: recovery fenced this replica
	NodeOrder       uint8 = 9  // NODE_REPLICATED: out of order, or not from the orderer
	NodeNotLeader   uint8 = 10 // this node does not lead the metadata log: ask the leader
	NodeUnavailable uint8 = 11 // the change cannot be made now (a host unreachable, no commit): try again
	nodeStatusMax   uint8 = 11
)

// AppendNodeRequest appends a NODE_REQUEST frame with op and its body.
func AppendNodeRequest(dst []byte, id uint32, op NodeOp, body []byte) []byte {
	dst = AppendHeader(dst, TypeNodeRequest, 0, id, 1+len(body))
	dst = append(dst, byte(op))
	return append(dst, body...)
}

// DecodeNodeRequest splits a NODE_REQUEST body into op and op body (a
// capped sub-slice of body).
func DecodeNodeRequest(body []byte) (NodeOp, []byte, error) {
	d := decoder{b: body, frame: TypeNodeRequest}
	op := NodeOp(d.u8("op"))
	rest := d.rest()
	if d.err == nil && !validOp(op) {
		d.failf("unknown op %d", op)
	}
	return op, rest, d.err
}

// AppendNodeResponse appends a NODE_RESPONSE: u8 status, then the result
// body when status is NodeOK, or str16 text otherwise.
func AppendNodeResponse(dst []byte, id uint32, status uint8, body []byte, text string) []byte {
	if status != NodeOK {
		text = truncText(text)
		dst = AppendHeader(dst, TypeNodeResponse, 0, id, 1+2+len(text))
		dst = append(dst, status)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(text)))
		return append(dst, text...)
	}
	dst = AppendHeader(dst, TypeNodeResponse, 0, id, 1+len(body))
	dst = append(dst, status)
	return append(dst, body...)
}

func truncText(s string) string {
	if len(s) > 1024 {
		return s[:1024]
	}
	return s
}

// DecodeNodeResponse decodes a NODE_RESPONSE body: the status, the result
// body (NodeOK) or the error text.
func DecodeNodeResponse(body []byte) (status uint8, result []byte, text string, err error) {
	d := decoder{b: body, frame: TypeNodeResponse}
	status = d.u8("status")
	if d.err == nil && status > nodeStatusMax {
		d.failf("unknown status %d", status)
	}
	if status == NodeOK {
		return status, d.rest(), "", d.err
	}
	n := int(d.u16("text length"))
	text = string(d.bytes(n, "text"))
	return status, nil, text, d.exact()
}

// NodeAppend is a NODE_APPEND body without its records:
//
//	u64 streamlet, u64 epoch, u32 count (>= 1), count x (u32 len, payload)
type NodeAppend struct {
	Streamlet uint64
	Epoch     uint64
	Count     uint32
}

// NodeAppendPrefixLen is the size of NODE_APPEND's fixed prefix.
const NodeAppendPrefixLen = 8 + 8 + 4

// AppendNodeAppendHeader appends the header and prefix of a NODE_APPEND
// whose record run (recordsLen bytes, a.Count records) the caller appends
// next with AppendRecord.
func AppendNodeAppendHeader(dst []byte, id uint32, a NodeAppend, recordsLen int) []byte {
	dst = AppendHeader(dst, TypeNodeAppend, 0, id, NodeAppendPrefixLen+recordsLen)
	dst = binary.BigEndian.AppendUint64(dst, a.Streamlet)
	dst = binary.BigEndian.AppendUint64(dst, a.Epoch)
	return binary.BigEndian.AppendUint32(dst, a.Count)
}

// DecodeNodeAppend decodes a NODE_APPEND body and validates that exactly
// Count records fill the run (iterate it with NextRecord).
func DecodeNodeAppend(body []byte) (NodeAppend, []byte, error) {
	d := decoder{b: body, frame: TypeNodeAppend}
	a := NodeAppend{Streamlet: d.u64("streamlet"), Epoch: d.u64("epoch"), Count: d.u32("count")}
	run := d.rest()
	if d.err == nil {
		d.err = checkRun(TypeNodeAppend, run, a.Count)
	}
	if d.err != nil {
		return NodeAppend{}, nil, d.err
	}
	return a, run, nil
}

// checkRun validates that run holds exactly count >= 1 records (extended
// records included, their bodies checked by ParseExt).
func checkRun(t Type, run []byte, count uint32) error {
	if count == 0 {
		return fmt.Errorf("%w: %v: count 0", ErrMalformed, t)
	}
	rest := run
	for i := uint32(0); i < count; i++ {
		body, ext, r, ok := NextRecordExt(rest)
		if !ok {
			return fmt.Errorf("%w: %v: record %d of %d overruns the body", ErrMalformed, t, i, count)
		}
		if ext {
			if _, err := ParseExt(body, t); err != nil {
				return fmt.Errorf("record %d of %d: %w", i, count, err)
			}
		}
		rest = r
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %v: %d bytes after record %d", ErrMalformed, t, len(rest), count)
	}
	return nil
}

// NodeAppended is the body of NODE_APPENDED: u8 status, u32 done (records
// handled, a prefix of the request's), u64 first (position of the first
// appended record; 0 when none was appended), then, only when some of the
// done records were deduplicated (PROTOCOL.md 2.14) instead of appended,
// u32 n (>= 1) and n x (u32 index, u64 position): the index of each such
// record in the request and the position of the message first stored with
// its id, in increasing index order. The appended records have the
// positions first, first+1, ... in request order.
type NodeAppended struct {
	Status uint8
	Done   uint32
	First  uint64
	Dups   []NodeDup
}

// NodeDup is a deduplicated record of a NODE_APPEND.
type NodeDup struct {
	Index    uint32
	Position uint64
}

// AppendNodeAppended appends a whole NODE_APPENDED frame.
func AppendNodeAppended(dst []byte, id uint32, a NodeAppended) []byte {
	n := 1 + 4 + 8
	if len(a.Dups) > 0 {
		n += 4 + 12*len(a.Dups)
	}
	dst = AppendHeader(dst, TypeNodeAppended, 0, id, n)
	dst = append(dst, a.Status)
	dst = binary.BigEndian.AppendUint32(dst, a.Done)
	dst = binary.BigEndian.AppendUint64(dst, a.First)
	if len(a.Dups) > 0 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(a.Dups)))
		for _, d := range a.Dups {
			dst = binary.BigEndian.AppendUint32(dst, d.Index)
			dst = binary.BigEndian.AppendUint64(dst, d.Position)
		}
	}
	return dst
}

// DecodeNodeAppended decodes a NODE_APPENDED body. The dup count is
// checked against the body length before the list is allocated; the dup
// indexes must increase and be below done.
func DecodeNodeAppended(body []byte) (NodeAppended, error) {
	d := decoder{b: body, frame: TypeNodeAppended}
	a := NodeAppended{Status: d.u8("status"), Done: d.u32("done"), First: d.u64("first")}
	if d.err == nil && a.Status > nodeStatusMax {
		d.failf("unknown status %d", a.Status)
	}
	if d.err == nil && len(body) > 13 {
		n := d.u32("dup count")
		switch {
		case d.err != nil:
		case n == 0:
			d.failf("dup count 0")
		case uint64(len(body)-d.off) != 12*uint64(n):
			d.failf("%d dups need %d bytes, body has %d", n, 12*uint64(n), len(body)-d.off)
		}
		if d.err == nil {
			a.Dups = make([]NodeDup, n)
			for i := range a.Dups {
				a.Dups[i] = NodeDup{Index: d.u32("dup index"), Position: d.u64("dup position")}
				if a.Dups[i].Index >= a.Done || (i > 0 && a.Dups[i].Index <= a.Dups[i-1].Index) {
					d.failf("dup index %d out of order or not below done %d", a.Dups[i].Index, a.Done)
					break
				}
			}
		}
	}
	if err := d.exact(); err != nil {
		return NodeAppended{}, err
	}
	return a, nil
}

// Feed flags.
const (
	FeedSealed uint8 = 1 // the streamlet is sealed after these records
	FeedGone   uint8 = 2 // the host does not hold the streamlet (freed or never hosted)
)

// NodeFeed is a NODE_FEED body without its stamps and records:
//
//	u64 streamlet, u32 start (index of the first record), u8 flags,
//	u32 count, count x u64 stamps (unix ns), count x (u32 len, payload)
//
// count may be 0 (a bare SEALED or GONE notice).
type NodeFeed struct {
	Streamlet uint64
	Start     uint32
	Flags     uint8
	Count     uint32
}

// NodeFeedPrefixLen is the size of NODE_FEED's fixed prefix.
const NodeFeedPrefixLen = 8 + 4 + 1 + 4

// AppendNodeFeedHeader appends the header, the prefix and the stamps of a
// NODE_FEED whose record run (recordsLen bytes, len(stamps) records)
// follows separately.
func AppendNodeFeedHeader(dst []byte, f NodeFeed, stamps []int64, recordsLen int) []byte {
	mustFit(TypeNodeFeed, "count", len(stamps), math.MaxUint32)
	dst = AppendHeader(dst, TypeNodeFeed, 0, 0, NodeFeedPrefixLen+8*len(stamps)+recordsLen)
	dst = binary.BigEndian.AppendUint64(dst, f.Streamlet)
	dst = binary.BigEndian.AppendUint32(dst, f.Start)
	dst = append(dst, f.Flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(stamps)))
	for _, s := range stamps {
		dst = binary.BigEndian.AppendUint64(dst, uint64(s))
	}
	return dst
}

// DecodeNodeFeed decodes a NODE_FEED body. stamps holds Count u64 stamps
// (read them with FeedStamp) and run exactly Count records; both alias body.
func DecodeNodeFeed(body []byte) (f NodeFeed, stamps, run []byte, err error) {
	d := decoder{b: body, frame: TypeNodeFeed}
	f = NodeFeed{Streamlet: d.u64("streamlet"), Start: d.u32("start"), Flags: d.u8("flags"), Count: d.u32("count")}
	if d.err == nil && f.Flags&^(FeedSealed|FeedGone) != 0 {
		d.failf("unknown flags 0x%02x", f.Flags)
	}
	if d.err == nil && uint64(f.Count)*8 > uint64(len(body)-d.off) {
		d.failf("%d stamps overrun the body", f.Count)
	}
	if d.err != nil {
		return NodeFeed{}, nil, nil, d.err
	}
	stamps = d.bytes(int(f.Count)*8, "stamps")
	run = d.rest()
	if f.Count == 0 {
		if len(run) != 0 {
			d.failf("%d bytes after an empty feed", len(run))
		}
	} else if d.err == nil {
		d.err = checkRun(TypeNodeFeed, run, f.Count)
	}
	if d.err != nil {
		return NodeFeed{}, nil, nil, d.err
	}
	return f, stamps, run, nil
}

// FeedStamp returns stamp i of a stamps slice from DecodeNodeFeed.
func FeedStamp(stamps []byte, i int) int64 {
	return int64(binary.BigEndian.Uint64(stamps[8*i:]))
}

// Replicate flags.
const ReplicateSealed uint8 = 1 // the orderer sealed the streamlet: it ends after these records, all committed

// NodeReplicate is a NODE_REPLICATE body without its stamps and records:
//
//	u64 streamlet, u64 epoch, u32 start (index of the first record),
//	u32 commit (records every replica holds, the visible count), u8 flags,
//	u32 count, count x u64 stamps (unix ns), count x (u32 len, payload)
//
// count may be 0 (a commit or seal notice).
type NodeReplicate struct {
	Streamlet uint64
	Epoch     uint64
	Start     uint32
	Commit    uint32
	Flags     uint8
	Count     uint32
}

// NodeReplicatePrefixLen is the size of NODE_REPLICATE's fixed prefix.
const NodeReplicatePrefixLen = 8 + 8 + 4 + 4 + 1 + 4

// AppendNodeReplicateHeader appends the header, the prefix and the stamps
// of a NODE_REPLICATE whose record run (recordsLen bytes, len(stamps)
// records) the caller appends next.
func AppendNodeReplicateHeader(dst []byte, r NodeReplicate, stamps []int64, recordsLen int) []byte {
	mustFit(TypeNodeReplicate, "count", len(stamps), math.MaxUint32)
	dst = AppendHeader(dst, TypeNodeReplicate, 0, 0, NodeReplicatePrefixLen+8*len(stamps)+recordsLen)
	dst = binary.BigEndian.AppendUint64(dst, r.Streamlet)
	dst = binary.BigEndian.AppendUint64(dst, r.Epoch)
	dst = binary.BigEndian.AppendUint32(dst, r.Start)
	dst = binary.BigEndian.AppendUint32(dst, r.Commit)
	dst = append(dst, r.Flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(stamps)))
	for _, s := range stamps {
		dst = binary.BigEndian.AppendUint64(dst, uint64(s))
	}
	return dst
}

// DecodeNodeReplicate decodes a NODE_REPLICATE body. stamps holds Count
// u64 stamps (read them with FeedStamp) and run exactly Count records;
// both alias body. commit may not exceed start+count.
func DecodeNodeReplicate(body []byte) (r NodeReplicate, stamps, run []byte, err error) {
	d := decoder{b: body, frame: TypeNodeReplicate}
	r = NodeReplicate{Streamlet: d.u64("streamlet"), Epoch: d.u64("epoch"), Start: d.u32("start"),
		Commit: d.u32("commit"), Flags: d.u8("flags"), Count: d.u32("count")}
	switch {
	case d.err != nil:
	case r.Flags&^ReplicateSealed != 0:
		d.failf("unknown flags 0x%02x", r.Flags)
	case uint64(r.Commit) > uint64(r.Start)+uint64(r.Count):
		d.failf("commit %d past start %d + count %d", r.Commit, r.Start, r.Count)
	case uint64(r.Count)*8 > uint64(len(body)-d.off):
		d.failf("%d stamps overrun the body", r.Count)
	}
	if d.err != nil {
		return NodeReplicate{}, nil, nil, d.err
	}
	stamps = d.bytes(int(r.Count)*8, "stamps")
	run = d.rest()
	if r.Count == 0 {
		if len(run) != 0 {
			d.failf("%d bytes after an empty replicate", len(run))
		}
	} else if d.err == nil {
		d.err = checkRun(TypeNodeReplicate, run, r.Count)
	}
	if d.err != nil {
		return NodeReplicate{}, nil, nil, d.err
	}
	return r, stamps, run, nil
}

// NodeReplicated is the body of NODE_REPLICATED: u64 streamlet, u8 status
// (NodeOK, NodeUnknown, NodeStale, NodeFenced or NodeOrder), u32 held (the
// records the follower holds, visible or not).
type NodeReplicated struct {
	Streamlet uint64
	Status    uint8
	Held      uint32
}

// AppendNodeReplicated appends a whole NODE_REPLICATED frame.
func AppendNodeReplicated(dst []byte, r NodeReplicated) []byte {
	dst = AppendHeader(dst, TypeNodeReplicated, 0, 0, 13)
	dst = binary.BigEndian.AppendUint64(dst, r.Streamlet)
	dst = append(dst, r.Status)
	return binary.BigEndian.AppendUint32(dst, r.Held)
}

// DecodeNodeReplicated decodes a NODE_REPLICATED body.
func DecodeNodeReplicated(body []byte) (NodeReplicated, error) {
	d := decoder{b: body, frame: TypeNodeReplicated}
	r := NodeReplicated{Streamlet: d.u64("streamlet"), Status: d.u8("status"), Held: d.u32("held")}
	if d.err == nil && r.Status > nodeStatusMax {
		d.failf("unknown status %d", r.Status)
	}
	if err := d.exact(); err != nil {
		return NodeReplicated{}, err
	}
	return r, nil
}

// AppendNodeRead appends a NODE_READ frame: u64 streamlet, u32 from (the
// index of the first record wanted).
func AppendNodeRead(dst []byte, streamlet uint64, from uint32) []byte {
	dst = AppendHeader(dst, TypeNodeRead, 0, 0, 12)
	dst = binary.BigEndian.AppendUint64(dst, streamlet)
	return binary.BigEndian.AppendUint32(dst, from)
}

// DecodeNodeRead decodes a NODE_READ body.
func DecodeNodeRead(body []byte) (streamlet uint64, from uint32, err error) {
	d := decoder{b: body, frame: TypeNodeRead}
	streamlet, from = d.u64("streamlet"), d.u32("from")
	return streamlet, from, d.exact()
}

// AppendNodeUnread appends a NODE_UNREAD frame: u64 streamlet.
func AppendNodeUnread(dst []byte, streamlet uint64) []byte {
	dst = AppendHeader(dst, TypeNodeUnread, 0, 0, 8)
	return binary.BigEndian.AppendUint64(dst, streamlet)
}

// DecodeNodeUnread decodes a NODE_UNREAD body.
func DecodeNodeUnread(body []byte) (uint64, error) {
	d := decoder{b: body, frame: TypeNodeUnread}
	s := d.u64("streamlet")
	return s, d.exact()
}

// NodeEnc builds the op bodies of NODE_REQUEST and NODE_RESPONSE: a
// growing byte slice with big-endian appenders. The zero value is ready.
type NodeEnc struct{ B []byte }

// U8 appends a byte.
func (e *NodeEnc) U8(v uint8) { e.B = append(e.B, v) }

// U16 appends a u16.
func (e *NodeEnc) U16(v uint16) { e.B = binary.BigEndian.AppendUint16(e.B, v) }

// U32 appends a u32.
func (e *NodeEnc) U32(v uint32) { e.B = binary.BigEndian.AppendUint32(e.B, v) }

// U64 appends a u64.
func (e *NodeEnc) U64(v uint64) { e.B = binary.BigEndian.AppendUint64(e.B, v) }

// I64 appends an i64 (two's complement).
func (e *NodeEnc) I64(v int64) { e.U64(uint64(v)) }

// Str8 appends a string of at most 255 bytes (longer panics: a programming
// error, as node names, addresses and channel names are all bounded).
func (e *NodeEnc) Str8(s string) { e.B = appendStr8(e.B, TypeNodeRequest, "string", s) }

// NodeDec reads op bodies with a sticky error, like the frame decoders:
// after the first short read every read returns zero values; check Err
// (or Done) once at the end.
type NodeDec struct{ d decoder }

// NewNodeDec returns a decoder over body; t names the frame in errors.
func NewNodeDec(t Type, body []byte) *NodeDec {
	return &NodeDec{d: decoder{b: body, frame: t}}
}

// U8 reads a byte.
func (n *NodeDec) U8() uint8 { return n.d.u8("u8") }

// U16 reads a u16.
func (n *NodeDec) U16() uint16 { return n.d.u16("u16") }

// U32 reads a u32.
func (n *NodeDec) U32() uint32 { return n.d.u32("u32") }

// U64 reads a u64.
func (n *NodeDec) U64() uint64 { return n.d.u64("u64") }

// I64 reads an i64.
func (n *NodeDec) I64() int64 { return int64(n.d.u64("i64")) }

// Str8 reads a u8-length string (a copy).
func (n *NodeDec) Str8() string { return n.d.str8("string") }

// Fail records a semantic error (e.g. a count over a limit).
func (n *NodeDec) Fail(format string, args ...any) { n.d.failf(format, args...) }

// Err returns the sticky error.
func (n *NodeDec) Err() error { return n.d.err }

// More reports whether bytes are left to read (and no error occurred).
func (n *NodeDec) More() bool { return n.d.err == nil && n.d.off < len(n.d.b) }

// Done returns the sticky error, or an error when bytes are left over.
func (n *NodeDec) Done() error { return n.d.exact() }
