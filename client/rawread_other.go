//go:build !linux

package client

import "github.com/sluice-rtm/sluice/wire"

// rawState is empty: other platforms read every connection with nc.Read.
type rawState struct{}

func (rawState) active() bool { return false }

func (rawState) read([]byte) (int, error) { return 0, wire.ErrWouldBlock }

// runRaw reports false: the plain path reads the connection.
func (fr *frameReader) runRaw(func(wire.Header, []byte) error) (bool, error) { return false, nil }
