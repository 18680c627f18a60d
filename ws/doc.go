// Package ws is the WebSocket (RFC 6455) codec of Sluice's WebSocket
// gateway: pure functions over []byte, in the style of package wire. It
// parses the HTTP upgrade request and writes its answer (handshake.go),
// decodes and encodes frames (frame.go) and assembles messages from
// frames (reader.go). It does no I/O, keeps no goroutines and imports
// only the standard library, so the engine runs it on its event loops
// over the bytes gnet lends it, and a fuzzer runs it without sockets.
//
// A frame (RFC 6455 section 5.2), all integers big-endian:
//
//	 0               1               2               3
//	+-+-+-+-+-------+-+-------------+-------------------------------+
//	|F|R|R|R| op(4) |M| length(7)   | extended length (16 if 126,   |
//	|I|S|S|S|       |A|             |  64 if 127; minimal encoding) |
//	|N|1|2|3|       |S|             |                               |
//	+-+-+-+-+-------+-+-------------+-------------------------------+
//	| masking key (32, only if MASK set) | payload ...              |
//	+------------------------------------+--------------------------+
//
// # Errors
//
// "Need more bytes" is ErrIncomplete, returned as is. Every malformed-input
// error is an *Error that carries the close code the receiver answers with
// (CodeOf) and wraps one of the sentinels ErrProtocol (1002), ErrTooLarge
// (1009), ErrUnsupportedData (1003) or ErrInvalidPayload (1007); upgrade
// request errors are *HandshakeError and carry an HTTP status. Lengths are
// checked against the caller's limit as soon as they are read, before any
// byte of the payload is waited for, so a peer can make the receiver hold
// at most the limit plus one frame header.
package ws
