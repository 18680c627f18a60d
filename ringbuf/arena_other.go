//go:build !linux

package ringbuf

import "errors"

// mapSupported: elsewhere history stays on the Go heap.
const mapSupported = false

func mapBlock(int) ([]byte, error) { return nil, errors.New("ringbuf: no off-heap memory here") }
func releasePages([]byte)          {}
func arenaGuard([]byte, bool)      {}
