package wire

import (
	"errors"
	"io"
	"math"
)

// minReaderBuf is the buffer a Reader starts with (if the limit allows):
// large enough to take many small frames per Read call.
const minReaderBuf = 16 << 10

// maxEmptyReads bounds consecutive (0, nil) reads before Next gives up with
// io.ErrNoProgress, as bufio does.
const maxEmptyReads = 100

// ErrWouldBlock is what a Reader's source returns, with no bytes, when it
// reads a non-blocking socket that has nothing to read now. Next passes it
// on without making it sticky and keeps the bytes buffered so far: the
// caller waits until the socket is readable and calls Next again.
var ErrWouldBlock = errors.New("wire: source would block")

// Reader reads whole frames from a byte stream (e.g. a client's net.Conn)
// with bounded buffering. It checks each declared body length against the
// current limit before buffering the body, so it never holds more than
// HeaderLen+maxBody bytes (the largest limit it was given); it reads as much
// as fits per Read call, so many small frames cost one system call, and
// reuses its buffer, so Next does not allocate in steady state.
//
// Typical client use: NewReader(conn, MinMaxBody) for the handshake (a
// server keeps WELCOME within MinMaxBody), then SetMaxBody(welcome.MaxBody).
// Next does not decode bodies; pass them to the DecodeX function of h.Type.
//
// A Reader is not safe for concurrent use: one goroutine calls Next,
// SetMaxBody, Reset and Buffered.
type Reader struct {
	src     io.Reader
	buf     []byte // len(buf) == cap(buf); unread bytes are buf[r:w]
	r, w    int
	maxBody uint32
	err     error // sticky: a malformed header or the source's error
}

// NewReader returns a Reader of src that accepts bodies of at most maxBody
// bytes. The buffer is allocated on the first Next.
func NewReader(src io.Reader, maxBody uint32) *Reader {
	return &Reader{src: src, maxBody: clampBody(maxBody)}
}

// SetMaxBody changes the body limit for the frames not yet returned, e.g. to
// the WELCOME's MaxBody once the handshake is done. The buffer never shrinks.
func (r *Reader) SetMaxBody(maxBody uint32) { r.maxBody = clampBody(maxBody) }

// MaxBody returns the body limit in force.
func (r *Reader) MaxBody() uint32 { return r.maxBody }

// clampBody bounds a body limit so that HeaderLen+limit fits in an int (a
// no-op on 64-bit platforms).
func clampBody(maxBody uint32) uint32 {
	lim := uint64(math.MaxInt - HeaderLen)
	if uint64(maxBody) > lim {
		return uint32(lim)
	}
	return maxBody
}

// Reset discards all buffered bytes and any sticky error and makes r read
// from src, keeping its buffer and limit (for a reconnect).
func (r *Reader) Reset(src io.Reader) {
	r.src, r.r, r.w, r.err = src, 0, 0, nil
}

// Buffered returns the number of bytes read from the source but not yet
// returned as frames.
func (r *Reader) Buffered() int { return r.w - r.r }

// Next returns the next frame. body aliases the Reader's buffer (capacity
// capped) and stays valid only until the next call to Next or Reset; copy
// what must live longer.
//
// Errors: a malformed header (wrapping ErrMalformed or ErrTooLarge) is sticky,
// every later call returns it. ErrWouldBlock from the source is returned as
// it is and is not sticky. When the source fails, frames already
// buffered are still returned first; then Next returns io.EOF if the stream
// ended on a frame boundary, io.ErrUnexpectedEOF if it ended inside a frame,
// or the source's error.
func (r *Reader) Next() (h Header, body []byte, err error) {
	if r.r == r.w {
		r.r, r.w = 0, 0 // nothing buffered: start at the front, no copying
	}
	empty := 0
	for {
		var n int
		h, body, n, err = Split(r.buf[r.r:r.w], r.maxBody)
		if err == nil {
			r.r += n
			return h, body, nil
		}
		if err != ErrIncomplete {
			r.err = err
			return h, nil, err
		}
		if r.err != nil {
			if r.err == io.EOF && r.w > r.r {
				return Header{}, nil, io.ErrUnexpectedEOF
			}
			return Header{}, nil, r.err
		}
		need := HeaderLen
		if r.w-r.r >= HeaderLen {
			need += int(h.Len) // checked against maxBody by Split
		}
		r.makeRoom(need)
		m, rerr := r.src.Read(r.buf[r.w:])
		if m < 0 || m > len(r.buf)-r.w {
			r.err = errors.New("wire: Reader: source returned an invalid count")
			continue
		}
		r.w += m
		switch {
		case rerr == ErrWouldBlock && m == 0:
			return Header{}, nil, ErrWouldBlock
		case rerr == ErrWouldBlock:
			empty = 0 // bytes came with it: split them first
		case rerr != nil:
			r.err = rerr
		case m == 0:
			empty++
			if empty >= maxEmptyReads {
				r.err = io.ErrNoProgress
			}
		default:
			empty = 0
		}
	}
}

// makeRoom ensures that buf[r:] can hold need bytes, compacting the unread
// bytes to the front or growing the buffer (never beyond need, which the
// caller has bounded by HeaderLen+maxBody, unless the buffer was already
// larger).
func (r *Reader) makeRoom(need int) {
	if len(r.buf)-r.r >= need {
		return
	}
	if len(r.buf) >= need {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
		return
	}
	size := max(need, 2*len(r.buf), min(minReaderBuf, HeaderLen+int(r.maxBody)))
	size = min(size, max(need, HeaderLen+int(r.maxBody)))
	nb := make([]byte, size)
	r.w = copy(nb, r.buf[r.r:r.w])
	r.r = 0
	r.buf = nb
}
