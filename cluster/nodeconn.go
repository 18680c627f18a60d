package cluster

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/wire"
)

// Node connections as the engine carries them. Package cluster owns both
// directions of every node connection: the handshake (PROTOCOL.md 9.1),
// the record layer (9.8) and the meaning of every frame. The engine's
// event loops only carry the bytes: a loop hands what it read to the
// connection's NodeConn (Input), writes what the NodeConn queued with the
// NodeConn's Write (which seals it), and offers the few gateway
// operations the node frames need (appending a batch, sharing a
// streamlet's bytes) through Conn.

// Conn is an event loop's side of one node connection (package engine).
// Every method but Execute runs on the connection's loop, in a callback
// or a task, and must not block.
type Conn interface {
	// OwnStart returns the connection's output scratch to append own
	// bytes to; OwnEnd takes the result back and queues the bytes
	// appended. Nothing else may run between the two.
	OwnStart() []byte
	OwnEnd(b []byte)
	// Share queues b for writing without copying it; b must stay valid
	// and unchanged until the loop's flush at the end of this iteration.
	Share(b []byte)
	// Hold keeps s's buffer acquired (s.Buf().Acquire, done by the
	// caller) until the loop's flush: the bytes Shared from it stay valid.
	Hold(s *host.Streamlet)
	// Flush writes what is queued now (through NodeConn.Write).
	Flush()
	// Outbound returns the bytes queued or buffered and not yet written.
	Outbound() int
	// Close closes the connection once its queued output is written.
	Close()
	// Execute runs fn on the connection's loop later, as a task (from any
	// goroutine); queued output is written after it.
	Execute(fn func())
	// Now returns the loop's time of this iteration (unix ns, the
	// server's clock).
	Now() int64
	// RemoteAddr names the other end (for logs).
	RemoteAddr() string
	// AppendBatch appends payloads (exts[k]: payloads[k] is an extended
	// record body) to the hosted streamlet s, as the gateway's own
	// publishes are, with this loop's time: pos and dup receive each
	// appended record's position and whether it was a duplicate
	// (idempotent publish). It returns how many were appended (fewer when
	// s closed), counts them and wakes the channel's local readers.
	AppendBatch(s *host.Streamlet, payloads [][]byte, exts []bool, pos []uint64, dup []bool) int
	// CountOut counts n records sent to the peer (metrics).
	CountOut(n int)
}

// NodeConn is a node connection's protocol, either side, as the loop that
// carries it sees it. Its methods run on that loop.
type NodeConn interface {
	// Input handles raw, the bytes read and not yet consumed, and returns
	// how many it consumed; the rest is handed again with what follows.
	// It may queue output and close the connection (Conn.Close).
	Input(raw []byte) int
	// Write writes iov, the queued output, with w: sealed into records
	// after the handshake. An error means the connection cannot go on.
	Write(iov [][]byte, w Writer) error
	// Sweep runs the connection's timers at now (the loop's periodic
	// sweep): handshake, idle and frame timeouts.
	Sweep(now int64)
	// Stalled: more than LinkBacklog bytes wait to be written, so the
	// peer does not read: the connection ends.
	Stalled(pending int)
	// GoAway: the server is shutting down.
	GoAway()
	// Linger reports whether a connection closed after a fatal ERROR is
	// to linger half-closed, as a client's does, so that the other end
	// reads the ERROR rather than a reset: true only during an inbound
	// handshake.
	Linger() bool
	// Closed: the connection closed (gnet's OnClose).
	Closed()
}

// Writer is how a NodeConn writes (gnet.Conn is one).
type Writer interface {
	Write(b []byte) (int, error)
	Writev(bs [][]byte) (int, error)
}

// Enrolled is a dialed node connection being enrolled (Transport.Enroll):
// the loop that opens it calls Attach with its side, then carries it as
// the NodeConn.
type Enrolled interface {
	NodeConn
	// Attach is called on the loop that opened the connection; false
	// means it ended meanwhile (the loop closes it).
	Attach(c Conn) bool
}

// Transport enrolls dialed node connections in the engine's event loops.
type Transport interface {
	// Enroll hands c, connected and past the node handshake, to an event
	// loop, which owns it from then on: the loop calls e.Attach when it
	// opens the connection and carries it as e (NodeConn) until it
	// closes. Enroll returns once the loop accepted the connection or
	// deadline passed; it must not run on a loop.
	Enroll(c net.Conn, e Enrolled, deadline time.Time) error
}

// ConnOptions are the engine's limits that apply to node connections
// (Config.Conns): the timeouts to inbound ones as they do to a client's.
type ConnOptions struct {
	// MaxBody bounds a node frame's body once the handshake is done
	// (before it: wire.MinMaxBody).
	MaxBody uint32
	// RequireSecret refuses node connections when no cluster secret is
	// set (the server checks client permissions, which node connections
	// bypass).
	RequireSecret bool
	// HandshakeTimeout bounds the node handshake; IdleTimeout closes a
	// connection silent that long, PingInterval pings one silent that
	// long, FrameTimeout closes one whose frame stays incomplete that
	// long (0: off).
	HandshakeTimeout, IdleTimeout, PingInterval, FrameTimeout time.Duration
	// Plain skips the record layer (benchhook.SetPlainNodeLinks).
	Plain bool
}

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
