//go:build linux

package engine

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawMax bounds the bytes offered to one raw writev. The loop's thread
// cannot be preempted while it is in the kernel (a stop-the-world waits
// for it), so one call copies at most about this much; more output takes
// more calls.
const rawMax = 256 << 10

// rawWriter writes a connection's output with writev(2) issued as a raw
// system call: without the runtime's syscall bookkeeping (entersyscall /
// exitsyscall). A writev of a delivery takes ~20 us of kernel time (TCP
// send and the loopback receive); with the ordinary wrapper sysmon counts
// every such call as a blocking one and hands the loop's P to another
// thread, at its shortest delay (issue 16: sysmon 8.7% of the server's CPU,
// 7.6k context switches/s). The sockets are non-blocking, so the call never
// blocks; it runs on the loop's goroutine only, which owns the iovec
// scratch.
type rawWriter struct {
	iov []unix.Iovec // scratch, at most iovMax entries, cleared after each call
}

// iovMax is IOV_MAX on Linux: the most vectors one writev takes.
const iovMax = 1024

// write writes bs to the non-blocking socket fd until it is all written,
// the socket is full or an error other than EINTR occurs. It returns what
// was not written: a suffix of bs whose first element may have been
// shortened in place (bs's elements are the caller's to modify, as for
// gnet's Writev). err is nil for a full socket (EAGAIN), set for any other
// failure; rest is then everything not written either way. bs may be
// longer than IOV_MAX.
func (w *rawWriter) write(fd int, bs [][]byte) (rest [][]byte, err error) {
	if w.iov == nil {
		w.iov = make([]unix.Iovec, 0, iovMax)
	}
	for len(bs) > 0 {
		iov := w.iov[:0]
		offered := 0
		for _, b := range bs {
			if len(iov) == iovMax || offered == rawMax {
				break
			}
			if len(b) == 0 {
				continue
			}
			k := min(len(b), rawMax-offered)
			iov = append(iov, unix.Iovec{Base: &b[0]})
			iov[len(iov)-1].SetLen(k)
			offered += k
		}
		if offered == 0 {
			return nil, nil // only empty vectors
		}
		n, e := rawWritev(fd, iov)
		clear(iov) // no reference to the output beyond this call
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			if e == unix.EAGAIN {
				return bs, nil
			}
			return bs, e
		}
		bs = advanceVecs(bs, n)
		if n < offered {
			return bs, nil // the socket took part: it is full
		}
	}
	return nil, nil
}

// rawWritev is writev(2) as a raw system call.
func rawWritev(fd int, iov []unix.Iovec) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	return int(r), e
}
