package nodelink

import (
	"net"
	"time"

	"github.com/sluice-rtm/sluice/ringbuf"
)

// Node connections as the engine carries them. This package owns both
// directions of every node connection: the handshake (PROTOCOL.md 9.1),
// the record layer (9.8), requests and their answers, heartbeats; the
// data plane's frames go to the Handler. The engine's event loops only
// carry the bytes: a loop hands what it read to the connection's NodeConn
// (Input), writes what the NodeConn queued with the NodeConn's Write
// (which seals it), and offers the output operations the frames need
// through Conn.

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
	// Hold keeps b acquired (b.Acquire, done by the caller) until the
	// loop's flush, which releases it: the bytes Shared from it stay
	// valid until then.
	Hold(b *ringbuf.Buffer)
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
