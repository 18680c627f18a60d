//go:build !linux

package client

import "net"

// ackedBytes reports false: elsewhere the PING timeout alone tells a dead
// connection (acked_linux.go).
func ackedBytes(net.Conn) (uint64, bool) { return 0, false }
