package fault

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The nemesis's schedule: the faults of one randomized run, drawn from a
// seed. Generate is pure (no clock, no I/O): the same seed and Config give
// the same Schedule on every machine and Go version (numbers come from
// PCG's Uint64 only, whose output is fixed, never from helpers whose
// algorithm may change), so a failing seed replays exactly that schedule.
// The run (nemesis_test.go) applies it to real processes.

// FaultKind is what a fault does.
type FaultKind uint8

// The kinds of fault.
const (
	// Isolate takes the node's bridge port down: cut off from its peers and
	// its clients, both directions.
	Isolate FaultKind = iota + 1
	// PairCut drops the packets between Node and Peer, both ways (each
	// still reaches the others and the clients).
	PairCut
	// OneWay drops Node's packets to Peer, or to every peer when Peer < 0
	// (nftables); it still hears them and reaches its clients.
	OneWay
	// Pause stops the node's process (SIGSTOP) and continues it (SIGCONT).
	Pause
	// Kill kills the node (SIGKILL) and starts it again after Hold.
	Kill
	// Drain stops the node with SIGTERM (it drains, then exits) and starts
	// it again once it has exited and Hold has passed.
	Drain
	// KillLeader kills the Raft leader as `sluice cluster status` names it
	// when the fault strikes (Node when no status names one), restarting it
	// after Hold.
	KillLeader
	// KillVoter starts a burst of new channels (metadata commits in
	// flight), kills a voter other than the leader BurstLead later (Node
	// when no status names voters) and restarts it after Hold.
	KillVoter
)

// AllKinds lists every kind, in the order Generate draws from.
var AllKinds = []FaultKind{Isolate, PairCut, OneWay, Pause, Kill, Drain, KillLeader, KillVoter}

var kindNames = map[FaultKind]string{Isolate: "isolate", PairCut: "pair-cut", OneWay: "one-way", Pause: "pause",
	Kill: "kill", Drain: "drain", KillLeader: "kill-leader", KillVoter: "kill-voter"}

func (k FaultKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKinds parses a comma-separated list of kind names ("" = all).
func ParseKinds(s string) ([]FaultKind, error) {
	if strings.TrimSpace(s) == "" {
		return AllKinds, nil
	}
	var out []FaultKind
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for k, n := range kindNames {
			if n == name {
				out, found = append(out, k), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown fault kind %q", name)
		}
	}
	return out, nil
}

// Fault is one fault of a schedule: applied At after the run's start,
// healed Hold later.
type Fault struct {
	Seq  int // 1, 2, ... in order of At
	Kind FaultKind
	At   time.Duration
	Hold time.Duration
	// Node is the node the fault hits (an index); for KillLeader and
	// KillVoter the one used when no status names a leader or voters.
	Node int
	// Peer is the other node of a PairCut or a OneWay; -1 for a OneWay to
	// every peer (and for the kinds that have none).
	Peer int
	// Wipe: a Kill, KillLeader or KillVoter restarts the node with a fresh
	// data directory (it lost its state), where the binary keeps one.
	Wipe bool
	// BurstLead is how long after the burst's start a KillVoter kills.
	BurstLead time.Duration
}

// End is when the fault is healed, from the run's start.
func (f Fault) End() time.Duration { return f.At + f.Hold }

// Involved returns the nodes the fault involves: its node, and the peer
// of a PairCut or of a OneWay to one peer (that peer hears nothing from
// the node: it is cut off from it too).
func (f Fault) Involved() []int {
	if f.Peer >= 0 {
		return []int{f.Node, f.Peer}
	}
	return []int{f.Node}
}

// NodeName is the name of node i of a topology ("a", "b", ...).
func NodeName(i int) string { return string(rune('a' + i)) }

func (f Fault) String() string {
	s := fmt.Sprintf("#%d at %v for %v: %v %s", f.Seq, f.At, f.Hold, f.Kind, NodeName(f.Node))
	switch {
	case f.Kind == PairCut:
		s += " <-> " + NodeName(f.Peer)
	case f.Kind == OneWay && f.Peer < 0:
		s += " -> every peer"
	case f.Kind == OneWay:
		s += " -> " + NodeName(f.Peer)
	case f.Kind == KillLeader:
		s = fmt.Sprintf("#%d at %v for %v: kill-leader (else %s)", f.Seq, f.At, f.Hold, NodeName(f.Node))
	case f.Kind == KillVoter:
		s = fmt.Sprintf("#%d at %v for %v: kill-voter %v into a burst of new channels (else %s)", f.Seq, f.At, f.Hold,
			f.BurstLead, NodeName(f.Node))
	}
	if f.Wipe {
		s += ", restarted with a fresh data dir"
	}
	return s
}

// Config is what a schedule is drawn for.
type Config struct {
	Nodes    int
	Duration time.Duration // the run: faults start after LeadIn and end by Duration - Tail
	// Combined lets faults overlap, with at most MaxAffected nodes
	// involved in the faults active at any moment (at least 1); without
	// it one fault at a time.
	Combined    bool
	MaxAffected int
	Kinds       []FaultKind // drawn from; nil = AllKinds
}

// Schedule is the faults of one run.
type Schedule struct {
	Seed   uint64
	Config Config
	Faults []Fault
}

// Timing of every schedule.
const (
	LeadIn  = 5 * time.Second // quiet at the start (publishers and subscribers settle)
	Tail    = 5 * time.Second // quiet after the last heal, before the run ends
	minHold = 5 * time.Second
	maxHold = 20 * time.Second
	// A pause is held 5 to 15 s.
	maxPause = 15 * time.Second
	// Quiet between faults (one at a time), or between fault starts
	// (combined).
	minGap = 3 * time.Second
	maxGap = 10 * time.Second
	// The step of every drawn duration (schedules print in tenths).
	grain = 100 * time.Millisecond
)

// draw holds a schedule's generator. Every number comes from Uint64.
type draw struct{ r *rand.PCG }

// n returns a number in [0, k).
func (d draw) n(k int) int { return int(d.r.Uint64() % uint64(k)) }

// dur returns a duration in [lo, hi] in steps of grain.
func (d draw) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(d.n(int((hi-lo)/grain)+1))*grain
}

// Generate draws the schedule of seed for cfg. Faults are held 5 to 20 s
// (pauses 5 to 15 s), start after LeadIn and are healed by Duration -
// Tail. One at a time, each is followed by 3 to 10 s of quiet; combined,
// a fault starts 3 to 10 s after the one before, on nodes that no active
// fault involves, while the nodes involved stay within MaxAffected (else
// it waits for the next heal).
func Generate(seed uint64, cfg Config) Schedule {
	kinds := cfg.Kinds
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	maxAff := cfg.Nodes // one at a time: a fault may involve any nodes
	if cfg.Combined {
		maxAff = max(cfg.MaxAffected, 1)
	}
	d := draw{rand.NewPCG(seed, 0x6e656d65736973)} // "nemesis"
	s := Schedule{Seed: seed, Config: cfg}
	end := cfg.Duration - Tail
	t := LeadIn
	for t+minHold <= end {
		f := Fault{Kind: kinds[d.n(len(kinds))], At: t, Peer: -1}
		f.Hold = d.dur(minHold, pick(f.Kind == Pause, maxPause, maxHold))
		if f.End() > end {
			f.Hold = (end - t) / grain * grain
		}
		var busy []int // nodes involved in faults active at t
		if cfg.Combined {
			for _, g := range s.Faults {
				if g.At <= t && t < g.End() {
					busy = append(busy, g.Involved()...)
				}
			}
		}
		if !d.place(&f, cfg.Nodes, busy, maxAff) {
			t = nextHeal(s.Faults, t) + d.dur(minGap, maxGap)
			continue
		}
		f.Seq = len(s.Faults) + 1
		s.Faults = append(s.Faults, f)
		if cfg.Combined {
			t += d.dur(minGap, maxGap)
		} else {
			t = f.End() + d.dur(minGap, maxGap)
		}
	}
	return s
}

// place draws the nodes of f among those not in busy, within maxAff
// nodes involved in all; false when there are none to draw.
func (d draw) place(f *Fault, nodes int, busy []int, maxAff int) bool {
	var free []int
	for i := 0; i < nodes; i++ {
		if !containsInt(busy, i) {
			free = append(free, i)
		}
	}
	room := maxAff - len(busy)
	if len(free) == 0 || room < 1 {
		return false
	}
	f.Node = free[d.n(len(free))]
	switch f.Kind {
	case PairCut, OneWay:
		if f.Kind == OneWay && d.n(2) == 0 {
			break // to every peer: it involves the node only
		}
		var peers []int
		for _, i := range free {
			if i != f.Node {
				peers = append(peers, i)
			}
		}
		switch {
		case len(peers) > 0 && room >= 2:
			f.Peer = peers[d.n(len(peers))]
		case f.Kind == PairCut:
			return false
		} // else a one-way to every peer
	case Kill, KillLeader, KillVoter:
		f.Wipe = d.n(4) == 0
		if f.Kind == KillVoter {
			f.BurstLead = d.dur(grain, 10*grain)
		}
	}
	return true
}

// nextHeal is the earliest end after t of the faults active at t (t
// itself when none is).
func nextHeal(fs []Fault, t time.Duration) time.Duration {
	next := time.Duration(-1)
	for _, f := range fs {
		if f.At <= t && t < f.End() && (next < 0 || f.End() < next) {
			next = f.End()
		}
	}
	return max(next, t)
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// LastHeal is when the schedule's last fault is healed (0 for none).
func (s Schedule) LastHeal() time.Duration {
	var last time.Duration
	for _, f := range s.Faults {
		last = max(last, f.End())
	}
	return last
}

// String prints the seed, the configuration and every fault, one a line.
func (s Schedule) String() string {
	var b strings.Builder
	mode := "one fault at a time"
	if s.Config.Combined {
		mode = fmt.Sprintf("combined, at most %d nodes involved at once", max(s.Config.MaxAffected, 1))
	}
	kinds := "every kind"
	if len(s.Config.Kinds) > 0 {
		kinds = fmt.Sprint(s.Config.Kinds)
	}
	fmt.Fprintf(&b, "seed %d: %d nodes, %v, %s, %s; %d faults, the last healed at %v\n", s.Seed, s.Config.Nodes,
		s.Config.Duration, mode, kinds, len(s.Faults), s.LastHeal())
	for _, f := range s.Faults {
		b.WriteString("  " + f.String() + "\n")
	}
	return b.String()
}

// ParseSeeds parses a comma-separated list of seeds (decimal).
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %v", f, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// pick returns a when cond holds, else b.
func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}
