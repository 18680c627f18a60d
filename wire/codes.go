package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Code is a wire error code, carried by ERROR and GOAWAY.
type Code uint16

// Error codes of protocol v1. Fatal codes make the server close the
// connection after sending the ERROR.
const (
	CodeProtocolError        Code = 1  // fatal: malformed frame
	CodeUnknownType          Code = 2  // fatal: frame type not defined
	CodeFrameTooLarge        Code = 3  // fatal: declared body length over the limit
	CodeUnsupportedVersion   Code = 4  // fatal: no common protocol version
	CodeHelloRequired        Code = 5  // fatal: a frame before HELLO, or a second HELLO
	CodeInvalidChannel       Code = 6  // channel name not 1..255 bytes of valid UTF-8 without space/control
	CodePayloadTooLarge      Code = 7  // payload over the server's max payload
	CodeTooManySubscriptions Code = 8  // per-connection subscription limit reached
	CodeSubscriptionExists   Code = 9  // subID already in use on this connection
	CodeUnknownSubscription  Code = 10 // no such subID on this connection
	CodeTooManyConnections   Code = 11 // fatal
	CodeUnauthenticated      Code = 12 // fatal
	CodeForbidden            Code = 13
	CodeSlowConsumer         Code = 14 // fatal
	CodeShuttingDown         Code = 15 // fatal, retriable (elsewhere or later)
	CodeUnavailable          Code = 16 // retriable: e.g. no host could take a streamlet
	CodeRateLimited          Code = 17 // retriable
	CodeInvalidStart         Code = 18 // subscribe start invalid (e.g. position 0)
	CodeHandshakeTimeout     Code = 19 // fatal
	CodeIdleTimeout          Code = 20 // fatal
	CodeInternal             Code = 21 // retriable
	CodeInvalidHeaders       Code = 22 // message headers or message id break the rules of PROTOCOL.md 2.14
	CodeOutcomeUnknown       Code = 23 // a PUBLISH may or may not have been stored (its host failed with it in flight)
	CodeTokenExpired         Code = 24 // fatal: the token expired and no REFRESH came within the grace period
	CodeInvalidFilter        Code = 25 // a SUBSCRIBE's filter expression does not compile
)

type codeInfo struct {
	name      string
	fatal     bool
	retriable bool
}

var codes = [...]codeInfo{
	CodeProtocolError:        {"PROTOCOL_ERROR", true, false},
	CodeUnknownType:          {"UNKNOWN_TYPE", true, false},
	CodeFrameTooLarge:        {"FRAME_TOO_LARGE", true, false},
	CodeUnsupportedVersion:   {"UNSUPPORTED_VERSION", true, false},
	CodeHelloRequired:        {"HELLO_REQUIRED", true, false},
	CodeInvalidChannel:       {"INVALID_CHANNEL", false, false},
	CodePayloadTooLarge:      {"PAYLOAD_TOO_LARGE", false, false},
	CodeTooManySubscriptions: {"TOO_MANY_SUBSCRIPTIONS", false, false},
	CodeSubscriptionExists:   {"SUBSCRIPTION_EXISTS", false, false},
	CodeUnknownSubscription:  {"UNKNOWN_SUBSCRIPTION", false, false},
	CodeTooManyConnections:   {"TOO_MANY_CONNECTIONS", true, false},
	CodeUnauthenticated:      {"UNAUTHENTICATED", true, false},
	CodeForbidden:            {"FORBIDDEN", false, false},
	CodeSlowConsumer:         {"SLOW_CONSUMER", true, false},
	CodeShuttingDown:         {"SHUTTING_DOWN", true, true},
	CodeUnavailable:          {"UNAVAILABLE", false, true},
	CodeRateLimited:          {"RATE_LIMITED", false, true},
	CodeInvalidStart:         {"INVALID_START", false, false},
	CodeHandshakeTimeout:     {"HANDSHAKE_TIMEOUT", true, false},
	CodeIdleTimeout:          {"IDLE_TIMEOUT", true, false},
	CodeInternal:             {"INTERNAL", false, true},
	CodeInvalidHeaders:       {"INVALID_HEADERS", false, false},
	CodeOutcomeUnknown:       {"OUTCOME_UNKNOWN", false, false},
	CodeTokenExpired:         {"TOKEN_EXPIRED", true, false},
	CodeInvalidFilter:        {"INVALID_FILTER", false, false},
}

func (c Code) info() (codeInfo, bool) {
	if c == 0 || int(c) >= len(codes) {
		return codeInfo{}, false
	}
	return codes[c], true
}

// String returns the code's protocol name (e.g. "PROTOCOL_ERROR"), or
// "Code(N)" for a code v1 does not define.
func (c Code) String() string {
	if i, ok := c.info(); ok {
		return i.name
	}
	return fmt.Sprintf("Code(%d)", uint16(c))
}

// Fatal reports whether the server closes the connection after sending an
// ERROR with this code. Undefined codes report false: a peer that closes
// will be seen closing.
func (c Code) Fatal() bool {
	i, _ := c.info()
	return i.fatal
}

// Retriable reports whether the code is retriable by default, i.e. whether a
// server should set FlagRetriable when it sends it (SHUTTING_DOWN,
// UNAVAILABLE, RATE_LIMITED, INTERNAL). The flag on the wire is what a
// client acts on.
func (c Code) Retriable() bool {
	i, _ := c.info()
	return i.retriable
}

// ---------------------------------------------------------------------------
// ERROR (0x0C, server -> client), id = the request id it answers (0 = the
// connection), flags: FlagRetriable. GOAWAY (0x0D, server -> client), id = 0.
// Same body, exact length:
//
//	off   size  field
//	0     2     code (u16)
//	2     2     textLen (u16)
//	4     T     text

// Error is an ERROR frame and a Go error value. Text is a human-readable
// detail, not for matching.
type Error struct {
	Code      Code
	Retriable bool
	Text      string
}

// Error returns "sluice: CODE: text" ("sluice: CODE" without text).
func (e Error) Error() string {
	if e.Text == "" {
		return "sluice: " + e.Code.String()
	}
	return "sluice: " + e.Code.String() + ": " + e.Text
}

// GoAway is the body of a GOAWAY frame: the server is closing the connection
// (e.g. SHUTTING_DOWN); the client should reconnect elsewhere or later.
type GoAway struct {
	Code Code
	Text string
}

func appendCodeText(dst []byte, t Type, f Flags, id uint32, c Code, text string) []byte {
	mustFit(t, "text length", len(text), math.MaxUint16)
	dst = AppendHeader(dst, t, f, id, 4+len(text))
	dst = binary.BigEndian.AppendUint16(dst, uint16(c))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(text)))
	return append(dst, text...)
}

func decodeCodeText(t Type, body []byte) (Code, string, error) {
	d := decoder{b: body, frame: t}
	c := Code(d.u16("code"))
	text := d.bytes(int(d.u16("textLen")), "text")
	if err := d.exact(); err != nil {
		return 0, "", err
	}
	return c, string(text), nil
}

// AppendError appends a whole ERROR frame answering request id (0 for the
// connection). FlagRetriable is set from e.Retriable. len(e.Text) must be
// <= 65535.
func AppendError(dst []byte, id uint32, e Error) []byte {
	var f Flags
	if e.Retriable {
		f = FlagRetriable
	}
	return appendCodeText(dst, TypeError, f, id, e.Code, e.Text)
}

// DecodeError decodes an ERROR frame; Retriable comes from h.Flags. Codes
// that v1 does not define are accepted (String shows them as "Code(N)").
func DecodeError(h Header, body []byte) (Error, error) {
	c, text, err := decodeCodeText(TypeError, body)
	if err != nil {
		return Error{}, err
	}
	return Error{Code: c, Retriable: h.Flags&FlagRetriable != 0, Text: text}, nil
}

// AppendGoAway appends a whole GOAWAY frame. len(g.Text) must be <= 65535.
func AppendGoAway(dst []byte, g GoAway) []byte {
	return appendCodeText(dst, TypeGoAway, 0, 0, g.Code, g.Text)
}

// DecodeGoAway decodes a GOAWAY body.
func DecodeGoAway(body []byte) (GoAway, error) {
	c, text, err := decodeCodeText(TypeGoAway, body)
	if err != nil {
		return GoAway{}, err
	}
	return GoAway{Code: c, Text: text}, nil
}
