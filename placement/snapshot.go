package placement

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Default option values.
const (
	DefaultEpsilon          = 0.25
	DefaultPointsPerUnit    = 100
	DefaultCapacityUnit     = 1.0
	DefaultMaxPointsPerNode = 1000
	DefaultMaxProbes        = 256
	DefaultChoices          = 2
	// MaxChoices bounds Options.Choices.
	MaxChoices = 8
	// MaxRingPoints bounds the ring of one snapshot (memory about 12 bytes
	// per point).
	MaxRingPoints = 1 << 24
)

// margin is the relative safety margin of the fit test (see the package doc).
const margin = 1e-9

// resumEvery is how many load adjustments pass before T is summed afresh, so
// rounding error from incremental updates cannot build up.
const resumEvery = 4096

// Options configure a Snapshot. The zero value means all defaults.
type Options struct {
	// Epsilon is e in the load bound (1+e) x fair share. Zero means
	// DefaultEpsilon (0.25); otherwise it must be positive and finite.
	Epsilon float64
	// Scorer turns load data into load units; nil means DefaultScorer().
	Scorer Scorer
	// PointsPerUnit is how many ring points a node gets per CapacityUnit of
	// capacity (rounded, at least 1, at most MaxPointsPerNode). More points
	// give a more even first choice and a costlier ring. Zero means 100.
	PointsPerUnit int
	// CapacityUnit is the capacity that earns PointsPerUnit points. Set it
	// near the capacity of a typical node if capacities are not in units
	// around 1. Zero means 1.
	CapacityUnit float64
	// MaxPointsPerNode caps one node's points. Zero means 1000.
	MaxPointsPerNode int
	// MaxProbes is how many ring points Host examines before it falls back
	// to a scan of all Alive nodes. Zero means 256.
	MaxProbes int
	// Choices is how many distinct fitting nodes the walk collects before
	// it takes the one with the smallest load-after/capacity (ties to the
	// one met first). 1 is plain consistent hashing with bounded loads: the
	// first fitting node wins. 2 (the default) adds the power of two
	// choices below the bound, which keeps nodes well under the cap
	// instead of filling each to it. At most MaxChoices. Zero means 2.
	Choices int
}

func (o Options) withDefaults() (Options, error) {
	if o.Epsilon == 0 {
		o.Epsilon = DefaultEpsilon
	}
	if o.Scorer == nil {
		o.Scorer = DefaultScorer()
	}
	if o.PointsPerUnit == 0 {
		o.PointsPerUnit = DefaultPointsPerUnit
	}
	if o.CapacityUnit == 0 {
		o.CapacityUnit = DefaultCapacityUnit
	}
	if o.MaxPointsPerNode == 0 {
		o.MaxPointsPerNode = DefaultMaxPointsPerNode
	}
	if o.MaxProbes == 0 {
		o.MaxProbes = DefaultMaxProbes
	}
	if o.Choices == 0 {
		o.Choices = DefaultChoices
	}
	switch {
	case !(o.Epsilon > 0) || math.IsInf(o.Epsilon, 1):
		return o, fmt.Errorf("epsilon %v: %w", o.Epsilon, ErrInvalidOptions)
	case o.PointsPerUnit < 0:
		return o, fmt.Errorf("points per unit %d: %w", o.PointsPerUnit, ErrInvalidOptions)
	case !(o.CapacityUnit > 0) || math.IsInf(o.CapacityUnit, 1):
		return o, fmt.Errorf("capacity unit %v: %w", o.CapacityUnit, ErrInvalidOptions)
	case o.MaxPointsPerNode < 1 || o.MaxPointsPerNode > MaxRingPoints:
		return o, fmt.Errorf("max points per node %d: %w", o.MaxPointsPerNode, ErrInvalidOptions)
	case o.MaxProbes < 1:
		return o, fmt.Errorf("max probes %d: %w", o.MaxProbes, ErrInvalidOptions)
	case o.Choices < 1 || o.Choices > MaxChoices:
		return o, fmt.Errorf("choices %d: %w", o.Choices, ErrInvalidOptions)
	}
	return o, nil
}

// nodeState is a Node plus what the snapshot derives from it.
type nodeState struct {
	Node
	load   float64 // current load in load units (>= 0)
	points int     // ring points (0 unless Alive)
}

// Snapshot is an immutable membership view (nodes, states, capacities, ring)
// plus a mutable load vector. Build one with NewSnapshot per membership
// change; update loads in place with SetLoad, Commit and AddLoad. See the
// package doc for the concurrency contract.
type Snapshot struct {
	opts  Options
	nodes []nodeState    // sorted by ID
	index map[NodeID]int // ID -> position in nodes
	alive []int32        // indexes of Alive nodes, ascending
	ring  ring           // over the Alive nodes; shared by clones, never mutated

	total   float64 // T: sum of load over Alive nodes
	cap     float64 // C: sum of capacity over Alive nodes
	adjusts int     // load adjustments since total was last summed afresh
}

// NewSnapshot validates nodes and opts and builds a snapshot. nodes may be in
// any order; the snapshot keeps its own copy. Each node's initial load is
// opts.Scorer.NodeLoad of its report.
//
// Errors wrap ErrInvalidNode (bad or duplicate node), ErrInvalidOptions,
// ErrInvalidLoad (the scorer returned a bad node load) or ErrTooLarge. An
// empty membership, or one with no Alive node, is valid: every decision then
// reports false.
func NewSnapshot(nodes []Node, opts Options) (*Snapshot, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Snapshot{opts: o, nodes: make([]nodeState, len(nodes)), index: make(map[NodeID]int, len(nodes))}
	for i := range nodes {
		if err := nodes[i].validate(); err != nil {
			return nil, err
		}
		s.nodes[i].Node = nodes[i]
	}
	slices.SortFunc(s.nodes, func(a, b nodeState) int { return strings.Compare(string(a.ID), string(b.ID)) })
	points := 0
	for i := range s.nodes {
		n := &s.nodes[i]
		if i > 0 && s.nodes[i-1].ID == n.ID {
			return nil, fmt.Errorf("node %q listed twice: %w", n.ID, ErrInvalidNode)
		}
		s.index[n.ID] = i
		l := o.Scorer.NodeLoad(&n.Node)
		if !nonNeg(l) {
			return nil, fmt.Errorf("node %q: scorer load %v: %w", n.ID, l, ErrInvalidLoad)
		}
		n.load = l
		if n.State == Alive {
			n.points = numPoints(n.Capacity, &o)
			points += n.points
			if points > MaxRingPoints {
				return nil, fmt.Errorf("more than %d ring points: %w", MaxRingPoints, ErrTooLarge)
			}
			s.alive = append(s.alive, int32(i))
			s.cap += n.Capacity
		}
	}
	if math.IsInf(s.cap, 1) {
		return nil, fmt.Errorf("total capacity overflows: %w", ErrInvalidNode)
	}
	s.resum()
	if math.IsInf(s.total, 1) {
		return nil, fmt.Errorf("total load overflows: %w", ErrInvalidLoad)
	}
	s.ring = buildRing(s.nodes, s.alive, &o)
	return s, nil
}

// resum recomputes T exactly, in node order.
func (s *Snapshot) resum() {
	t := 0.0
	for _, i := range s.alive {
		t += s.nodes[i].load
	}
	s.total, s.adjusts = t, 0
}

// Clone returns an independent copy: same membership and loads, sharing the
// immutable ring. Later load changes to either do not affect the other.
func (s *Snapshot) Clone() *Snapshot {
	c := *s
	c.nodes = slices.Clone(s.nodes)
	return &c
}

// Options returns the options in effect, defaults filled in.
func (s *Snapshot) Options() Options { return s.opts }

// Len returns the number of nodes in the snapshot, in every state.
func (s *Snapshot) Len() int { return len(s.nodes) }

// Node returns node i (0 <= i < Len(), nodes sorted by ID) as given to
// NewSnapshot or SetLoad, and its current load in load units.
func (s *Snapshot) Node(i int) (Node, float64) { return s.nodes[i].Node, s.nodes[i].load }

// Index returns the position of the node with the given ID.
func (s *Snapshot) Index(id NodeID) (int, bool) {
	i, ok := s.index[id]
	return i, ok
}

// Load returns the current load of the node with the given ID.
func (s *Snapshot) Load(id NodeID) (float64, bool) {
	i, ok := s.index[id]
	if !ok {
		return 0, false
	}
	return s.nodes[i].load, true
}

// Total returns T and C: the summed load and capacity of the Alive nodes.
func (s *Snapshot) Total() (load, capacity float64) { return s.total, s.cap }

// Manager returns the Alive node that manages channel: the owner of the
// first ring point at or after xxhash(channel). It reports false when no
// node is Alive. It does not look at loads.
func (s *Snapshot) Manager(channel string) (NodeID, bool) {
	if len(s.ring.hashes) == 0 {
		return "", false
	}
	return s.nodes[s.ring.owner[s.ring.search(managerKey(channel))]].ID, true
}

// Decision is the outcome of Host. It refers to the snapshot that made it.
type Decision struct {
	Node      NodeID  // the chosen node (Alive)
	Index     int     // its position in the snapshot (see Snapshot.Node)
	Weight    float64 // the streamlet's weight, Scorer.StreamletWeight
	LoadAfter float64 // the node's load with the streamlet added
	// Limit is the node's bound (1+e) * (T+Weight) * Capacity / C.
	Limit float64
	// Probes is how many ring points the walk examined.
	Probes int
	// Fallback: the walk found no node within its limit in MaxProbes
	// points and the node came from the scan of all Alive nodes.
	Fallback bool
	// Overflow: no Alive node could take the streamlet within its limit;
	// the node chosen has the smallest LoadAfter/Capacity.
	Overflow bool
}

// Host chooses the hosting node for streamlet seq (its sequence number in the
// channel) of channel, whose own load is ch. It does not change the snapshot:
// call Commit with the decision (or use Place) once the streamlet is placed,
// so that the next decision sees the load.
//
// It reports false when no node is Alive or the scorer's weight is negative,
// NaN or infinite. Otherwise it walks the ring from the streamlet's key
// (channel mixed with seq), collects the first Options.Choices distinct nodes
// whose load after the add is within their limit, and returns the one with
// the smallest load-after/capacity (ties to the one met first); see the
// package doc for the bound, the fallback and the overflow rule.
func (s *Snapshot) Host(channel string, seq uint64, ch ChannelLoad) (Decision, bool) {
	n := len(s.ring.hashes)
	if n == 0 {
		return Decision{}, false
	}
	w := s.opts.Scorer.StreamletWeight(ch)
	if !nonNeg(w) {
		return Decision{}, false
	}
	// Node i fits when load_i + w <= k * cap_i.
	k := (1 + s.opts.Epsilon) * (s.total + w) / s.cap
	kSafe := k * (1 - margin)
	probes := min(s.opts.MaxProbes, n)
	i := s.ring.search(hostKey(channel, seq))
	// Collect up to Choices distinct fitting nodes; keep the best so far.
	// found[:got] are the nodes collected, to skip repeats of the same node.
	var found [MaxChoices]int32
	got, best, bestRatio := 0, int32(-1), 0.0
	p := 1
	for ; p <= probes; p++ {
		o := s.ring.owner[i]
		if i++; i == n {
			i = 0
		}
		nd := &s.nodes[o]
		after := nd.load + w
		if !(after <= kSafe*nd.Capacity) {
			continue
		}
		seen := false
		for _, f := range found[:got] {
			seen = seen || f == o
		}
		if seen {
			continue
		}
		found[got] = o
		got++
		if r := after / nd.Capacity; best < 0 || r < bestRatio {
			best, bestRatio = o, r
		}
		if got == s.opts.Choices || got == len(s.alive) {
			break
		}
	}
	if best >= 0 {
		nd := &s.nodes[best]
		return Decision{Node: nd.ID, Index: int(best), Weight: w, LoadAfter: nd.load + w,
			Limit: k * nd.Capacity, Probes: min(p, probes)}, true
	}
	// Fallback: the smallest load-after/capacity, ties to the lowest index.
	best, bestRatio = -1, math.Inf(1)
	for _, o := range s.alive {
		nd := &s.nodes[o]
		if r := (nd.load + w) / nd.Capacity; r < bestRatio {
			best, bestRatio = o, r
		}
	}
	if best < 0 { // every ratio is +Inf: only possible with absurd inputs
		best = s.alive[0]
	}
	nd := &s.nodes[best]
	after := nd.load + w
	return Decision{Node: nd.ID, Index: int(best), Weight: w, LoadAfter: after,
		Limit: k * nd.Capacity, Probes: probes, Fallback: true,
		Overflow: !(after <= kSafe*nd.Capacity)}, true
}

// Place is Host followed by Commit of its decision.
func (s *Snapshot) Place(channel string, seq uint64, ch ChannelLoad) (Decision, bool) {
	d, ok := s.Host(channel, seq, ch)
	if ok {
		s.addAt(d.Index, d.Weight)
	}
	return d, ok
}

// Commit adds the decision's weight to the chosen node's load. The decision
// must come from this snapshot or a clone of it (ErrStaleDecision
// otherwise).
func (s *Snapshot) Commit(d Decision) error {
	if d.Index < 0 || d.Index >= len(s.nodes) || s.nodes[d.Index].ID != d.Node {
		return fmt.Errorf("decision for %q at %d: %w", d.Node, d.Index, ErrStaleDecision)
	}
	if !nonNeg(d.Weight) {
		return fmt.Errorf("decision weight %v: %w", d.Weight, ErrInvalidLoad)
	}
	s.addAt(d.Index, d.Weight)
	return nil
}

// AddLoad adds delta (which may be negative, for example a closed
// streamlet's weight) to the load of node id. A load never goes below zero:
// a larger decrease sets it to zero. delta must be finite.
func (s *Snapshot) AddLoad(id NodeID, delta float64) error {
	i, ok := s.index[id]
	if !ok {
		return fmt.Errorf("node %q: %w", id, ErrUnknownNode)
	}
	if math.IsNaN(delta) || math.IsInf(delta, 0) {
		return fmt.Errorf("node %q: delta %v: %w", id, delta, ErrInvalidLoad)
	}
	s.addAt(i, delta)
	return nil
}

// SetLoad replaces node id's load report (a fresh report supersedes what
// Commit and AddLoad added since the last one). Membership and ring do not
// change; build a new snapshot when IDs, capacities or states change.
func (s *Snapshot) SetLoad(id NodeID, l NodeLoad) error {
	i, ok := s.index[id]
	if !ok {
		return fmt.Errorf("node %q: %w", id, ErrUnknownNode)
	}
	if !l.valid() {
		return fmt.Errorf("node %q: load report %+v: %w", id, l, ErrInvalidNode)
	}
	n := s.nodes[i].Node
	n.Load = l
	v := s.opts.Scorer.NodeLoad(&n)
	if !nonNeg(v) {
		return fmt.Errorf("node %q: scorer load %v: %w", id, v, ErrInvalidLoad)
	}
	s.nodes[i].Load = l
	s.addAt(i, v-s.nodes[i].load)
	return nil
}

// addAt changes node i's load by delta, clamped at zero, and keeps T.
func (s *Snapshot) addAt(i int, delta float64) {
	nd := &s.nodes[i]
	after := nd.load + delta
	if !(after > 0) {
		after = 0
	}
	if math.IsInf(after, 1) {
		after = math.MaxFloat64
	}
	if nd.State != Alive {
		nd.load = after
		return
	}
	s.total += after - nd.load
	nd.load = after
	if s.adjusts++; s.adjusts >= resumEvery || s.total < 0 {
		s.resum()
	}
}
