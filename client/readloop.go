package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/sluice-rtm/sluice/wire"
)

// connSource is the byte source of a session's wire.Reader: the socket nc,
// read with nc.Read during the handshake and on the plain path (TLS, a
// WithDialer connection that is no *net.TCPConn, other platforms), and
// with recvmsg(2) on the socket's descriptor while the raw path runs
// (rawread_linux.go).
type connSource struct {
	raw rawState // inactive except inside the raw path's read callback
	nc  net.Conn
}

// Read implements io.Reader for the session's wire.Reader; only the reader
// goroutine (before it, the handshake) calls it.
func (c *connSource) Read(p []byte) (int, error) {
	if c.raw.active() {
		return c.raw.read(p)
	}
	return c.nc.Read(p)
}

// frameReader reads a session's frames: the reader goroutine's loop. Its
// source and wire.Reader are values in it, one allocation: with thousands
// of connections each arrival finds them cold in the CPU cache.
type frameReader struct {
	src connSource
	rd  wire.Reader
	// stopped is set when the session fails (before its socket is
	// closed): the loop stops after the frame it is handling. A flag,
	// not the session's done channel: it is checked after every frame.
	stopped atomic.Bool
	// onPark, if set (tests), is called on the raw path each time the
	// reader is about to wait for the socket, with the bytes read so far.
	onPark func(read int64)
	// noInq (tests) makes the raw path run as on a kernel without
	// TCP_INQ: reading until EAGAIN.
	noInq bool
}

func newFrameReader(nc net.Conn, maxBody uint32) *frameReader {
	fr := &frameReader{src: connSource{nc: nc}}
	fr.rd = *wire.NewReader(&fr.src, maxBody)
	return fr
}

// run reads frames and hands each to handle, in order, until handle
// returns an error (returned), reading fails (returned, wrapping
// ErrProtocol for malformed input, ErrDisconnected otherwise) or stopped is
// set (nil). On Linux a plain TCP connection is read by the raw path,
// which costs one read per arrival of data instead of two.
func (fr *frameReader) run(handle func(wire.Header, []byte) error) error {
	if ok, err := fr.runRaw(handle); ok {
		return err
	}
	for {
		h, body, err := fr.rd.Next()
		if err != nil {
			if fr.stopped.Load() {
				return nil // closed by session.fail: not a new cause
			}
			return readErr(err)
		}
		if err := handle(h, body); err != nil {
			return err
		}
		if fr.stopped.Load() {
			return nil
		}
	}
}

// readErr classifies an error of reading the connection.
func readErr(err error) error {
	switch {
	case errors.Is(err, wire.ErrMalformed):
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: server closed the connection", ErrDisconnected)
	default:
		return fmt.Errorf("%w: read: %w", ErrDisconnected, err)
	}
}
