package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refManager is the brute-force reference for Snapshot.Manager: the Alive
// node whose point is the shortest clockwise distance from the key, ties to
// the lower node index (ID order).
func refManager(s *Snapshot, channel string) (NodeID, bool) {
	h := managerKey(channel)
	best, bestD := -1, uint64(0)
	for i := 0; i < s.Len(); i++ {
		n, _ := s.Node(i)
		if n.State != Alive {
			continue
		}
		seed := nodeHash(n.ID)
		for v := 0; v < numPoints(n.Capacity, &s.opts); v++ {
			d := pointHash(seed, v) - h
			if best < 0 || d < bestD {
				best, bestD = i, d
			}
		}
	}
	if best < 0 {
		return "", false
	}
	n, _ := s.Node(best)
	return n.ID, true
}

// freshTotals sums load and capacity of the Alive nodes from scratch.
func freshTotals(s *Snapshot) (t, c float64) {
	for i := 0; i < s.Len(); i++ {
		n, l := s.Node(i)
		if n.State == Alive {
			t += l
			c += n.Capacity
		}
	}
	return t, c
}

// fits is the bound of the package doc, evaluated independently.
func fits(s *Snapshot, i int, w, t, c float64) bool {
	n, l := s.Node(i)
	return l+w <= (1+s.opts.Epsilon)*(t+w)*n.Capacity/c*(1-margin)
}

// refHost is the brute-force reference for Snapshot.Host: sort every point
// by clockwise distance from the key, try the first MaxProbes in order, and
// otherwise take the smallest load-after/capacity.
func refHost(s *Snapshot, channel string, seq uint64, ch ChannelLoad) (NodeID, bool, bool) {
	w := s.opts.Scorer.StreamletWeight(ch)
	h := hostKey(channel, seq)
	type pt struct {
		d uint64
		o int
	}
	var pts []pt
	for i := 0; i < s.Len(); i++ {
		n, _ := s.Node(i)
		if n.State != Alive {
			continue
		}
		seed := nodeHash(n.ID)
		for v := 0; v < numPoints(n.Capacity, &s.opts); v++ {
			pts = append(pts, pt{pointHash(seed, v) - h, i})
		}
	}
	if len(pts) == 0 {
		return "", false, false
	}
	slices.SortFunc(pts, func(a, b pt) int {
		if a.d != b.d {
			if a.d < b.d {
				return -1
			}
			return 1
		}
		return a.o - b.o
	})
	t, c := freshTotals(s)
	alive := 0
	for i := 0; i < s.Len(); i++ {
		if n, _ := s.Node(i); n.State == Alive {
			alive++
		}
	}
	var found []int
	for _, p := range pts[:min(len(pts), s.opts.MaxProbes)] {
		if fits(s, p.o, w, t, c) && !slices.Contains(found, p.o) {
			found = append(found, p.o)
			if len(found) == s.opts.Choices || len(found) == alive {
				break
			}
		}
	}
	if len(found) > 0 {
		best := found[0]
		for _, o := range found[1:] {
			nb, lb := s.Node(best)
			no, lo := s.Node(o)
			if (lo+w)/no.Capacity < (lb+w)/nb.Capacity {
				best = o
			}
		}
		n, _ := s.Node(best)
		return n.ID, true, false
	}
	best, bestR := -1, math.Inf(1)
	for i := 0; i < s.Len(); i++ {
		n, l := s.Node(i)
		if n.State == Alive && (l+w)/n.Capacity < bestR {
			best, bestR = i, (l+w)/n.Capacity
		}
	}
	n, _ := s.Node(best)
	return n.ID, true, !fits(s, best, w, t, c)
}

// randNodes makes a random valid membership.
func randNodes(r *rand.Rand, n int) []Node {
	caps := []float64{0.5, 1, 1, 2, 4}
	nodes := make([]Node, n)
	for i := range nodes {
		st := Alive
		switch r.IntN(10) {
		case 0:
			st = Draining
		case 1:
			st = Down
		}
		nodes[i] = Node{
			ID:       NodeID(fmt.Sprintf("node-%d-%d", i, r.IntN(1000))),
			Capacity: caps[r.IntN(len(caps))],
			State:    st,
			Load: NodeLoad{
				Streamlets:   r.IntN(500),
				MsgsInPerSec: r.Float64() * 5000, MsgsOutPerSec: r.Float64() * 20000,
				BytesInPerSec: r.Float64() * 1e6, BytesOutPerSec: r.Float64() * 4e6,
				Conns: r.IntN(100), CPU: r.Float64() * 0.2, Mem: r.Float64() * 0.2,
			},
		}
	}
	return nodes
}

func randChannel(r *rand.Rand) (string, ChannelLoad) {
	return fmt.Sprintf("chan-%d", r.IntN(1<<30)), ChannelLoad{
		MsgsPerSec:  math.Pow(10, r.Float64()*5),
		BytesPerSec: math.Pow(10, r.Float64()*7),
		Subscribers: r.IntN(20),
	}
}

func mustSnapshot(t testing.TB, nodes []Node, o Options) *Snapshot {
	t.Helper()
	s, err := NewSnapshot(nodes, o)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	return s
}

// equalNodes makes n Alive nodes of capacity 1 and no load.
func equalNodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: NodeID(fmt.Sprintf("n%03d", i)), Capacity: 1, State: Alive}
	}
	return nodes
}
