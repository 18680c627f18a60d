package ws

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unicode/utf8"
)

// Op is a frame's opcode.
type Op uint8

// Opcodes (RFC 6455 section 5.2). 3-7 and 11-15 are reserved.
const (
	OpContinuation Op = 0x0
	OpText         Op = 0x1
	OpBinary       Op = 0x2
	OpClose        Op = 0x8
	OpPing         Op = 0x9
	OpPong         Op = 0xA
)

// Control reports whether op is a control opcode (close, ping, pong).
func (op Op) Control() bool { return op&0x8 != 0 }

func (op Op) known() bool {
	return op <= OpBinary || (op >= OpClose && op <= OpPong)
}

func (op Op) String() string {
	switch op {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	return fmt.Sprintf("opcode 0x%x", uint8(op))
}

// Code is a close status code (RFC 6455 section 7.4).
type Code uint16

// Close codes used by Sluice.
const (
	CodeNormal          Code = 1000
	CodeGoingAway       Code = 1001
	CodeProtocolError   Code = 1002
	CodeUnsupportedData Code = 1003
	CodeNoStatus        Code = 1005 // never sent: a close frame without a code
	CodeInvalidPayload  Code = 1007
	CodePolicyViolation Code = 1008
	CodeTooBig          Code = 1009
	CodeInternalError   Code = 1011
)

// MaxControlPayload is the longest payload of a control frame.
const MaxControlPayload = 125

const (
	minFrameHeaderLen  = 2
	maskedExtra        = 4
	len16Marker        = 126
	len64Marker        = 127
	finBit             = 0x80
	rsvBits            = 0x70
	maskBit            = 0x80
	opBits             = 0x0f
	len7Bits           = 0x7f
	maxLen16           = math.MaxUint16
	maxFrameLen64      = math.MaxInt64
	minimalLen16       = len16Marker
	minimalLen64       = maxLen16 + 1
	closeReasonMax     = MaxControlPayload - 2
	validUserCodeFirst = 3000
	validUserCodeLast  = 4999
)

// validCloseCode reports whether c may appear in a close frame (RFC 6455
// section 7.4.1; 1004-1006 and 1015 are reserved for local use).
func validCloseCode(c Code) bool {
	switch {
	case c >= 1000 && c <= 1003, c >= 1007 && c <= 1011:
		return true
	case c >= validUserCodeFirst && c <= validUserCodeLast:
		return true
	}
	return false
}

var (
	// ErrIncomplete means the buffer does not yet hold a whole frame (or
	// upgrade request). It is not an error of the peer.
	ErrIncomplete = errors.New("ws: incomplete")
	// ErrProtocol is wrapped by errors about input that violates RFC
	// 6455; the answer is close code 1002.
	ErrProtocol = errors.New("ws: protocol error")
	// ErrTooLarge is wrapped by errors about a message over the
	// receiver's limit; the answer is close code 1009.
	ErrTooLarge = errors.New("ws: message too big")
	// ErrUnsupportedData is wrapped by errors about a message type the
	// receiver does not take (text, for Sluice); the answer is 1003.
	ErrUnsupportedData = errors.New("ws: unsupported data")
	// ErrInvalidPayload is wrapped by errors about a close reason that is
	// not UTF-8; the answer is 1007.
	ErrInvalidPayload = errors.New("ws: invalid payload data")
)

// Error is a malformed-input error with the close code to answer it with.
type Error struct {
	Code Code
	err  error // wraps the sentinel
}

func (e *Error) Error() string { return e.err.Error() }
func (e *Error) Unwrap() error { return e.err }

func failf(code Code, sentinel error, format string, args ...any) error {
	return &Error{Code: code, err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// CodeOf returns the close code that answers err: the Code of an *Error,
// 1011 (internal error) for anything else.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternalError
}

// Header is a decoded frame header.
type Header struct {
	Fin    bool
	RSV    uint8 // the three reserved bits, as the top bits 0x70 of byte 0
	Op     Op
	Masked bool
	Mask   [4]byte
	Len    uint64 // payload length
}

// ParseHeader decodes the frame header at the start of b and returns it
// with its size n. It returns ErrIncomplete while b is too short for the
// header, and an error as soon as the bytes present show the frame to be
// malformed: a reserved bit set (no extension is ever negotiated), a
// reserved opcode, a fragmented or over-125-byte control frame, a length
// not in its minimal encoding or with the top bit set, or a data frame
// longer than maxPayload. The payload itself is not looked at.
func ParseHeader(b []byte, maxPayload uint64) (h Header, n int, err error) {
	if len(b) < minFrameHeaderLen {
		return h, 0, ErrIncomplete
	}
	h.Fin = b[0]&finBit != 0
	h.RSV = b[0] & rsvBits
	h.Op = Op(b[0] & opBits)
	h.Masked = b[1]&maskBit != 0
	l7 := b[1] & len7Bits
	switch {
	case h.RSV != 0:
		return h, 0, failf(CodeProtocolError, ErrProtocol, "%v frame has reserved bits 0x%02x set", h.Op, h.RSV)
	case !h.Op.known():
		return h, 0, failf(CodeProtocolError, ErrProtocol, "reserved %v", h.Op)
	case h.Op.Control() && !h.Fin:
		return h, 0, failf(CodeProtocolError, ErrProtocol, "fragmented %v frame", h.Op)
	case h.Op.Control() && l7 > MaxControlPayload:
		return h, 0, failf(CodeProtocolError, ErrProtocol, "%v frame longer than %d bytes", h.Op, MaxControlPayload)
	}
	n = minFrameHeaderLen
	switch l7 {
	case len16Marker:
		if len(b) < n+2 {
			return h, 0, ErrIncomplete
		}
		h.Len = uint64(binary.BigEndian.Uint16(b[n:]))
		n += 2
		if h.Len < minimalLen16 {
			return h, 0, failf(CodeProtocolError, ErrProtocol, "length %d in a 16-bit field (not minimal)", h.Len)
		}
	case len64Marker:
		if len(b) < n+8 {
			return h, 0, ErrIncomplete
		}
		h.Len = binary.BigEndian.Uint64(b[n:])
		n += 8
		if h.Len > maxFrameLen64 {
			return h, 0, failf(CodeProtocolError, ErrProtocol, "64-bit length with the top bit set")
		}
		if h.Len < minimalLen64 {
			return h, 0, failf(CodeProtocolError, ErrProtocol, "length %d in a 64-bit field (not minimal)", h.Len)
		}
	default:
		h.Len = uint64(l7)
	}
	if !h.Op.Control() && h.Len > maxPayload {
		return h, 0, failf(CodeTooBig, ErrTooLarge, "%v frame of %d bytes exceeds the limit of %d", h.Op, h.Len, maxPayload)
	}
	if h.Masked {
		if len(b) < n+maskedExtra {
			return h, 0, ErrIncomplete
		}
		copy(h.Mask[:], b[n:n+maskedExtra])
		n += maskedExtra
	}
	return h, n, nil
}

// HeaderLen is the size of the header of a frame with an n-byte payload,
// with a masking key when masked.
func HeaderLen(n int, masked bool) int {
	k := minFrameHeaderLen
	switch {
	case n > maxLen16:
		k += 8
	case n >= minimalLen16:
		k += 2
	}
	if masked {
		k += maskedExtra
	}
	return k
}

// AppendHeader appends the header of a frame with an n-byte payload; mask,
// when not nil, is the masking key (a client's frames are masked, a
// server's are not). n must not be negative, and at most 125 for a
// control opcode (a programming error: it panics).
func AppendHeader(dst []byte, fin bool, op Op, n int, mask *[4]byte) []byte {
	if n < 0 || (op.Control() && n > MaxControlPayload) {
		panic(fmt.Sprintf("ws: %v frame with a %d-byte payload cannot be encoded", op, n))
	}
	b0 := byte(op)
	if fin {
		b0 |= finBit
	}
	var m byte
	if mask != nil {
		m = maskBit
	}
	switch {
	case n > maxLen16:
		dst = append(dst, b0, m|len64Marker)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	case n >= minimalLen16:
		dst = append(dst, b0, m|len16Marker)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, b0, m|byte(n))
	}
	if mask != nil {
		dst = append(dst, mask[:]...)
	}
	return dst
}

// AppendFrame appends one unmasked, final frame (a server's).
func AppendFrame(dst []byte, op Op, payload []byte) []byte {
	dst = AppendHeader(dst, true, op, len(payload), nil)
	return append(dst, payload...)
}

// AppendMaskedFrame appends one masked frame (a client's) with key as its
// masking key; fin false makes it a fragment of a longer message.
func AppendMaskedFrame(dst []byte, fin bool, op Op, payload []byte, key [4]byte) []byte {
	dst = AppendHeader(dst, fin, op, len(payload), &key)
	start := len(dst)
	dst = append(dst, payload...)
	Mask(dst[start:], key, 0)
	return dst
}

// Mask XORs b in place with the masking key, starting at offset pos of the
// payload (masking and unmasking are the same operation), and returns the
// payload offset after b.
func Mask(b []byte, key [4]byte, pos int) int {
	k32 := binary.LittleEndian.Uint32(key[:])
	k32 = bits.RotateLeft32(k32, -8*(pos&3))
	k64 := uint64(k32) | uint64(k32)<<32
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^k64)
	}
	for ; i < len(b); i++ {
		b[i] ^= key[(pos+i)&3]
	}
	return pos + len(b)
}

// ClosePayload returns the payload of a close frame with code and reason;
// a reason longer than 123 bytes is cut (at a UTF-8 boundary).
func ClosePayload(code Code, reason string) []byte {
	if len(reason) > closeReasonMax {
		reason = reason[:closeReasonMax]
		for len(reason) > 0 && !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	p := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(code))
	return append(p, reason...)
}

// AppendClose appends an unmasked close frame with code and reason.
func AppendClose(dst []byte, code Code, reason string) []byte {
	return AppendFrame(dst, OpClose, ClosePayload(code, reason))
}

// ParseClose decodes a close frame's payload. An empty payload is
// CodeNoStatus; one byte, a code that may not be sent, or a reason that is
// not UTF-8 is an error.
func ParseClose(p []byte) (Code, string, error) {
	switch {
	case len(p) == 0:
		return CodeNoStatus, "", nil
	case len(p) == 1:
		return 0, "", failf(CodeProtocolError, ErrProtocol, "close frame with a 1-byte payload")
	}
	c := Code(binary.BigEndian.Uint16(p))
	if !validCloseCode(c) {
		return 0, "", failf(CodeProtocolError, ErrProtocol, "close code %d may not be sent", c)
	}
	if !utf8.Valid(p[2:]) {
		return 0, "", failf(CodeInvalidPayload, ErrInvalidPayload, "close reason is not UTF-8")
	}
	return c, string(p[2:]), nil
}
