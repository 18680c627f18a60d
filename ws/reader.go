package ws

import (
	"unicode/utf8"

	"github.com/valyala/bytebufferpool"
)

// MaxFragments bounds the frames of one message, so that a peer cannot
// keep a message open forever with empty fragments.
const MaxFragments = 1024

// A fragmented message is gathered in a buffer of the process-wide
// bytebufferpool, taken at its first fragment and put back by Release (or
// the next call of Next) once it was handed out: a connection holds no reassembly
// memory between messages (with one kept per connection, 10,000 that had
// each sent one fragmented 16 KiB message held 16 KiB each), and a
// message costs no allocation (BENCHMARKS.md, "bytebufferpool").

// Event is what Reader.Next decoded.
type Event struct {
	// Op is OpBinary or OpText for a whole message, OpPing, OpPong or
	// OpClose for a control frame, and 0 when the bytes consumed were a
	// fragment of a message not yet complete (nothing to act on).
	Op Op
	// Payload is the message or control payload, unmasked. It aliases the
	// buffer passed to Next (an unfragmented message, a control frame) or
	// the Reader's reassembly buffer (a fragmented message): valid until
	// that buffer is reused or the next call of Next (which gives a
	// reassembly buffer back to the pool: do not keep Payload).
	Payload []byte
	// Code and Reason are a close frame's (CodeNoStatus when it had none).
	Code   Code
	Reason string
	// Assembled is set when Payload is a fragmented message gathered in
	// the Reader's buffer, which the next call of Next reuses.
	Assembled bool
}

// Reader decodes the frames one peer sends and assembles its messages,
// enforcing RFC 6455's rules on fragmentation and masking and a size
// limit over all fragments of a message. Set Max before use. A Reader
// belongs to one connection and is not safe for concurrent use.
//
// After an error every call returns that error again: the connection is
// to be closed with CodeOf(err).
type Reader struct {
	// Max is the largest message payload taken, summed over fragments;
	// a longer one is ErrTooLarge (1009) as soon as a header says so.
	Max int
	// Client is set on the client side: the peer (a server) must not
	// mask its frames. On the server side (false) it must mask them.
	Client bool
	// Text allows text messages (checked to be UTF-8); without it a text
	// message is ErrUnsupportedData (1003).
	Text bool

	frag    *bytebufferpool.ByteBuffer // the fragmented message so far; nil between messages
	fragOp  Op
	inMsg   bool
	nfrag   int
	release bool // frag was handed out: reset it on the next call
	err     error
}

// Release gives the buffer of the last assembled message (Event.Assembled)
// back to the pool once the caller is done with its Payload, so that an
// idle connection holds none; the next call of Next does it otherwise.
func (r *Reader) Release() {
	if r.release {
		r.release = false
		bytebufferpool.Put(r.frag)
		r.frag = nil
	}
}

// fragLen is the length of the fragmented message so far.
func (r *Reader) fragLen() int {
	if r.frag == nil {
		return 0
	}
	return len(r.frag.B)
}

// Next decodes the next frame at the start of b and returns what it
// completed and the number of bytes of b it consumed. It returns
// ErrIncomplete (n = 0) while b does not hold a whole frame; the header is
// checked first, so a frame that is too long or malformed is rejected
// before its payload is waited for. Next unmasks the frame's payload in
// place in b: the caller must consume those n bytes and not read them as
// received again.
func (r *Reader) Next(b []byte) (ev Event, n int, err error) {
	if r.err != nil {
		return ev, 0, r.err
	}
	r.Release()
	h, hn, err := ParseHeader(b, uint64(max(r.Max, 0)))
	if err == ErrIncomplete {
		return ev, 0, err
	}
	if err == nil {
		err = r.check(h)
	}
	if err != nil {
		r.err = err
		return ev, 0, err
	}
	if uint64(len(b)-hn) < h.Len {
		return ev, 0, ErrIncomplete
	}
	n = hn + int(h.Len)
	p := b[hn:n:n]
	if h.Masked {
		Mask(p, h.Mask, 0)
	}
	switch h.Op {
	case OpPing, OpPong:
		return Event{Op: h.Op, Payload: p}, n, nil
	case OpClose:
		code, reason, err := ParseClose(p)
		if err != nil {
			r.err = err
			return Event{}, 0, err
		}
		return Event{Op: OpClose, Payload: p, Code: code, Reason: reason}, n, nil
	}
	if h.Fin && !r.inMsg {
		if h.Op == OpText && !utf8.Valid(p) {
			r.err = failf(CodeInvalidPayload, ErrInvalidPayload, "text message is not UTF-8")
			return Event{}, 0, r.err
		}
		return Event{Op: h.Op, Payload: p}, n, nil
	}
	if !r.inMsg {
		r.inMsg, r.fragOp, r.nfrag = true, h.Op, 0
	}
	if r.frag == nil {
		r.frag = bytebufferpool.Get()
	}
	r.frag.B = append(r.frag.B, p...)
	r.nfrag++
	if !h.Fin {
		return Event{}, n, nil
	}
	r.inMsg, r.release = false, true
	msg := r.frag.B[:len(r.frag.B):len(r.frag.B)]
	if r.fragOp == OpText && !utf8.Valid(msg) {
		r.err = failf(CodeInvalidPayload, ErrInvalidPayload, "text message is not UTF-8")
		return Event{}, 0, r.err
	}
	return Event{Op: r.fragOp, Payload: msg, Assembled: true}, n, nil
}

// check applies the rules that depend on the connection's state.
func (r *Reader) check(h Header) error {
	switch {
	case !r.Client && !h.Masked:
		return failf(CodeProtocolError, ErrProtocol, "unmasked %v frame from a client", h.Op)
	case r.Client && h.Masked:
		return failf(CodeProtocolError, ErrProtocol, "masked %v frame from a server", h.Op)
	case h.Op.Control():
		return nil
	case h.Op == OpContinuation && !r.inMsg:
		return failf(CodeProtocolError, ErrProtocol, "continuation frame outside a fragmented message")
	case h.Op != OpContinuation && r.inMsg:
		return failf(CodeProtocolError, ErrProtocol, "%v frame inside a fragmented message", h.Op)
	case h.Op == OpText && !r.Text:
		return failf(CodeUnsupportedData, ErrUnsupportedData, "text messages are not accepted: send binary messages")
	}
	if r.inMsg {
		if uint64(r.fragLen())+h.Len > uint64(max(r.Max, 0)) {
			return failf(CodeTooBig, ErrTooLarge, "fragmented message of more than %d bytes exceeds the limit of %d",
				uint64(r.fragLen())+h.Len, r.Max)
		}
		if r.nfrag >= MaxFragments {
			return failf(CodeTooBig, ErrTooLarge, "message of more than %d fragments", MaxFragments)
		}
	}
	return nil
}

// InMessage reports whether a fragmented message is in progress.
func (r *Reader) InMessage() bool { return r.inMsg }
