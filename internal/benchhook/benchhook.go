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

// Counting of the node frames the servers of this process receive, for
// the benchmarks that count round trips between nodes (engine's
// BenchmarkClusterRollover): by frame type, and NODE_REQUESTs by op.
var (
	countFrames atomic.Bool
	frameCounts [256]atomic.Int64
	opCounts    [256]atomic.Int64
)

// CountNodeFrames turns the counting of received node frames on (the
// counts start from zero) or off. Safe for concurrent use.
func CountNodeFrames(on bool) {
	if on {
		for i := range frameCounts {
			frameCounts[i].Store(0)
			opCounts[i].Store(0)
		}
	}
	countFrames.Store(on)
}

// NodeFrame counts a node frame of type typ received from a peer (package
// cluster, for every frame it reads on an accepted node connection); a
// no-op while counting is off.
func NodeFrame(typ uint8) {
	if countFrames.Load() {
		frameCounts[typ].Add(1)
	}
}

// NodeRequest counts a NODE_REQUEST of op received from a peer; a no-op
// while counting is off.
func NodeRequest(op uint8) {
	if countFrames.Load() {
		opCounts[op].Add(1)
	}
}

// NodeFrameCounts returns the counts so far: node frames by type and
// NODE_REQUESTs by op.
func NodeFrameCounts() (frames, ops [256]int64) {
	for i := range frameCounts {
		frames[i], ops[i] = frameCounts[i].Load(), opCounts[i].Load()
	}
	return frames, ops
}
