// Package wire is the Sluice protocol v1 codec: pure functions over []byte
// that encode and decode frames. It does no I/O except in Reader, imports
// only the standard library, and nothing from the rest of Sluice.
//
// A frame is a 10-byte header followed by a body (all integers big-endian):
//
//	+--------+--------+--------+--------+------+-------+--------+--------+--------+--------+
//	|        body length N (u32)        | type | flags |          id (u32)                 |
//	+--------+--------+--------+--------+------+-------+--------+--------+--------+--------+
//	 0                                   4      5       6                                 10
//
// The body layouts are drawn next to each encoder and in PROTOCOL.md at the
// repository root.
//
// # Conventions
//
// Encoders are append-style: AppendX(dst, ...) appends one whole frame (header
// and body) to dst and returns the extended slice. They have no side effects,
// allocate only when dst lacks capacity, and may be called from any goroutine.
// Their preconditions (field lengths that the wire format can represent) are
// documented on each; a value that the format cannot represent at all (for
// example a 300-byte channel name in a u8 length field) is a programming
// error and panics, because silently truncating it would publish to another
// channel. Values that are representable but invalid (an empty channel, a PUBACK
// with no acks) are encoded faithfully, and the receiver rejects them.
//
// Decoders take the body of a frame whose header was already parsed
// (ParseHeader or Split) and return the decoded value. Decoded []byte fields
// alias the body with capped capacity, so they stay valid exactly as long as
// the body's memory does, and appending to them never overwrites the body.
// Decoded strings are copies. Decoders are safe for concurrent use on
// distinct or shared (read-only) bodies.
//
// # Errors
//
// "Need more bytes" is ErrIncomplete, returned as is (never wrapped) and not an
// error of the peer. Every malformed-input error wraps ErrMalformed (test with
// errors.Is) and says which frame and field is wrong; a declared body length
// over the receiver's limit additionally wraps ErrTooLarge. Decoders never
// panic on any input and check every declared length against the bytes
// present before slicing or allocating.
package wire
