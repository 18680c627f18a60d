// Package benchhook holds switches that only this module's benchmarks
// set, to measure a protection against the same build without it. It is
// an internal package: no program outside this module can import it, and
// no flag, configuration key or Options field reaches it, so an operator
// cannot turn a protection off by accident. A server started while a
// switch is on logs a warning.
package benchhook

import "sync/atomic"

var plainNodeLinks atomic.Bool

// SetPlainNodeLinks makes the servers started from now on send the frames
// of their node connections unsealed (the handshake still authenticates
// both nodes; PROTOCOL.md 9.8 is skipped). Nodes started with it on can
// only talk to each other. For bench/cluster's protected-vs-plain
// comparison only. Safe for concurrent use.
func SetPlainNodeLinks(on bool) { plainNodeLinks.Store(on) }

// PlainNodeLinks reports the switch (read by engine.Start).
func PlainNodeLinks() bool { return plainNodeLinks.Load() }
