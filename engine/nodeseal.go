package engine

import (
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
	// out is the sealed output of one flush, reused.
	out []byte
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

// sealOutput seals the connection's pending output vector into one
// buffer (conn.flush). It fails only when the sequence numbers of the
// direction are exhausted.
func (ns *nodeSeal) sealOutput(iov [][]byte) ([]byte, error) {
	var err error
	ns.out, err = ns.seal.SealVec(ns.out[:0], iov)
	return ns.out, err
}

// afterFlush drops a large output buffer once written (gnet has copied
// what the socket did not take).
func (ns *nodeSeal) afterFlush() {
	if cap(ns.out) > 1<<20 {
		ns.out = nil
	}
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
