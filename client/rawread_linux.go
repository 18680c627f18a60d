//go:build linux

package client

import (
	"io"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluice-rtm/sluice/wire"
)

// The raw read path. net.Conn.Read reads until read(2) says EAGAIN before
// it parks the goroutine on the poller, so a connection that receives one
// frame at a time (a subscriber of a quiet channel, each of 10,000
// subscriber connections in one process) pays two read(2) per frame: one
// that returns the frame and one that returns EAGAIN.
//
// The raw path skips the second one where that is safe. It runs the whole
// read loop inside one call of syscall.RawConn.Read (internal/poll
// FD.RawRead): the callback reads the socket, dispatches every whole frame,
// and when a read returned less than the free buffer space (the socket
// held no more bytes at that instant: a TCP recv returns what is queued, up
// to the length asked) it returns false without another read(2), so
// RawRead parks on the poller (pollDesc.waitRead). No arrival is missed:
//   - The runtime's poller is edge-triggered (epoll EPOLLET); every arrival
//     of data after that read runs the socket's data-ready callback, and
//     the runtime then marks the descriptor ready (runtime/netpoll.go
//     netpollunblock sets pdReady when no goroutine waits yet, or wakes
//     the waiting one). waitRead consumes a pdReady set before it is
//     reached and returns at once; the callback then reads again.
//   - RawRead clears pdReady only once, on entry (prepareRead ->
//     poll_runtime_pollReset). That is why the loop stays inside one
//     RawRead for the session's life: a fresh RawRead would have to read
//     first (it may have cleared a readiness that arrived meanwhile).
//   - A readiness marked for bytes that the callback already read costs one
//     read(2) that returns EAGAIN, no more.
// Close and deadlines act through the poller: a parked reader's waitRead
// returns ErrNetClosing or ErrDeadlineExceeded, and RawRead returns it.
// While the callback runs (dispatching), Close of the socket waits for it
// to return (it holds the descriptor's read lock); session.fail closes
// stopped and done first, which the loop checks after every frame and
// deliver watches, so the wait is short unless a SubscribeFunc callback is slow.

// rawState is the raw path's read state, owned by the reader goroutine.
type rawState struct {
	fd int
	on bool // inside RawRead's callback: fd is valid and is read directly
	// drained: the last read returned less than asked, so the socket was
	// empty at that instant; the next read of this RawRead is answered
	// with ErrWouldBlock without a system call.
	drained bool
	// Counters (the tests check them): read(2) calls, those that returned
	// EAGAIN, and bytes read.
	reads, wouldBlock, bytes int64
}

func (r *rawState) active() bool { return r.on }

// read reads the socket once, or reports ErrWouldBlock without a system
// call right after a short read.
func (r *rawState) read(p []byte) (int, error) {
	if r.drained {
		r.drained = false
		return 0, wire.ErrWouldBlock
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		r.reads++
		// RawSyscall, not unix.Read: the socket is non-blocking, so the
		// call cannot block, and the runtime's syscall bookkeeping
		// (entersyscall/exitsyscall, waking sysmon) is pure cost here.
		m, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(r.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		n := int(m)
		switch {
		case errno == unix.EINTR:
			continue
		case errno == unix.EAGAIN:
			r.wouldBlock++
			return 0, wire.ErrWouldBlock
		case errno != 0:
			return 0, os.NewSyscallError("read", errno)
		case n == 0:
			return 0, io.EOF
		case n < 0 || n > len(p):
			return 0, os.NewSyscallError("read", unix.EINVAL) // never: the kernel bounds n by len(p)
		}
		r.bytes += int64(n)
		r.drained = n < len(p)
		return n, nil
	}
}

// runRaw runs the read loop on the raw path, for a *net.TCPConn; it
// reports false (and reads nothing) for any other connection, which the
// plain path reads.
func (fr *frameReader) runRaw(handle func(wire.Header, []byte) error) (bool, error) {
	tc, ok := fr.src.nc.(*net.TCPConn)
	if !ok {
		return false, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false, nil
	}
	r := &fr.src.raw
	var result error
	rerr := rc.Read(func(fd uintptr) bool {
		r.fd, r.on = int(fd), true
		for {
			h, body, err := fr.rd.Next()
			if err == wire.ErrWouldBlock {
				if fr.onPark != nil {
					fr.onPark(r.bytes)
				}
				return false // park until the socket is readable
			}
			if err != nil {
				result = readErr(err)
				return true
			}
			if err := handle(h, body); err != nil {
				result = err
				return true
			}
			if fr.stopped.Load() {
				return true
			}
		}
	})
	r.on, r.drained = false, false
	if rerr != nil && result == nil {
		if !fr.stopped.Load() { // else closed by session.fail: not a new cause
			result = readErr(rerr)
		}
	}
	return true, result
}
