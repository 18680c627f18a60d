package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Protocol constants.
const (
	// HeaderLen is the size of the frame header that precedes every body.
	HeaderLen = 10
	// Version1 is the protocol major version implemented by this package.
	Version1 uint16 = 1
	// DataPrefixLen is the size of the DATA body prefix (u64 first, u32 count)
	// that precedes the record run.
	DataPrefixLen = 12
	// MaxChannelLen is the longest channel name, in bytes.
	MaxChannelLen = 255
	// MaxTokenLen is the longest HELLO token, in bytes.
	MaxTokenLen = 4096
	// MaxNameLen is the longest client or server name, in bytes.
	MaxNameLen = 255

	// RecordHeaderLen is the size of the u32 length that precedes every
	// record payload in a DATA record run.
	RecordHeaderLen = 4
	// MinMaxBody is the smallest body limit MaxBodyFor returns: room for the
	// largest HELLO (4,362 bytes) and a WELCOME with a modest node list.
	MinMaxBody = 8192
	// publishOverhead is the largest PUBLISH body minus its payload:
	// u8 channelLen + 255 channel bytes.
	publishOverhead = 1 + MaxChannelLen
)

// Type is a frame type, the header's byte at offset 4.
type Type uint8

// Frame types of protocol v1.
const (
	TypeHello        Type = 0x01 // C->S, first frame of a connection
	TypeWelcome      Type = 0x02 // S->C, answer to HELLO
	TypePublish      Type = 0x03 // C->S
	TypePubAck       Type = 0x04 // S->C, batched publish acknowledgements
	TypeSubscribe    Type = 0x05 // C->S
	TypeSubscribed   Type = 0x06 // S->C, answer to SUBSCRIBE
	TypeUnsubscribe  Type = 0x07 // C->S
	TypeData         Type = 0x08 // S->C, id = subscription id
	TypeGap          Type = 0x09 // S->C, id = subscription id
	TypePing         Type = 0x0A // both directions
	TypePong         Type = 0x0B // both directions
	TypeError        Type = 0x0C // S->C
	TypeGoAway       Type = 0x0D // S->C
	TypeUnsubscribed Type = 0x0E // S->C, answer to UNSUBSCRIBE
	TypeRefresh      Type = 0x0F // C->S, a fresh token (FeatureRefresh)
	TypeAuthed       Type = 0x10 // S->C, the credentials' expiry (FeatureRefresh)
	TypeFData        Type = 0x11 // S->C, id = subscription id: filtered messages (FeatureFilters)

	// TypeNodeFirst and TypeNodeLast bound the range reserved for
	// node-to-node frames; a client connection never carries them.
	TypeNodeFirst Type = 0x40
	TypeNodeLast  Type = 0x7F
)

var typeNames = [...]string{
	TypeHello:        "HELLO",
	TypeWelcome:      "WELCOME",
	TypePublish:      "PUBLISH",
	TypePubAck:       "PUBACK",
	TypeSubscribe:    "SUBSCRIBE",
	TypeSubscribed:   "SUBSCRIBED",
	TypeUnsubscribe:  "UNSUBSCRIBE",
	TypeData:         "DATA",
	TypeGap:          "GAP",
	TypePing:         "PING",
	TypePong:         "PONG",
	TypeError:        "ERROR",
	TypeGoAway:       "GOAWAY",
	TypeUnsubscribed: "UNSUBSCRIBED",
	TypeRefresh:      "REFRESH",
	TypeAuthed:       "AUTHED",
	TypeFData:        "FDATA",

	TypePresence:      "PRESENCE",
	TypePresenceState: "PRESENCE_STATE",
	TypePresenceEvent: "PRESENCE_EVENT",
	TypeOccupancy:     "OCCUPANCY",
}

// String returns the frame type's name as written in the protocol document,
// or "Type(0xNN)" for a type v1 does not define.
func (t Type) String() string {
	if t.Known() {
		return typeNames[t]
	}
	if t.IsNode() {
		return nodeTypeNames[t-TypeNodeHello]
	}
	return fmt.Sprintf("Type(0x%02X)", uint8(t))
}

// Known reports whether t is a client-protocol frame type defined by v1
// (HELLO..UNSUBSCRIBED, and those of the features). A server answers other
// types with ERROR UNKNOWN_TYPE.
func (t Type) Known() bool { return int(t) < len(typeNames) && typeNames[t] != "" }

// Flags is the header's flags byte; the meaning of each bit depends on the type.
type Flags uint8

// Flag bits.
const (
	// FlagAck on PUBLISH asks the server for a PUBACK.
	FlagAck Flags = 0x01
	// FlagRetriable on ERROR says that retrying the request can succeed.
	FlagRetriable Flags = 0x01
	// FlagExt on PUBLISH says that the body after the channel is an
	// extended record body (message id and/or headers, then the payload;
	// record.go). Usable only after FeatureHeaders was negotiated.
	FlagExt Flags = 0x02
	// FlagFilter on SUBSCRIBE says that a filter expression follows the
	// channel (PROTOCOL.md 2.17). Usable only after FeatureFilters was
	// negotiated.
	FlagFilter Flags = 0x01
	// FlagCompressed is reserved for S2-compressed payloads or records, usable
	// only after FeatureS2 was negotiated. v1 servers do not accept it yet.
	FlagCompressed Flags = 0x80
)

// Features is the u32 feature bit set exchanged in HELLO and WELCOME.
type Features uint32

// Feature bits. Bits not listed are reserved: v1 clients send them as 0, and
// a server ignores unknown bits and echoes only the bits it accepts.
const (
	// FeatureS2 is S2 compression of payloads and records (FlagCompressed).
	FeatureS2 Features = 1 << 0
	// FeatureHeaders is message headers and message ids: PUBLISH may carry
	// FlagExt, and DATA may carry extended records (RecordExt).
	FeatureHeaders Features = 1 << 1
	// FeatureRefresh is credentials that expire: the server sends AUTHED
	// after WELCOME and answers REFRESH, which replaces the connection's
	// token (PROTOCOL.md 2.16).
	FeatureRefresh Features = 1 << 2
	// FeatureFilters is server-side filters: SUBSCRIBE may carry
	// FlagFilter, and the subscription's messages come in FDATA
	// (PROTOCOL.md 2.17).
	FeatureFilters Features = 1 << 3
)

// Header is a decoded frame header.
type Header struct {
	Len   uint32 // body length, header excluded
	Type  Type
	Flags Flags
	ID    uint32 // request id; subscription id for DATA and GAP
}

// Sentinel errors. Match them with errors.Is.
var (
	// ErrIncomplete means the buffer does not yet hold a whole header or
	// frame: read more bytes and try again. It is not a malformed input and
	// is always returned unwrapped.
	ErrIncomplete = errors.New("wire: incomplete frame")
	// ErrMalformed is wrapped by every error about input that violates the
	// protocol. The receiver answers it with ERROR PROTOCOL_ERROR and closes.
	ErrMalformed = errors.New("wire: malformed frame")
	// ErrTooLarge is wrapped by errors about a declared body length over the
	// receiver's limit; it wraps ErrMalformed. The receiver answers it with
	// ERROR FRAME_TOO_LARGE and closes.
	ErrTooLarge = fmt.Errorf("%w: body too large", ErrMalformed)
	// ErrInvalidChannel is wrapped by ValidChannel's errors. It is not a
	// malformed frame: the server answers ERROR INVALID_CHANNEL and carries on.
	ErrInvalidChannel = errors.New("wire: invalid channel name")
)

// MaxBodyFor returns the body limit that fits a PUBLISH (and a one-message
// DATA) with a payload of maxPayload bytes and a channel name of the maximum
// length, and never less than MinMaxBody. It saturates at math.MaxUint32.
func MaxBodyFor(maxPayload uint32) uint32 {
	n := uint64(maxPayload) + publishOverhead
	switch {
	case n < MinMaxBody:
		return MinMaxBody
	case n > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

// ParseHeader decodes the header at the start of b. It returns ErrIncomplete
// if b is shorter than HeaderLen, and an error wrapping ErrTooLarge if the
// declared body length exceeds maxBody. It does not look at the type or the
// flags: unknown types are the caller's decision.
func ParseHeader(b []byte, maxBody uint32) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrIncomplete
	}
	h := Header{
		Len:   binary.BigEndian.Uint32(b[0:4]),
		Type:  Type(b[4]),
		Flags: Flags(b[5]),
		ID:    binary.BigEndian.Uint32(b[6:10]),
	}
	if h.Len > maxBody {
		return h, fmt.Errorf("%w: %v: declared body length %d exceeds the limit %d", ErrTooLarge, h.Type, h.Len, maxBody)
	}
	return h, nil
}

// Split finds the first frame in b. It checks the declared length against
// maxBody before anything else (so a peer cannot make the caller buffer more
// than HeaderLen+maxBody bytes), then returns ErrIncomplete until the whole
// frame is present. On success body is b[HeaderLen:HeaderLen+h.Len] with its
// capacity capped, aliasing b, and n is the frame's total size; the caller
// continues at b[n:]. Split never allocates on success or ErrIncomplete.
func Split(b []byte, maxBody uint32) (h Header, body []byte, n int, err error) {
	h, err = ParseHeader(b, maxBody)
	if err != nil {
		return h, nil, 0, err
	}
	// Compare in uint64 so that a large limit cannot overflow int on 32-bit
	// platforms; n is then at most len(b).
	if uint64(len(b)) < HeaderLen+uint64(h.Len) {
		return h, nil, 0, ErrIncomplete
	}
	n = HeaderLen + int(h.Len)
	return h, b[HeaderLen:n:n], n, nil
}

// AppendHeader appends a 10-byte header. bodyLen must be in [0, MaxUint32];
// anything else cannot be represented and panics (a programming error).
func AppendHeader(dst []byte, t Type, f Flags, id uint32, bodyLen int) []byte {
	if bodyLen < 0 || uint64(bodyLen) > math.MaxUint32 {
		panic(fmt.Sprintf("wire: %v body length %d cannot be encoded", t, bodyLen))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(bodyLen))
	dst = append(dst, byte(t), byte(f))
	return binary.BigEndian.AppendUint32(dst, id)
}
