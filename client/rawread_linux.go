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
// subscriber connections in one process) pays two reads per frame: one
// that returns the frame and one that returns EAGAIN.
//
// The raw path skips the second one where that is safe. It runs the whole
// read loop inside one call of syscall.RawConn.Read (internal/poll
// FD.RawRead): the callback reads the socket, dispatches every whole frame,
// and when the kernel said that the read left nothing in the socket it
// returns false without another read, so RawRead parks on the poller
// (pollDesc.waitRead). The kernel says so with TCP_INQ (Linux 4.18): every
// recvmsg carries a TCP_CM_INQ message with the bytes still queued, and
// it is not zero after a FIN was received, so an end of stream read in
// the same call as the last data is never mistaken for an empty socket. (A
// short read alone does not tell: the read that returns the last bytes
// also consumes a FIN queued behind them, no readiness follows, and the
// reader would wait forever; TestRawRead_DataThenFINTogether.) No arrival
// is missed:
//   - The runtime's poller is edge-triggered (epoll EPOLLET); every arrival
//     after the read runs the socket's data-ready callback, and the runtime
//     then marks the descriptor ready (runtime/netpoll.go netpollunblock
//     sets pdReady when no goroutine waits yet, or wakes the waiting one).
//     waitRead consumes a pdReady set before it is reached and returns at
//     once; the callback then reads again.
//   - RawRead clears pdReady only once, on entry (prepareRead ->
//     poll_runtime_pollReset). That is why the loop stays inside one
//     RawRead for the session's life: a fresh RawRead would have to read
//     first (it may have cleared a readiness that arrived meanwhile).
//   - A readiness marked for bytes that the callback already read costs one
//     read that returns EAGAIN, no more.
// Without TCP_INQ (setsockopt refused) the path reads until EAGAIN, as
// net.Conn.Read does. Close and deadlines act through the poller: a parked
// reader's waitRead returns ErrNetClosing or ErrDeadlineExceeded, and
// RawRead returns it. While the callback runs (dispatching), Close of the
// socket waits for it to return (it holds the descriptor's read lock);
// session.fail sets stopped and closes done first, which the loop checks
// after every frame and deliver watches, so the wait is short unless a
// SubscribeFunc callback is slow.

// rawState is the raw path's read state, owned by the reader goroutine.
type rawState struct {
	fd  int
	on  bool // inside RawRead's callback: fd is valid and is read directly
	inq bool // TCP_INQ is on: each recvmsg says how many bytes it left
	// drained: the last read left the socket empty (TCP_CM_INQ 0), so the
	// next read of this RawRead is answered with ErrWouldBlock without a
	// system call.
	drained bool
	// Counters (the tests check them): reads, those that returned EAGAIN,
	// and bytes read.
	reads, wouldBlock, bytes int64
	// recvmsg's arguments, kept here so that a read allocates nothing.
	iov  unix.Iovec
	msg  unix.Msghdr
	cbuf [4]uint64 // control buffer (8-byte aligned) for one TCP_CM_INQ
}

func (r *rawState) active() bool { return r.on }

// read reads the socket once, or reports ErrWouldBlock without a system
// call after a read that left it empty.
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
		// RawSyscall, not unix.Read/Recvmsg: the socket is non-blocking,
		// so the call cannot block, and the runtime's syscall bookkeeping
		// (entersyscall/exitsyscall, waking sysmon) is pure cost here.
		var m uintptr
		var errno unix.Errno
		if r.inq {
			r.iov.Base = &p[0]
			r.iov.SetLen(len(p))
			r.msg.Iov = &r.iov
			r.msg.SetIovlen(1)
			r.msg.Control = (*byte)(unsafe.Pointer(&r.cbuf[0]))
			r.msg.SetControllen(len(r.cbuf) * 8)
			m, _, errno = unix.RawSyscall(unix.SYS_RECVMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&r.msg)), 0)
			r.iov.Base = nil
		} else {
			m, _, errno = unix.RawSyscall(unix.SYS_READ, uintptr(r.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		}
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
		r.drained = r.inq && r.inqZero()
		return n, nil
	}
}

// inqZero reports whether the last recvmsg's TCP_CM_INQ said that no
// bytes (and no FIN) are left; false when the message is missing.
func (r *rawState) inqZero() bool {
	hdr := unix.CmsgLen(0)
	if uint64(r.msg.Controllen) < uint64(hdr+4) || r.msg.Flags&unix.MSG_CTRUNC != 0 {
		return false
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&r.cbuf[0]))
	if h.Level != unix.SOL_TCP || h.Type != unix.TCP_CM_INQ || uint64(h.Len) < uint64(hdr+4) {
		return false
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(&r.cbuf[0]), hdr)) == 0
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
	if err := rc.Control(func(fd uintptr) {
		r.inq = !fr.noInq && unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_INQ, 1) == nil
	}); err != nil {
		return false, nil
	}
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
