package placement

import "math"

// Scorer turns load data into load units. Replace it through Options.Scorer.
//
// The two methods must agree on units: Host adds StreamletWeight to NodeLoad
// and compares the sum with the node's share of the total. Both must return
// finite values >= 0 and must be deterministic (no clock, no randomness);
// Host rejects a weight that is negative, NaN or infinite, and NewSnapshot
// rejects such a node load. A Scorer is called from whatever goroutine calls
// the Snapshot, so it must be safe for concurrent use if the Snapshot is
// shared; a Scorer without mutable state (like LinearScorer) is.
type Scorer interface {
	// NodeLoad returns the load of node n from its node-specific data.
	NodeLoad(n *Node) float64
	// StreamletWeight returns the load a new streamlet of a channel with the
	// given channel-specific data adds to the node hosting it.
	StreamletWeight(ch ChannelLoad) float64
}

// LinearScorer is the default Scorer: a weighted sum, in "message per second"
// units, of the load data. Every field is a coefficient; zero turns a term off.
//
// Node load:
//
//	PerStreamlet*Streamlets
//	+ PerMsg*(MsgsIn + MsgsOut) + PerByte*(BytesIn + BytesOut)
//	+ PerConn*Conns + (PerCPU*CPU + PerMem*Mem)*Capacity
//
// Streamlet weight, for a channel publishing m msgs/s and b bytes/s read by
// r = min(Subscribers, FanoutCap) read streams:
//
//	PerStreamlet + (PerMsg*m + PerByte*b) * f * (1 + r)
//	where f = min(1, LimitMsgs/(m*Window), LimitBytes/(b*Window))
//
// f is the part of one reporting window that a single streamlet can absorb
// the channel's traffic for: a streamlet takes at most LimitMsgs messages and
// LimitBytes bytes, then the channel rolls over to a new streamlet, which is
// placed afresh. So a hot channel counts for more, in messages and bytes in
// and out, but only up to one streamlet's worth per window; that cap is what
// lets a hot channel's load spread over nodes instead of landing on one.
// The weight uses the same per-message and per-byte coefficients as the node
// load, so a node reports about the sum of the weights of the streamlets it
// took in its last window. Negative, NaN or infinite channel figures count
// as zero; Window <= 0 turns the cap off (f = 1). ChannelLoad.LimitMsgs and
// LimitBytes, when positive, replace LimitMsgs and LimitBytes for that channel.
type LinearScorer struct {
	PerStreamlet float64 // per hosted streamlet (memory, index, timers)
	PerMsg       float64 // per message per second, in or out
	PerByte      float64 // per byte per second, in or out
	PerConn      float64 // per open connection
	PerCPU       float64 // per unit of capacity fully busy (CPU = 1)
	PerMem       float64 // per unit of capacity with memory full (Mem = 1)
	FanoutCap    int     // most read streams one channel is charged for
	LimitMsgs    float64 // limit-msgs: messages one streamlet takes
	LimitBytes   float64 // limit-size: bytes one streamlet takes
	Window       float64 // load-report window, seconds; <= 0 turns the cap off
}

// DefaultScorer returns the LinearScorer with Sluice's defaults: a streamlet
// costs as much as 10 msg/s, a KiB/s as much as 1 msg/s, a connection 1 msg/s,
// a fully busy CPU or full memory 100,000 msg/s per capacity unit; up to 8
// read streams per channel; limit-msgs 5,000, limit-size 2 MiB, a 1 s window.
func DefaultScorer() *LinearScorer {
	return &LinearScorer{
		PerStreamlet: 10,
		PerMsg:       1,
		PerByte:      1.0 / 1024,
		PerConn:      1,
		PerCPU:       100000,
		PerMem:       100000,
		FanoutCap:    8,
		LimitMsgs:    5000,
		LimitBytes:   2 << 20,
		Window:       1,
	}
}

// NodeLoad implements Scorer.
func (s *LinearScorer) NodeLoad(n *Node) float64 {
	l := &n.Load
	return s.PerStreamlet*float64(l.Streamlets) +
		s.PerMsg*(l.MsgsInPerSec+l.MsgsOutPerSec) +
		s.PerByte*(l.BytesInPerSec+l.BytesOutPerSec) +
		s.PerConn*float64(l.Conns) +
		(s.PerCPU*l.CPU+s.PerMem*l.Mem)*n.Capacity
}

// StreamletWeight implements Scorer.
func (s *LinearScorer) StreamletWeight(ch ChannelLoad) float64 {
	m, b := clean(ch.MsgsPerSec), clean(ch.BytesPerSec)
	lm, lb := s.LimitMsgs, s.LimitBytes
	if x := clean(ch.LimitMsgs); x > 0 {
		lm = x
	}
	if x := clean(ch.LimitBytes); x > 0 {
		lb = x
	}
	f := 1.0
	if s.Window > 0 {
		if m*s.Window > lm {
			f = lm / (m * s.Window)
		}
		if b*s.Window*f > lb {
			f = lb / (b * s.Window)
		}
	}
	r := ch.Subscribers
	if r < 0 {
		r = 0
	}
	if r > s.FanoutCap {
		r = s.FanoutCap
	}
	return s.PerStreamlet + (s.PerMsg*m+s.PerByte*b)*f*float64(1+r)
}

// clean maps negative, NaN and infinite values to 0.
func clean(x float64) float64 {
	if x >= 0 && !math.IsInf(x, 1) {
		return x
	}
	return 0
}
