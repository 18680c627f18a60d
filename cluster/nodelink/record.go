package nodelink

import (
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// frameHandler takes the frames nodeIO.input splits; false stops it.
type frameHandler interface {
	frame(h wire.Header, body []byte) bool
}

// nodeIO is the byte handling both sides of a node connection share: the
// record layer (PROTOCOL.md 9.8) and the splitting of frames. After the
// handshake every byte written is sealed into NODE_SEALED records under
// the connection's sending key and every byte read is opened with the
// peer's key before frames are split from it. Owned by the connection's
// loop.
type nodeIO struct {
	seal *wire.Sealer
	open *wire.Opener // nil: frames in the clear (the handshake, or Plain)
	// limit is the largest frame body accepted.
	limit uint32
	// plain holds opened plaintext not yet taken as frames: at most one
	// partial frame (bounded by limit) after a call.
	plain []byte
	// out is the sealed output of one piece of a write, and piece the
	// plaintext vector of that piece; both reused.
	out   []byte
	piece [][]byte
	// pending is the partial frame or record left by the last input (raw
	// bytes left plus opened plaintext kept), progressed whether it
	// completed a frame.
	pending    int
	progressed bool
}

// errSplit wraps a frame that could not be split (malformed or too
// large); the record layer's errors wrap wire.ErrSeal.
type errSplit struct{ err error }

func (e errSplit) Error() string { return e.err.Error() }
func (e errSplit) Unwrap() error { return e.err }

// sealed installs the record layer of the handshake's session s.
func (io *nodeIO) sealed(s *wire.NodeSession) {
	io.seal, io.open = s.Sealer(), s.Opener()
}

// input splits frames from raw (opening its records first when sealed)
// and hands them to fh until it returns false or the bytes end; it
// returns the raw bytes consumed. A plain connection's frames alias raw.
// It stops after a frame that installed the record layer (the rest of
// raw is records): call it again. The error is a record that does not
// open (wire.ErrSeal) or an errSplit.
func (io *nodeIO) input(raw []byte, fh frameHandler) (int, error) {
	if io.open == nil {
		off := 0
		for {
			h, body, n, err := wire.Split(raw[off:], io.limit)
			if err == wire.ErrIncomplete {
				break
			}
			if err != nil {
				return off, errSplit{err}
			}
			off += n
			if !fh.frame(h, body) || io.open != nil {
				break
			}
		}
		io.pending, io.progressed = len(raw)-off, off > 0
		return off, nil
	}
	var n int
	var err error
	io.plain, n, err = io.open.OpenAll(io.plain, raw)
	if err != nil {
		return n, err
	}
	buf := io.plain
	off := 0
	for {
		h, body, m, serr := wire.Split(buf[off:], io.limit)
		if serr == wire.ErrIncomplete {
			break
		}
		if serr != nil {
			err = errSplit{serr}
			break
		}
		off += m
		if !fh.frame(h, body) {
			break
		}
	}
	io.consumed(off)
	io.pending, io.progressed = len(raw)-n+len(io.plain), off > 0
	return n, err
}

// consumed drops the first n bytes of plain (the frames handled).
func (io *nodeIO) consumed(n int) {
	if n == 0 {
		return
	}
	rest := copy(io.plain, io.plain[n:])
	io.plain = io.plain[:rest]
	if rest == 0 && cap(io.plain) > 4<<20 {
		io.plain = nil
	}
}

// sealPiece bounds the plaintext sealed into the output buffer before it
// is written, so that the buffer (kept for the next write) stays small and
// is not reallocated and cleared for every large write.
const sealPiece = 256 << 10

// write writes the pending output vector with w: in the clear before the
// record layer is installed, else sealed in pieces of at most sealPiece
// plaintext bytes. It fails only when the direction's sequence numbers
// are exhausted; w's own errors are gnet's (which closes the connection).
func (io *nodeIO) write(iov [][]byte, w Writer) error {
	if io.seal == nil {
		_, _ = w.Writev(iov) // on error gnet closes the connection
		return nil
	}
	n := 0
	for _, b := range iov {
		for len(b) > 0 {
			k := min(len(b), sealPiece-n)
			io.piece = append(io.piece, b[:k])
			n += k
			b = b[k:]
			if n == sealPiece {
				if err := io.emit(w); err != nil {
					return err
				}
				n = 0
			}
		}
	}
	if n > 0 {
		return io.emit(w)
	}
	return nil
}

// emit seals io.piece and writes it.
func (io *nodeIO) emit(w Writer) error {
	var err error
	io.out, err = io.seal.SealVec(io.out[:0], io.piece)
	clear(io.piece)
	io.piece = io.piece[:0]
	if err != nil {
		return err
	}
	_, _ = w.Write(io.out) // gnet closes the connection on a write error
	return nil
}

// isSplit reports whether err is a frame that could not be split, and
// whether it was too large.
func isSplit(err error) (split, tooLarge bool) {
	var se errSplit
	if !errors.As(err, &se) {
		return false, false
	}
	return true, errors.Is(se.err, wire.ErrTooLarge)
}

// inflateFeed returns the uncompressed body of a compressed NODE_FEED (in
// *z, valid until the next one), or body itself.
func inflateFeed(z *[]byte, h wire.Header, body []byte, limit uint32) ([]byte, error) {
	if h.Flags&wire.FlagCompressed == 0 {
		return body, nil
	}
	if h.Type != wire.TypeNodeFeed {
		return nil, fmt.Errorf("%w: %v has flag COMPRESSED", wire.ErrMalformed, h.Type)
	}
	pre, err := wire.NodeFeedPrefix(body)
	if err != nil {
		return nil, err
	}
	*z, err = wire.Inflate(*z, body, pre, limit, wire.TypeNodeFeed)
	return *z, err
}
