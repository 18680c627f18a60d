//go:build linux

package client

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ackedBytes returns how many bytes the peer's TCP stack has acknowledged
// on nc (TCP_INFO tcpi_bytes_acked), unwrapping TLS; false when nc is not
// a TCP socket (e.g. a WebSocket dialer's connection) or the kernel does
// not say.
func ackedBytes(nc net.Conn) (uint64, bool) {
	for {
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		nc = u.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, false
	}
	if _, tcp := nc.(*net.TCPConn); !tcp {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n uint64
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); gerr == nil {
			n = info.Bytes_acked
		}
	}); err != nil || gerr != nil {
		return 0, false
	}
	return n, true
}
