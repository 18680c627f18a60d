package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// mustFit panics if n cannot be represented in a length field whose largest
// value is max. Used by encoders for values the format cannot carry at all.
func mustFit(t Type, field string, n int, max uint64) {
	if uint64(n) > max {
		panic(fmt.Sprintf("wire: %v: %s %d exceeds %d", t, field, n, max))
	}
}

// ---------------------------------------------------------------------------
// HELLO (0x01, client -> server), id = request id.
//
//	off     size  field
//	0       2     minVersion (u16)
//	2       2     maxVersion (u16)
//	4       4     features (u32)
//	8       1     nameLen (u8)
//	9       L     name
//	9+L     2     tokenLen (u16; a server refuses over MaxTokenLen)
//	11+L    T     token
//	11+L+T  ...   ignored (room for v1.x fields)

// Hello is the body of a HELLO frame. Token aliases the decoded body.
type Hello struct {
	MinVersion, MaxVersion uint16
	Features               Features
	Name                   string
	Token                  []byte
}

// AppendHello appends a whole HELLO frame. len(h.Name) must be <= MaxNameLen
// and len(h.Token) <= 65535 (a server refuses more than MaxTokenLen).
func AppendHello(dst []byte, id uint32, h Hello) []byte {
	mustFit(TypeHello, "name length", len(h.Name), MaxNameLen)
	mustFit(TypeHello, "token length", len(h.Token), math.MaxUint16)
	n := 2 + 2 + 4 + 1 + len(h.Name) + 2 + len(h.Token)
	dst = AppendHeader(dst, TypeHello, 0, id, n)
	dst = binary.BigEndian.AppendUint16(dst, h.MinVersion)
	dst = binary.BigEndian.AppendUint16(dst, h.MaxVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.Features))
	dst = append(dst, byte(len(h.Name)))
	dst = append(dst, h.Name...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.Token)))
	return append(dst, h.Token...)
}

// DecodeHello decodes a HELLO body. Trailing bytes after the token are
// ignored. It does not judge the versions or features: that is negotiation
// (see Negotiate).
func DecodeHello(body []byte) (Hello, error) {
	d := decoder{b: body, frame: TypeHello}
	var h Hello
	h.MinVersion = d.u16("minVersion")
	h.MaxVersion = d.u16("maxVersion")
	h.Features = Features(d.u32("features"))
	h.Name = string(d.bytes(int(d.u8("nameLen")), "name"))
	// A token over MaxTokenLen is well-formed (the body limit bounds it):
	// the server refuses it as credentials, with ERROR UNAUTHENTICATED.
	h.Token = d.bytes(int(d.u16("tokenLen")), "token")
	if d.err != nil {
		return Hello{}, d.err
	}
	return h, nil
}

// Negotiate returns the highest version in both [clientMin, clientMax] and
// [serverMin, serverMax], and false if the ranges do not overlap (the server
// then answers ERROR UNSUPPORTED_VERSION and closes).
func Negotiate(clientMin, clientMax, serverMin, serverMax uint16) (uint16, bool) {
	hi := min(clientMax, serverMax)
	lo := max(clientMin, serverMin)
	if lo > hi {
		return 0, false
	}
	return hi, true
}

// ---------------------------------------------------------------------------
// WELCOME (0x02, server -> client), id = the HELLO's id.
//
//	off     size  field
//	0       2     version (u16, chosen)
//	2       4     features (u32, accepted subset)
//	6       4     maxPayload (u32)
//	10      4     maxBody (u32)
//	14      2     maxSubs (u16, per connection)
//	16      4     limitMsgs (u32)
//	20      4     limitSize (u32)
//	24      4     limitLifeMs (u32)
//	28      4     ttlMs (u32)
//	32      4     pingIntervalMs (u32)
//	36      1     serverNameLen (u8)
//	37      S     serverName
//	37+S    2     nodeCount (u16)
//	39+S    ...   nodeCount x (u8 len, "host:port")
//	...     4     dedupWindowMs (u32)   only with FeatureHeaders in features
//	...     4     dedupIDs (u32)        only with FeatureHeaders in features
//	...     ...   ignored (room for v1.x fields)

// Welcome is the body of a WELCOME frame. Durations travel as whole
// milliseconds (u32): encoding truncates to the millisecond and clamps to
// [0, MaxUint32 ms].
type Welcome struct {
	Version      uint16
	Features     Features
	MaxPayload   uint32
	MaxBody      uint32 // largest body the server accepts and the largest it sends
	MaxSubs      uint16
	LimitMsgs    uint32
	LimitSize    uint32
	LimitLife    time.Duration
	TTL          time.Duration
	PingInterval time.Duration
	ServerName   string
	Nodes        []string // "host:port" of nodes a client may connect to
	// DedupWindow and DedupIDs are the server's deduplication of message
	// ids (PROTOCOL.md 2.2, 2.14): how long an id is remembered per
	// channel, and at most how many. They travel only when Features has
	// FeatureHeaders (and AppendWelcome leaves them out when both are 0);
	// 0 when absent (a server that does not announce them).
	DedupWindow time.Duration
	DedupIDs    uint32
}

// welcomeDedupLen is the size of the dedup fields (with FeatureHeaders).
const welcomeDedupLen = 4 + 4

// welcomeFixedLen is the WELCOME body size without the server name and nodes.
const welcomeFixedLen = 2 + 4 + 4 + 4 + 2 + 4*5 + 1 + 2

func millis(d time.Duration) uint32 {
	ms := d / time.Millisecond
	switch {
	case ms < 0:
		return 0
	case ms > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(ms)
}

// AppendWelcome appends a whole WELCOME frame. len(w.ServerName) and each
// node's length must be <= 255, and len(w.Nodes) <= 65535. A client reads
// WELCOME before it knows the server's limit, so a server should keep the
// body within MinMaxBody.
func AppendWelcome(dst []byte, id uint32, w Welcome) []byte {
	mustFit(TypeWelcome, "server name length", len(w.ServerName), MaxNameLen)
	mustFit(TypeWelcome, "node count", len(w.Nodes), math.MaxUint16)
	n := welcomeFixedLen + len(w.ServerName)
	for _, node := range w.Nodes {
		mustFit(TypeWelcome, "node address length", len(node), math.MaxUint8)
		n += 1 + len(node)
	}
	dd := w.Features&FeatureHeaders != 0 && (w.DedupWindow > 0 || w.DedupIDs > 0)
	if dd {
		n += welcomeDedupLen
	}
	dst = AppendHeader(dst, TypeWelcome, 0, id, n)
	dst = binary.BigEndian.AppendUint16(dst, w.Version)
	dst = binary.BigEndian.AppendUint32(dst, uint32(w.Features))
	dst = binary.BigEndian.AppendUint32(dst, w.MaxPayload)
	dst = binary.BigEndian.AppendUint32(dst, w.MaxBody)
	dst = binary.BigEndian.AppendUint16(dst, w.MaxSubs)
	dst = binary.BigEndian.AppendUint32(dst, w.LimitMsgs)
	dst = binary.BigEndian.AppendUint32(dst, w.LimitSize)
	dst = binary.BigEndian.AppendUint32(dst, millis(w.LimitLife))
	dst = binary.BigEndian.AppendUint32(dst, millis(w.TTL))
	dst = binary.BigEndian.AppendUint32(dst, millis(w.PingInterval))
	dst = append(dst, byte(len(w.ServerName)))
	dst = append(dst, w.ServerName...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(w.Nodes)))
	for _, node := range w.Nodes {
		dst = append(dst, byte(len(node)))
		dst = append(dst, node...)
	}
	if dd {
		dst = binary.BigEndian.AppendUint32(dst, millis(w.DedupWindow))
		dst = binary.BigEndian.AppendUint32(dst, w.DedupIDs)
	}
	return dst
}

// DecodeWelcome decodes a WELCOME body. With FeatureHeaders the dedup
// fields follow the node list (read when all 8 bytes are there: a server
// that does not announce them leaves them 0); other trailing bytes are
// ignored. The node count is checked against the bytes present before the
// node slice is allocated.
func DecodeWelcome(body []byte) (Welcome, error) {
	d := decoder{b: body, frame: TypeWelcome}
	var w Welcome
	w.Version = d.u16("version")
	w.Features = Features(d.u32("features"))
	w.MaxPayload = d.u32("maxPayload")
	w.MaxBody = d.u32("maxBody")
	w.MaxSubs = d.u16("maxSubs")
	w.LimitMsgs = d.u32("limitMsgs")
	w.LimitSize = d.u32("limitSize")
	w.LimitLife = time.Duration(d.u32("limitLifeMs")) * time.Millisecond
	w.TTL = time.Duration(d.u32("ttlMs")) * time.Millisecond
	w.PingInterval = time.Duration(d.u32("pingIntervalMs")) * time.Millisecond
	w.ServerName = string(d.bytes(int(d.u8("serverNameLen")), "serverName"))
	count := int(d.u16("nodeCount"))
	// Every node takes at least its length byte: refuse a count the body
	// cannot hold before allocating for it.
	if d.need(count, "node list") && count > 0 {
		w.Nodes = make([]string, 0, count)
		for i := 0; i < count && d.err == nil; i++ {
			w.Nodes = append(w.Nodes, string(d.bytes(int(d.u8("node address length")), "node address")))
		}
	}
	if d.err == nil && w.Features&FeatureHeaders != 0 && len(d.b)-d.off >= welcomeDedupLen {
		w.DedupWindow = time.Duration(d.u32("dedupWindowMs")) * time.Millisecond
		w.DedupIDs = d.u32("dedupIDs")
	}
	if d.err != nil {
		return Welcome{}, d.err
	}
	return w, nil
}

// ---------------------------------------------------------------------------
// PUBLISH (0x03, client -> server), id = request id, flags: FlagAck.
//
//	off   size  field
//	0     1     channelLen (u8, 1..255)
//	1     C     channel
//	1+C   ...   payload (the rest of the body, may be empty)

// AppendPublish appends a whole PUBLISH frame. len(channel) must be <= 255
// (validate names with ValidChannel first). Set FlagAck in flags to get a
// PUBACK for id.
func AppendPublish(dst []byte, id uint32, flags Flags, channel string, payload []byte) []byte {
	mustFit(TypePublish, "channel length", len(channel), MaxChannelLen)
	dst = AppendHeader(dst, TypePublish, flags, id, 1+len(channel)+len(payload))
	dst = append(dst, byte(len(channel)))
	dst = append(dst, channel...)
	return append(dst, payload...)
}

// AppendPublishExt appends a whole PUBLISH frame whose message carries a
// message id and/or headers (FlagExt is added to flags). With neither it is
// AppendPublish. id and hs must pass CheckMsgID and CheckHeaders. Only for a
// connection that negotiated FeatureHeaders.
func AppendPublishExt(dst []byte, id uint32, flags Flags, channel string, msgID []byte, hs []HeaderField, payload []byte) []byte {
	if len(msgID) == 0 && len(hs) == 0 {
		return AppendPublish(dst, id, flags, channel, payload)
	}
	mustFit(TypePublish, "channel length", len(channel), MaxChannelLen)
	dst = AppendHeader(dst, TypePublish, flags|FlagExt, id, 1+len(channel)+ExtLen(msgID, hs, len(payload)))
	dst = append(dst, byte(len(channel)))
	dst = append(dst, channel...)
	return AppendExt(dst, msgID, hs, payload)
}

// DecodePublish decodes a PUBLISH body into the channel and payload, both
// capacity-capped sub-slices of body. It does not allocate. The channel's
// syntax is not checked here (that is ValidChannel, a non-fatal error).
// When the frame has FlagExt, payload is an extended record body: decode it
// with ParseExt.
func DecodePublish(body []byte) (channel, payload []byte, err error) {
	d := decoder{b: body, frame: TypePublish}
	cl := d.u8("channelLen")
	if d.err == nil && cl == 0 {
		d.failf("empty channel")
	}
	if d.err == nil && int(cl) > len(body)-1 {
		d.failf("channel length %d exceeds body (%d bytes)", cl, len(body))
	}
	channel = d.bytes(int(cl), "channel")
	payload = d.rest()
	if d.err != nil {
		return nil, nil, d.err
	}
	return channel, payload, nil
}

// ---------------------------------------------------------------------------
// PUBACK (0x04, server -> client), id = 0.
//
//	off      size  field
//	0        2     count (u16, >= 1)
//	2+12i    4     request id of ack i (u32)
//	6+12i    8     position of ack i (u64)
//
// The body length is exactly 2 + 12*count.

// Ack acknowledges one PUBLISH: its request id and the position it got.
type Ack struct {
	ID       uint32
	Position uint64
}

// MaxAcks is the largest number of acks one PUBACK can carry.
const MaxAcks = math.MaxUint16

// AppendPubAck appends a whole PUBACK frame. len(acks) must be <= MaxAcks;
// it should be >= 1 (a receiver rejects an empty PUBACK).
func AppendPubAck(dst []byte, acks []Ack) []byte {
	mustFit(TypePubAck, "ack count", len(acks), MaxAcks)
	dst = AppendHeader(dst, TypePubAck, 0, 0, 2+12*len(acks))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(acks)))
	for _, a := range acks {
		dst = binary.BigEndian.AppendUint32(dst, a.ID)
		dst = binary.BigEndian.AppendUint64(dst, a.Position)
	}
	return dst
}

// DecodePubAck decodes a PUBACK body, appending the acks to dst. It checks
// the body length against the count before appending anything, so it does
// not allocate when dst has capacity for count more acks.
func DecodePubAck(body []byte, dst []Ack) ([]Ack, error) {
	d := decoder{b: body, frame: TypePubAck}
	count := int(d.u16("count"))
	switch {
	case d.err != nil:
	case count == 0:
		d.failf("ack count 0")
	case len(body) != 2+12*count:
		d.failf("body length %d, want %d for %d acks", len(body), 2+12*count, count)
	}
	if d.err != nil {
		return dst, d.err
	}
	for range count {
		id := d.u32("request id")
		dst = append(dst, Ack{ID: id, Position: d.u64("position")})
	}
	return dst, nil
}

// ---------------------------------------------------------------------------
// SUBSCRIBE (0x05, client -> server), id = request id. Exact length.
//
//	off   size  field
//	0     4     subID (u32)
//	4     1     startKind (u8, 0..4)
//	5     8     startArg (u64)
//	13    8     epoch (u64, 0 = unknown)
//	21    1     channelLen (u8, 1..255)
//	22    C     channel

// StartKind says where a subscription starts.
type StartKind uint8

// Start kinds. The meaning of Subscribe.Arg depends on the kind.
const (
	StartLive     StartKind = 0 // at the live edge; Arg unused
	StartEarliest StartKind = 1 // at the oldest retained message; Arg unused
	StartPosition StartKind = 2 // at position Arg
	StartLast     StartKind = 3 // Arg messages back from the live edge
	StartSince    StartKind = 4 // Arg milliseconds back from now
)

var startNames = [...]string{"live", "earliest", "position", "last", "since"}

// String returns "live", "earliest", "position", "last" or "since", or
// "StartKind(N)" for an undefined kind.
func (k StartKind) String() string {
	if k.Valid() {
		return startNames[k]
	}
	return fmt.Sprintf("StartKind(%d)", uint8(k))
}

// Valid reports whether k is a start kind defined by v1.
func (k StartKind) Valid() bool { return k <= StartSince }

// Subscribe is the body of a SUBSCRIBE frame. Channel aliases the decoded body.
type Subscribe struct {
	SubID   uint32
	Start   StartKind
	Arg     uint64
	Epoch   uint64
	Channel []byte
}

const subscribeFixedLen = 4 + 1 + 8 + 8 + 1

// AppendSubscribe appends a whole SUBSCRIBE frame. len(s.Channel) must be
// <= 255.
func AppendSubscribe(dst []byte, id uint32, s Subscribe) []byte {
	mustFit(TypeSubscribe, "channel length", len(s.Channel), MaxChannelLen)
	dst = AppendHeader(dst, TypeSubscribe, 0, id, subscribeFixedLen+len(s.Channel))
	dst = binary.BigEndian.AppendUint32(dst, s.SubID)
	dst = append(dst, byte(s.Start))
	dst = binary.BigEndian.AppendUint64(dst, s.Arg)
	dst = binary.BigEndian.AppendUint64(dst, s.Epoch)
	dst = append(dst, byte(len(s.Channel)))
	return append(dst, s.Channel...)
}

// DecodeSubscribe decodes a SUBSCRIBE body. An undefined start kind, an empty
// channel or a length mismatch is malformed. It does not allocate.
func DecodeSubscribe(body []byte) (Subscribe, error) {
	d := decoder{b: body, frame: TypeSubscribe}
	var s Subscribe
	s.SubID = d.u32("subID")
	s.Start = StartKind(d.u8("startKind"))
	if d.err == nil && !s.Start.Valid() {
		d.failf("start kind %d undefined", uint8(s.Start))
	}
	s.Arg = d.u64("startArg")
	s.Epoch = d.u64("epoch")
	cl := d.u8("channelLen")
	if d.err == nil && cl == 0 {
		d.failf("empty channel")
	}
	s.Channel = d.bytes(int(cl), "channel")
	if err := d.exact(); err != nil {
		return Subscribe{}, err
	}
	return s, nil
}

// ---------------------------------------------------------------------------
// SUBSCRIBED (0x06, server -> client), id = the SUBSCRIBE's id.
//
//	off   size  field
//	0     4     subID (u32)
//	4     8     first (u64): position of the first message to be delivered
//	12    8     earliest (u64): earliest retained position (next if none)
//	20    8     next (u64): position the next publish will get
//	28    8     epoch (u64)
//	36    ...   ignored (room for v1.x fields)

// Subscribed is the body of a SUBSCRIBED frame.
type Subscribed struct {
	SubID                        uint32
	First, Earliest, Next, Epoch uint64
}

const subscribedLen = 4 + 8*4

// AppendSubscribed appends a whole SUBSCRIBED frame.
func AppendSubscribed(dst []byte, id uint32, s Subscribed) []byte {
	dst = AppendHeader(dst, TypeSubscribed, 0, id, subscribedLen)
	dst = binary.BigEndian.AppendUint32(dst, s.SubID)
	dst = binary.BigEndian.AppendUint64(dst, s.First)
	dst = binary.BigEndian.AppendUint64(dst, s.Earliest)
	dst = binary.BigEndian.AppendUint64(dst, s.Next)
	return binary.BigEndian.AppendUint64(dst, s.Epoch)
}

// DecodeSubscribed decodes a SUBSCRIBED body; trailing bytes are ignored.
func DecodeSubscribed(body []byte) (Subscribed, error) {
	d := decoder{b: body, frame: TypeSubscribed}
	var s Subscribed
	s.SubID = d.u32("subID")
	s.First = d.u64("first")
	s.Earliest = d.u64("earliest")
	s.Next = d.u64("next")
	s.Epoch = d.u64("epoch")
	if d.err != nil {
		return Subscribed{}, d.err
	}
	return s, nil
}

// ---------------------------------------------------------------------------
// UNSUBSCRIBE (0x07, client -> server) and UNSUBSCRIBED (0x0E, server ->
// client), id = request id / the UNSUBSCRIBE's id. Exact length.
//
//	off   size  field
//	0     4     subID (u32)

func appendSubID(dst []byte, t Type, id, subID uint32) []byte {
	dst = AppendHeader(dst, t, 0, id, 4)
	return binary.BigEndian.AppendUint32(dst, subID)
}

func decodeSubID(t Type, body []byte) (uint32, error) {
	d := decoder{b: body, frame: t}
	v := d.u32("subID")
	if err := d.exact(); err != nil {
		return 0, err
	}
	return v, nil
}

// AppendUnsubscribe appends a whole UNSUBSCRIBE frame for subID.
func AppendUnsubscribe(dst []byte, id, subID uint32) []byte {
	return appendSubID(dst, TypeUnsubscribe, id, subID)
}

// DecodeUnsubscribe decodes an UNSUBSCRIBE body into its subscription id.
func DecodeUnsubscribe(body []byte) (uint32, error) { return decodeSubID(TypeUnsubscribe, body) }

// AppendUnsubscribed appends a whole UNSUBSCRIBED frame for subID. No frame
// for subID may follow it on the connection.
func AppendUnsubscribed(dst []byte, id, subID uint32) []byte {
	return appendSubID(dst, TypeUnsubscribed, id, subID)
}

// DecodeUnsubscribed decodes an UNSUBSCRIBED body into its subscription id.
func DecodeUnsubscribed(body []byte) (uint32, error) { return decodeSubID(TypeUnsubscribed, body) }

// ---------------------------------------------------------------------------
// GAP (0x09, server -> client), id = subscription id. Exact length.
//
//	off   size  field
//	0     8     from (u64)
//	8     8     to (u64, inclusive, from <= to)
//	16    1     reason (u8: 1 expired, 2 slow, 3 lost)

// GapReason says why a range of positions will not be delivered.
type GapReason uint8

// Gap reasons.
const (
	GapExpired GapReason = 1 // the range's streamlets reached their TTL
	GapSlow    GapReason = 2 // the subscriber fell behind and was fast-forwarded
	GapLost    GapReason = 3 // the range was lost with a hosting node
)

// String returns "expired", "slow" or "lost", or "GapReason(N)".
func (r GapReason) String() string {
	switch r {
	case GapExpired:
		return "expired"
	case GapSlow:
		return "slow"
	case GapLost:
		return "lost"
	}
	return fmt.Sprintf("GapReason(%d)", uint8(r))
}

// Valid reports whether r is a gap reason defined by v1.
func (r GapReason) Valid() bool { return r >= GapExpired && r <= GapLost }

// Gap is the body of a GAP frame: positions From..To (inclusive) of the
// subscription will not be delivered.
type Gap struct {
	From, To uint64
	Reason   GapReason
}

const gapLen = 8 + 8 + 1

// AppendGap appends a whole GAP frame for subscription subID.
func AppendGap(dst []byte, subID uint32, g Gap) []byte {
	dst = AppendHeader(dst, TypeGap, 0, subID, gapLen)
	dst = binary.BigEndian.AppendUint64(dst, g.From)
	dst = binary.BigEndian.AppendUint64(dst, g.To)
	return append(dst, byte(g.Reason))
}

// DecodeGap decodes a GAP body. from > to or an undefined reason is malformed.
func DecodeGap(body []byte) (Gap, error) {
	d := decoder{b: body, frame: TypeGap}
	var g Gap
	g.From = d.u64("from")
	g.To = d.u64("to")
	g.Reason = GapReason(d.u8("reason"))
	if d.err == nil && g.From > g.To {
		d.failf("range from %d > to %d", g.From, g.To)
	}
	if d.err == nil && !g.Reason.Valid() {
		d.failf("reason %d undefined", uint8(g.Reason))
	}
	if err := d.exact(); err != nil {
		return Gap{}, err
	}
	return g, nil
}

// ---------------------------------------------------------------------------
// PING (0x0A) and PONG (0x0B), both directions, empty body. A PONG echoes the
// PING's id.

// AppendPing appends a whole PING frame.
func AppendPing(dst []byte, id uint32) []byte { return AppendHeader(dst, TypePing, 0, id, 0) }

// AppendPong appends a whole PONG frame; id is the id of the PING it answers.
func AppendPong(dst []byte, id uint32) []byte { return AppendHeader(dst, TypePong, 0, id, 0) }

// DecodePing checks a PING body: it must be empty.
func DecodePing(body []byte) error { return decodeEmpty(TypePing, body) }

// DecodePong checks a PONG body: it must be empty.
func DecodePong(body []byte) error { return decodeEmpty(TypePong, body) }

func decodeEmpty(t Type, body []byte) error {
	d := decoder{b: body, frame: t}
	return d.exact()
}
