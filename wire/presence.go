package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Presence and occupancy (PROTOCOL.md 2.16): frames 0x12..0x15, the flags
// of SUBSCRIBE that ask for them, and FeaturePresence, without which none
// of them may be sent.

// Frame types of presence; 0x16 is reserved for presence and never sent.
const (
	TypePresence      Type = 0x12 // C->S, a query: a channel's members and occupancy
	TypePresenceState Type = 0x13 // S->C, the answer to PRESENCE (one or more frames)
	TypePresenceEvent Type = 0x14 // S->C, id = subscription id: joins and leaves
	TypeOccupancy     Type = 0x15 // S->C, id = subscription id: the channel's counts
)

// FeaturePresence is presence and occupancy: the frames above and the
// SUBSCRIBE flags FlagPresence, FlagPresenceEvents and FlagOccupancy.
const FeaturePresence Features = 1 << 4

// Flags of presence. Each is defined only on the frame type named.
const (
	// FlagPresence on SUBSCRIBE: the subscriber enters the channel's
	// presence: it is listed as a member (its client id and client info)
	// while the subscription lasts.
	FlagPresence Flags = 0x10
	// FlagPresenceEvents on SUBSCRIBE: the subscription receives
	// PRESENCE_EVENT frames (joins and leaves of members).
	FlagPresenceEvents Flags = 0x20
	// FlagOccupancy on SUBSCRIBE: the subscription receives OCCUPANCY
	// frames (the channel's counts when they change).
	FlagOccupancy Flags = 0x40
	// SubscribePresenceFlags are the SUBSCRIBE flags of FeaturePresence.
	SubscribePresenceFlags = FlagPresence | FlagPresenceEvents | FlagOccupancy

	// FlagCountsOnly on PRESENCE: answer the occupancy without members.
	FlagCountsOnly Flags = 0x01
	// FlagMore on PRESENCE_STATE: another PRESENCE_STATE answering the
	// same request follows.
	FlagMore Flags = 0x01
	// FlagPartial on PRESENCE_STATE: the answering node holds only part of
	// the channel's members (a memory limit, or a peer's state not yet
	// received); the counts are complete.
	FlagPartial Flags = 0x02
	// FlagEventsPaused on OCCUPANCY: the channel has more members than
	// the server sends events for; until an OCCUPANCY without the flag,
	// no PRESENCE_EVENT comes for it.
	FlagEventsPaused Flags = 0x01
)

// Limits of presence fields.
const (
	// MaxClientIDLen is the longest client id, in bytes.
	MaxClientIDLen = 255
	// MaxClientInfoLen is the longest client info, in bytes (it comes
	// from the client's token, which is at most MaxTokenLen).
	MaxClientInfoLen = MaxTokenLen
	// MaxPresenceMembers bounds the members of one PRESENCE_STATE and the
	// changes of one PRESENCE_EVENT (a u16 count).
	MaxPresenceMembers = math.MaxUint16
	// OccupancyLen is the body size of OCCUPANCY, and the size of the
	// counts that start a PRESENCE_STATE.
	OccupancyLen = 12
	// memberMinLen is the smallest encoded member: empty client id, a
	// one-byte node name, the connection, no info.
	memberMinLen = 1 + 1 + 1 + 8 + 2
)

// Occupancy is a channel's counts, over every node of a cluster.
type Occupancy struct {
	// Subscribers counts the channel's subscriptions (a connection
	// subscribed twice counts twice).
	Subscribers uint32
	// Publishers counts the connections that published to the channel
	// within the server's publisher window and are still open.
	Publishers uint32
	// Members counts the presence members: distinct (client id,
	// connection) pairs subscribed with FlagPresence.
	Members uint32
}

// Member is one presence member: a connection that subscribed with
// FlagPresence. Decoded members alias the frame body.
//
//	off      size  field
//	0        1     clientIDLen (u8)
//	1        I     clientID (the sub of the client's token; empty without one)
//	1+I      1     nodeLen (u8, 1..255)
//	2+I      N     node (the name of the node the client is connected to)
//	2+I+N    8     conn (u64, the connection's id on that node)
//	10+I+N   2     infoLen (u16, 0..4096)
//	12+I+N   F     info (client info from the token; opaque bytes)
type Member struct {
	ClientID []byte
	Node     []byte
	Conn     uint64
	Info     []byte
}

// MemberLen returns the encoded size of m.
func MemberLen(m *Member) int { return 1 + len(m.ClientID) + 1 + len(m.Node) + 8 + 2 + len(m.Info) }

// AppendMember appends m's encoding. Its lengths must fit (client id and
// node at most 255 bytes, info at most MaxClientInfoLen).
func AppendMember(dst []byte, t Type, m *Member) []byte {
	mustFit(t, "client id length", len(m.ClientID), MaxClientIDLen)
	mustFit(t, "node length", len(m.Node), MaxNameLen)
	mustFit(t, "client info length", len(m.Info), MaxClientInfoLen)
	dst = append(dst, byte(len(m.ClientID)))
	dst = append(dst, m.ClientID...)
	dst = append(dst, byte(len(m.Node)))
	dst = append(dst, m.Node...)
	dst = binary.BigEndian.AppendUint64(dst, m.Conn)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Info)))
	return append(dst, m.Info...)
}

func (d *decoder) member() Member {
	var m Member
	m.ClientID = d.bytes(int(d.u8("clientIDLen")), "clientID")
	nl := d.u8("nodeLen")
	if d.err == nil && nl == 0 {
		d.failf("empty node name at offset %d", d.off-1)
	}
	m.Node = d.bytes(int(nl), "node")
	m.Conn = d.u64("conn")
	il := d.u16("infoLen")
	if d.err == nil && int(il) > MaxClientInfoLen {
		d.failf("client info length %d exceeds %d", il, MaxClientInfoLen)
	}
	m.Info = d.bytes(int(il), "info")
	return m
}

func appendOccupancy(dst []byte, o Occupancy) []byte {
	dst = binary.BigEndian.AppendUint32(dst, o.Subscribers)
	dst = binary.BigEndian.AppendUint32(dst, o.Publishers)
	return binary.BigEndian.AppendUint32(dst, o.Members)
}

func (d *decoder) occupancy() Occupancy {
	return Occupancy{Subscribers: d.u32("subscribers"), Publishers: d.u32("publishers"), Members: d.u32("members")}
}

// ---------------------------------------------------------------------------
// PRESENCE (0x12, client -> server), id = request id, flags: FlagCountsOnly.
// Exact length.
//
//	off   size  field
//	0     1     channelLen (u8, 1..255)
//	1     C     channel

// AppendPresence appends a whole PRESENCE frame: the query of channel's
// members and occupancy (only the occupancy with FlagCountsOnly).
func AppendPresence(dst []byte, id uint32, flags Flags, channel string) []byte {
	mustFit(TypePresence, "channel length", len(channel), MaxChannelLen)
	dst = AppendHeader(dst, TypePresence, flags, id, 1+len(channel))
	dst = append(dst, byte(len(channel)))
	return append(dst, channel...)
}

// DecodePresence decodes a PRESENCE body into its channel (a capped
// sub-slice of body). An empty channel or a length mismatch is malformed.
func DecodePresence(body []byte) ([]byte, error) {
	d := decoder{b: body, frame: TypePresence}
	cl := d.u8("channelLen")
	if d.err == nil && cl == 0 {
		d.failf("empty channel")
	}
	ch := d.bytes(int(cl), "channel")
	if err := d.exact(); err != nil {
		return nil, err
	}
	return ch, nil
}

// ---------------------------------------------------------------------------
// PRESENCE_STATE (0x13, server -> client), id = the PRESENCE's id, flags:
// FlagMore, FlagPartial. Exact length.
//
//	off   size  field
//	0     4     subscribers (u32)
//	4     4     publishers (u32)
//	8     4     members (u32)
//	12    2     count (u16): members in this frame
//	14    ...   count x Member

// PresenceStateFixedLen is the size of a PRESENCE_STATE without members.
const PresenceStateFixedLen = OccupancyLen + 2

// AppendPresenceState appends a whole PRESENCE_STATE frame carrying
// members (at most MaxPresenceMembers; the caller keeps the body within
// the client's limit, PresenceStateFixedLen + the MemberLen of each).
func AppendPresenceState(dst []byte, id uint32, flags Flags, o Occupancy, members []Member) []byte {
	mustFit(TypePresenceState, "member count", len(members), MaxPresenceMembers)
	n := PresenceStateFixedLen
	for i := range members {
		n += MemberLen(&members[i])
	}
	dst = AppendHeader(dst, TypePresenceState, flags, id, n)
	dst = appendOccupancy(dst, o)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(members)))
	for i := range members {
		dst = AppendMember(dst, TypePresenceState, &members[i])
	}
	return dst
}

// DecodePresenceState decodes a PRESENCE_STATE body, appending its
// members (aliasing body) to dst. The count is checked against the bytes
// present before anything is appended.
func DecodePresenceState(body []byte, dst []Member) (Occupancy, []Member, error) {
	d := decoder{b: body, frame: TypePresenceState}
	o := d.occupancy()
	count := int(d.u16("count"))
	if d.err == nil && count > (len(body)-d.off)/memberMinLen {
		d.failf("%d members cannot fit in %d bytes", count, len(body)-d.off)
	}
	if d.err != nil {
		return Occupancy{}, dst, d.err
	}
	start := len(dst)
	for i := 0; i < count && d.err == nil; i++ {
		dst = append(dst, d.member())
	}
	if err := d.exact(); err != nil {
		clear(dst[start:])
		return Occupancy{}, dst[:start], err
	}
	return o, dst, nil
}

// ---------------------------------------------------------------------------
// PRESENCE_EVENT (0x14, server -> client), id = subscription id, flags 0.
// Exact length.
//
//	off   size  field
//	0     2     count (u16, >= 1)
//	2     ...   count x (u8 kind: 1 join, 2 leave; Member)

// PresenceKind says what happened to a member.
type PresenceKind uint8

// Presence change kinds.
const (
	PresenceJoin  PresenceKind = 1 // the member entered the channel's presence
	PresenceLeave PresenceKind = 2 // the member left (unsubscribed, disconnected, or its node died)
)

// String returns "join" or "leave", or "PresenceKind(N)".
func (k PresenceKind) String() string {
	switch k {
	case PresenceJoin:
		return "join"
	case PresenceLeave:
		return "leave"
	}
	return fmt.Sprintf("PresenceKind(%d)", uint8(k))
}

// PresenceChange is one join or leave.
type PresenceChange struct {
	Kind   PresenceKind
	Member Member
}

// AppendPresenceEventBody appends a PRESENCE_EVENT body of changes (1 to
// MaxPresenceMembers): a server encodes it once and sends it to every
// subscriber behind its own header (AppendHeader with TypePresenceEvent).
func AppendPresenceEventBody(dst []byte, changes []PresenceChange) []byte {
	mustFit(TypePresenceEvent, "change count", len(changes), MaxPresenceMembers)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(changes)))
	for i := range changes {
		dst = append(dst, byte(changes[i].Kind))
		dst = AppendMember(dst, TypePresenceEvent, &changes[i].Member)
	}
	return dst
}

// PresenceChangeLen returns the encoded size of one change in a
// PRESENCE_EVENT body.
func PresenceChangeLen(c *PresenceChange) int { return 1 + MemberLen(&c.Member) }

// AppendPresenceEvent appends a whole PRESENCE_EVENT frame for subID.
func AppendPresenceEvent(dst []byte, subID uint32, changes []PresenceChange) []byte {
	n := 2
	for i := range changes {
		n += PresenceChangeLen(&changes[i])
	}
	dst = AppendHeader(dst, TypePresenceEvent, 0, subID, n)
	return AppendPresenceEventBody(dst, changes)
}

// DecodePresenceEvent decodes a PRESENCE_EVENT body, appending its
// changes (aliasing body) to dst. A count of 0, an undefined kind or a
// length mismatch is malformed.
func DecodePresenceEvent(body []byte, dst []PresenceChange) ([]PresenceChange, error) {
	d := decoder{b: body, frame: TypePresenceEvent}
	count := int(d.u16("count"))
	switch {
	case d.err != nil:
	case count == 0:
		d.failf("change count 0")
	case count > (len(body)-d.off)/(1+memberMinLen):
		d.failf("%d changes cannot fit in %d bytes", count, len(body)-d.off)
	}
	if d.err != nil {
		return dst, d.err
	}
	start := len(dst)
	for i := 0; i < count && d.err == nil; i++ {
		k := PresenceKind(d.u8("kind"))
		if d.err == nil && k != PresenceJoin && k != PresenceLeave {
			d.failf("change %d: kind %d undefined", i, k)
		}
		dst = append(dst, PresenceChange{Kind: k, Member: d.member()})
	}
	if err := d.exact(); err != nil {
		clear(dst[start:])
		return dst[:start], err
	}
	return dst, nil
}

// ---------------------------------------------------------------------------
// OCCUPANCY (0x15, server -> client), id = subscription id, flags:
// FlagEventsPaused. Exact length.
//
//	off   size  field
//	0     4     subscribers (u32)
//	4     4     publishers (u32)
//	8     4     members (u32)

// AppendOccupancy appends a whole OCCUPANCY frame for subID.
func AppendOccupancy(dst []byte, subID uint32, flags Flags, o Occupancy) []byte {
	dst = AppendHeader(dst, TypeOccupancy, flags, subID, OccupancyLen)
	return appendOccupancy(dst, o)
}

// DecodeOccupancy decodes an OCCUPANCY body.
func DecodeOccupancy(body []byte) (Occupancy, error) {
	d := decoder{b: body, frame: TypeOccupancy}
	o := d.occupancy()
	if err := d.exact(); err != nil {
		return Occupancy{}, err
	}
	return o, nil
}

// AppendSubscribeFlags appends a whole SUBSCRIBE frame with header flags,
// such as the presence flags (SubscribePresenceFlags, only after
// FeaturePresence was negotiated).
func AppendSubscribeFlags(dst []byte, id uint32, flags Flags, s Subscribe) []byte {
	start := len(dst)
	dst = AppendSubscribe(dst, id, s)
	dst[start+5] = byte(flags)
	return dst
}
