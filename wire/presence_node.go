package wire

import "encoding/binary"

// Node operations of services beside the cluster's own roles start at
// OpServiceFirst (PROTOCOL.md 9.5): their numbers never collide with the
// roles' ops, however many those become.
const (
	OpServiceFirst NodeOp = 32
	// OpPresenceSync carries one node's presence (its local members and
	// counts per channel) to another node (PROTOCOL.md 9.5, PRESENCE_SYNC).
	OpPresenceSync NodeOp = 32
	opServiceMax          = OpPresenceSync
)

// validOp reports whether op is a defined node operation.
func validOp(op NodeOp) bool {
	return (op >= 1 && op <= opMax) || (op >= OpServiceFirst && op <= opServiceMax)
}

// PRESENCE_SYNC request body (after the op byte):
//
//	off   size  field
//	0     8     incarnation (u64): the sender's presence state's incarnation
//	8     8     seq (u64): this push's number in the sender's stream to the receiver
//	16    1     flags (u8): 0x01 BEGIN, 0x02 END, 0x04 WANT; other bits are BAD_OP
//	17    4     count (u32): items
//	21    ...   count x item
//
// Item: u8 kind, str8 channel (1..255), then by kind
//
//	1 COUNTS  u32 subscribers, u32 publishers, u32 members (the sender's local counts, absolute)
//	2 JOIN    str8 clientID, u64 conn, u16 infoLen (0..4096), info
//	3 LEAVE   str8 clientID, u64 conn
//
// Result: u8 status, 0 APPLIED or 1 RESYNC (send a snapshot, from BEGIN);
// u64 incarnation, the receiver's (a sender learns from it that the
// receiver restarted and lost what it was sent).

// Flags of a PRESENCE_SYNC push.
const (
	// SyncBegin starts a snapshot: the items of this push and of the
	// pushes up to the one with SyncEnd replace, together, everything the
	// receiver holds from the sender.
	SyncBegin uint8 = 0x01
	// SyncEnd ends a snapshot.
	SyncEnd uint8 = 0x02
	// SyncWant, with SyncBegin: the sender holds nothing from the
	// receiver (it restarted, or dropped the receiver as dead): a
	// receiver that pushed to it before sends it a snapshot.
	SyncWant uint8 = 0x04
)

// Results of a PRESENCE_SYNC push.
const (
	SyncApplied uint8 = 0 // applied (or a repeat of the last push, ignored)
	SyncResync  uint8 = 1 // not applied: the receiver needs a snapshot
)

// Kinds of PRESENCE_SYNC items.
const (
	SyncCounts uint8 = 1
	SyncJoin   uint8 = 2
	SyncLeave  uint8 = 3
)

// PresenceSync is a PRESENCE_SYNC push without its items.
type PresenceSync struct {
	Incarnation uint64
	Seq         uint64
	Flags       uint8
	Count       uint32
}

// PresenceSyncPrefixLen is the size of a push before its items.
const PresenceSyncPrefixLen = 8 + 8 + 1 + 4

// SyncItem is one item of a push; decoded items alias the body.
type SyncItem struct {
	Kind     uint8
	Channel  []byte
	Counts   Occupancy // SyncCounts
	ClientID []byte    // SyncJoin, SyncLeave
	Conn     uint64    // SyncJoin, SyncLeave
	Info     []byte    // SyncJoin
}

// syncItemMinLen is the smallest encoded item (a LEAVE of a one-byte
// channel with an empty client id).
const syncItemMinLen = 1 + 2 + 1 + 8

// SyncItemLen returns the encoded size of it.
func SyncItemLen(it *SyncItem) int {
	n := 1 + 1 + len(it.Channel)
	switch it.Kind {
	case SyncCounts:
		n += OccupancyLen
	case SyncJoin:
		n += 1 + len(it.ClientID) + 8 + 2 + len(it.Info)
	default:
		n += 1 + len(it.ClientID) + 8
	}
	return n
}

// AppendSyncItem appends it's encoding. Its kind must be defined and its
// lengths fit (channel 1..255, client id at most 255, info at most
// MaxClientInfoLen).
func AppendSyncItem(dst []byte, it *SyncItem) []byte {
	const t = TypeNodeRequest
	mustFit(t, "channel length", len(it.Channel), MaxChannelLen)
	mustFit(t, "client id length", len(it.ClientID), MaxClientIDLen)
	mustFit(t, "client info length", len(it.Info), MaxClientInfoLen)
	if it.Kind < SyncCounts || it.Kind > SyncLeave || len(it.Channel) == 0 {
		panic("wire: a presence sync item needs a defined kind and a channel")
	}
	dst = append(dst, it.Kind, byte(len(it.Channel)))
	dst = append(dst, it.Channel...)
	if it.Kind == SyncCounts {
		return appendOccupancy(dst, it.Counts)
	}
	dst = append(dst, byte(len(it.ClientID)))
	dst = append(dst, it.ClientID...)
	dst = binary.BigEndian.AppendUint64(dst, it.Conn)
	if it.Kind == SyncJoin {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(it.Info)))
		dst = append(dst, it.Info...)
	}
	return dst
}

// AppendPresenceSync appends a push's body (the op body of a
// NODE_REQUEST with OpPresenceSync): its prefix, then items, the
// concatenation of p.Count items made by AppendSyncItem.
func AppendPresenceSync(dst []byte, p PresenceSync, items []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, p.Incarnation)
	dst = binary.BigEndian.AppendUint64(dst, p.Seq)
	dst = append(dst, p.Flags)
	dst = binary.BigEndian.AppendUint32(dst, p.Count)
	return append(dst, items...)
}

// DecodePresenceSync decodes a push's body, appending its items (aliasing
// body) to dst. Any error is a bad op body (the receiver answers BAD_OP):
// undefined flags or kinds, an empty channel, an info over
// MaxClientInfoLen, fewer or more bytes than count items. The count is
// checked against the bytes present before anything is appended.
func DecodePresenceSync(body []byte, dst []SyncItem) (PresenceSync, []SyncItem, error) {
	d := decoder{b: body, frame: TypeNodeRequest}
	p := PresenceSync{Incarnation: d.u64("incarnation"), Seq: d.u64("seq"), Flags: d.u8("flags"), Count: d.u32("count")}
	switch {
	case d.err != nil:
	case p.Flags&^(SyncBegin|SyncEnd|SyncWant) != 0:
		d.failf("presence sync: undefined flags 0x%02x", p.Flags)
	case uint64(p.Count) > uint64((len(body)-d.off)/syncItemMinLen):
		d.failf("presence sync: %d items cannot fit in %d bytes", p.Count, len(body)-d.off)
	}
	if d.err != nil {
		return PresenceSync{}, dst, d.err
	}
	start := len(dst)
	for i := uint32(0); i < p.Count && d.err == nil; i++ {
		dst = append(dst, d.syncItem(i))
	}
	if err := d.exact(); err != nil {
		clear(dst[start:])
		return PresenceSync{}, dst[:start], err
	}
	return p, dst, nil
}

func (d *decoder) syncItem(i uint32) SyncItem {
	it := SyncItem{Kind: d.u8("kind")}
	if d.err == nil && (it.Kind < SyncCounts || it.Kind > SyncLeave) {
		d.failf("presence sync: item %d: kind %d undefined", i, it.Kind)
	}
	cl := d.u8("channelLen")
	if d.err == nil && cl == 0 {
		d.failf("presence sync: item %d: empty channel", i)
	}
	it.Channel = d.bytes(int(cl), "channel")
	if it.Kind == SyncCounts {
		it.Counts = d.occupancy()
		return it
	}
	it.ClientID = d.bytes(int(d.u8("clientIDLen")), "clientID")
	it.Conn = d.u64("conn")
	if it.Kind == SyncJoin {
		il := d.u16("infoLen")
		if d.err == nil && int(il) > MaxClientInfoLen {
			d.failf("presence sync: item %d: client info length %d exceeds %d", i, il, MaxClientInfoLen)
		}
		it.Info = d.bytes(int(il), "info")
	}
	return it
}

// AppendSyncResult appends the result of a push: SyncApplied or
// SyncResync, and the receiver's incarnation.
func AppendSyncResult(dst []byte, status uint8, incarnation uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, status), incarnation)
}

// DecodeSyncResult decodes a push's result; another length or an
// undefined status is malformed.
func DecodeSyncResult(body []byte) (status uint8, incarnation uint64, err error) {
	d := decoder{b: body, frame: TypeNodeResponse}
	status = d.u8("status")
	if d.err == nil && status > SyncResync {
		d.failf("presence sync: result %d undefined", status)
	}
	incarnation = d.u64("incarnation")
	if err := d.exact(); err != nil {
		return 0, 0, err
	}
	return status, incarnation, nil
}
