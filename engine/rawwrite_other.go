//go:build !linux

package engine

import "errors"

// rawWriter without a raw system call: write returns everything, and
// conn.writev hands it to gnet's Writev.
type rawWriter struct{}

var errNoRawWrite = errors.New("no raw writev on this OS")

func (*rawWriter) write(_ int, bs [][]byte) ([][]byte, error) { return bs, errNoRawWrite }
