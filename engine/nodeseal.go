package engine

import (
	"io"

	"github.com/sluice-rtm/sluice/wire"
)

// nodeSeal is the record layer of a node connection (PROTOCOL.md 9.8),
// either side: after the handshake every byte written is sealed into
// NODE_SEALED records under this connection's sending key and every byte
// read is opened with the peer's key before frames are split from it. It
// is owned by the connection's loop, like the rest of conn.
type nodeSeal struct {
	seal *wire.Sealer
	open *wire.Opener
	// plain holds opened plaintext not yet taken as frames: at most one
	// partial frame (bounded by the node body limit) after a call.
	plain []byte
	// out is the sealed output of one piece of a flush, and piece the
	// plaintext vector of that piece; both reused.
	out   []byte
	piece [][]byte
}

// newNodeSeal returns the record layer of a node connection whose
// handshake ended in s; nil on a server started with the benchmark-only
// switch benchhook.SetPlainNodeLinks (Server.plainLinks), whose node
// connections authenticate but send frames in the clear, to measure what
// the records cost (BENCHMARKS.md).
func (srv *Server) newNodeSeal(s *wire.NodeSession) *nodeSeal {
	if srv.plainLinks {
		return nil
	}
	return &nodeSeal{seal: s.Sealer(), open: s.Opener()}
}

// sealPiece bounds the plaintext sealed into the output buffer before it
// is written, so that the buffer (kept for the next flush) stays small and
// is not reallocated and cleared for every large flush.
const sealPiece = 256 << 10

// writeSealed seals the connection's pending output vector and writes the
// records with write, in pieces of at most sealPiece plaintext bytes
// (conn.flush). It fails only when the direction's sequence numbers are
// exhausted; write's own errors are gnet's (which closes the connection).
func (ns *nodeSeal) writeSealed(iov [][]byte, w io.Writer) error {
	n := 0
	for _, b := range iov {
		for len(b) > 0 {
			k := min(len(b), sealPiece-n)
			ns.piece = append(ns.piece, b[:k])
			n += k
			b = b[k:]
			if n == sealPiece {
				if err := ns.emit(w); err != nil {
					return err
				}
				n = 0
			}
		}
	}
	if n > 0 {
		return ns.emit(w)
	}
	return nil
}

// emit seals ns.piece and writes it.
func (ns *nodeSeal) emit(w io.Writer) error {
	var err error
	ns.out, err = ns.seal.SealVec(ns.out[:0], ns.piece)
	clear(ns.piece)
	ns.piece = ns.piece[:0]
	if err != nil {
		return err
	}
	_, _ = w.Write(ns.out) // gnet closes the connection on a write error
	return nil
}

// input opens the whole records of raw (the bytes gnet has buffered) into
// plain and returns the number of raw bytes taken; the caller splits frames
// from ns.plain and then calls consumed. A record that does not open is
// an error wrapping wire.ErrSeal.
func (ns *nodeSeal) input(raw []byte) (int, error) {
	var n int
	var err error
	ns.plain, n, err = ns.open.OpenAll(ns.plain, raw)
	return n, err
}

// consumed drops the first n bytes of plain (the frames handled).
func (ns *nodeSeal) consumed(n int) {
	if n == 0 {
		return
	}
	rest := copy(ns.plain, ns.plain[n:])
	ns.plain = ns.plain[:rest]
	if rest == 0 && cap(ns.plain) > 4<<20 {
		ns.plain = nil
	}
}
