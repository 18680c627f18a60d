package main

import (
	"fmt"
	"log"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/sluice-rtm/sluice/placement"
)

// member is one node as a scheme sees it after a membership change.
type member struct {
	idx   int // index into world.nodes
	id    string
	cap   float64
	state placement.State
}

// scheme is a placement policy under test. Indexes are world.nodes indexes.
// load is the run's committed load per node, kept by the run; schemes that
// look at load read it, and may keep their own copy in sync through commit.
type scheme interface {
	name() string
	// reset is called at the start and after every membership change.
	reset(ms []member, load []float64)
	// host returns the node for streamlet seq of channel ch, or -1.
	host(ch int, seq uint64) int
	// commit records that delta (< 0 when a streamlet closes) was added
	// to node idx.
	commit(idx int, delta float64)
	// manager returns the channel's manager, or -1 if the scheme has no
	// notion of one.
	manager(ch int) int
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// key is the hash every hash-based baseline uses for a streamlet: the
// channel name mixed with the sequence number, as in placement.
func key(name string, seq uint64) uint64 {
	return mix64(xxhash.Sum64String(name) ^ mix64(seq+0x632be59bd9b4e019))
}

// ---- ring: consistent hashing with virtual nodes (Karger et al.) ----

type ringScheme struct {
	w         *world
	byChannel bool // classic: the channel name alone is the key
	salt      uint64
	points    []uint64
	owners    []int32
}

func (s *ringScheme) name() string {
	if s.byChannel {
		return "ring-channel"
	}
	return "ring-vnodes"
}

func (s *ringScheme) reset(ms []member, _ []float64) {
	type pt struct {
		h uint64
		o int32
	}
	var pts []pt
	for _, m := range ms {
		if m.state != placement.Alive {
			continue
		}
		seed := xxhash.Sum64String(m.id) ^ s.salt
		for v := 0; v < int(math.Round(100*m.cap)); v++ {
			pts = append(pts, pt{mix64(seed + uint64(v+1)*0x9e3779b97f4a7c15), int32(m.idx)})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return int(a.o - b.o)
	})
	s.points, s.owners = s.points[:0], s.owners[:0]
	for _, p := range pts {
		s.points = append(s.points, p.h)
		s.owners = append(s.owners, p.o)
	}
}

func (s *ringScheme) lookup(h uint64) int {
	if len(s.points) == 0 {
		return -1
	}
	lo, hi := 0, len(s.points)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.points[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s.points) {
		lo = 0
	}
	return int(s.owners[lo])
}

func (s *ringScheme) host(ch int, seq uint64) int {
	if s.byChannel {
		return s.lookup(xxhash.Sum64String(s.w.names[ch]))
	}
	return s.lookup(key(s.w.names[ch], seq))
}

func (s *ringScheme) commit(int, float64) {}
func (s *ringScheme) manager(ch int) int  { return s.lookup(xxhash.Sum64String(s.w.names[ch])) }

// ---- rendezvous (HRW), weighted by capacity: argmax -cap/ln(u) ----
//
// For nodes of equal capacity the score is monotone in u, so the winner of
// each capacity class is simply the largest hash; only the class winners
// need the logarithm. Same result as scoring every node, far fewer logs.

type hrwClass struct {
	cap   float64
	seeds []uint64
	idx   []int
}

type hrwScheme struct {
	w       *world
	classes []hrwClass
}

func (s *hrwScheme) name() string { return "rendezvous" }

func (s *hrwScheme) reset(ms []member, _ []float64) {
	s.classes = s.classes[:0]
	for _, m := range ms {
		if m.state != placement.Alive {
			continue
		}
		k := slices.IndexFunc(s.classes, func(c hrwClass) bool { return c.cap == m.cap })
		if k < 0 {
			s.classes = append(s.classes, hrwClass{cap: m.cap})
			k = len(s.classes) - 1
		}
		c := &s.classes[k]
		c.seeds = append(c.seeds, xxhash.Sum64String(m.id))
		c.idx = append(c.idx, m.idx)
	}
}

func (s *hrwScheme) pick(h uint64) int {
	best, bestScore := -1, math.Inf(-1)
	for ci := range s.classes {
		c := &s.classes[ci]
		top, topH := -1, uint64(0)
		for i, seed := range c.seeds {
			if x := mix64(h ^ seed); top < 0 || x > topH {
				top, topH = i, x
			}
		}
		u := (float64(topH>>11) + 0.5) / (1 << 53) // (0,1)
		if sc := -c.cap / math.Log(u); sc > bestScore {
			best, bestScore = c.idx[top], sc
		}
	}
	return best
}

func (s *hrwScheme) host(ch int, seq uint64) int { return s.pick(key(s.w.names[ch], seq)) }
func (s *hrwScheme) commit(int, float64)         {}
func (s *hrwScheme) manager(ch int) int          { return s.pick(xxhash.Sum64String(s.w.names[ch])) }

// ---- jump consistent hash (Lamping & Veach) over capacity slots ----
//
// Jump hash maps to buckets 0..n-1 and can only grow or shrink at the end.
// Capacity weights are slots (a node of capacity c owns round(c) slots).
// A join appends slots; a node that leaves has its slots removed and the
// rest shift down, which is how jump hash must handle an arbitrary leave.

type jumpScheme struct {
	w     *world
	slots []int32
}

func (s *jumpScheme) name() string { return "jump" }

func (s *jumpScheme) reset(ms []member, _ []float64) {
	alive := map[int]bool{}
	for _, m := range ms {
		if m.state == placement.Alive {
			alive[m.idx] = true
		}
	}
	kept := s.slots[:0]
	have := map[int]bool{}
	for _, o := range s.slots {
		if alive[int(o)] {
			kept = append(kept, o)
			have[int(o)] = true
		}
	}
	s.slots = kept
	for _, m := range ms { // new members go to the end, in world order
		if m.state == placement.Alive && !have[m.idx] {
			for k := 0; k < max(1, int(math.Round(m.cap))); k++ {
				s.slots = append(s.slots, int32(m.idx))
			}
		}
	}
}

func jumpHash(key uint64, buckets int) int {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

func (s *jumpScheme) pick(h uint64) int {
	if len(s.slots) == 0 {
		return -1
	}
	return int(s.slots[jumpHash(h, len(s.slots))])
}

func (s *jumpScheme) host(ch int, seq uint64) int { return s.pick(key(s.w.names[ch], seq)) }
func (s *jumpScheme) commit(int, float64)         {}
func (s *jumpScheme) manager(ch int) int          { return s.pick(xxhash.Sum64String(s.w.names[ch])) }

// ---- power of two choices: two capacity-weighted ring picks, less loaded wins ----

type p2cScheme struct {
	w    *world
	a, b ringScheme
	load []float64
	caps []float64
}

func (s *p2cScheme) name() string { return "two-choices" }

func (s *p2cScheme) reset(ms []member, load []float64) {
	s.a.salt, s.b.salt = 0, 0x5bd1e9955bd1e995
	s.a.reset(ms, load)
	s.b.reset(ms, load)
	s.load = load
	s.caps = s.caps[:0]
	for _, nd := range s.w.nodes {
		s.caps = append(s.caps, nd.cap)
	}
}

func (s *p2cScheme) host(ch int, seq uint64) int {
	h := key(s.w.names[ch], seq)
	x, y := s.a.lookup(h), s.b.lookup(mix64(h))
	if x < 0 {
		return -1
	}
	wt := s.w.w[ch]
	if (s.load[y]+wt)/s.caps[y] < (s.load[x]+wt)/s.caps[x] {
		return y
	}
	return x
}

func (s *p2cScheme) commit(int, float64) {}
func (s *p2cScheme) manager(int) int     { return -1 }

// ---- least loaded: the patent's reference, argmin (load+w)/capacity ----

type leastScheme struct {
	w     *world
	alive []int
	load  []float64
	caps  []float64
}

func (s *leastScheme) name() string { return "least-loaded" }

func (s *leastScheme) reset(ms []member, load []float64) {
	s.alive, s.caps, s.load = s.alive[:0], s.caps[:0], load
	for _, m := range ms {
		if m.state == placement.Alive {
			s.alive = append(s.alive, m.idx)
		}
	}
	for _, nd := range s.w.nodes {
		s.caps = append(s.caps, nd.cap)
	}
}

func (s *leastScheme) host(ch int, _ uint64) int {
	best, bestR := -1, math.Inf(1)
	wt := s.w.w[ch]
	for _, i := range s.alive {
		if r := (s.load[i] + wt) / s.caps[i]; r < bestR {
			best, bestR = i, r
		}
	}
	return best
}

func (s *leastScheme) commit(int, float64) {}
func (s *leastScheme) manager(int) int     { return -1 }

// ---- ours: placement.Snapshot (bounded loads, weighted) ----

type oursScheme struct {
	w       *world
	eps     float64
	choices int // placement.Options.Choices
	snap    *placement.Snapshot
	toWorld []int // snapshot index -> world index
	toSnap  []int // world index -> snapshot index, -1 if absent

	stats oursStats
}

// oursStats counts what placement reported over the run.
type oursStats struct{ decisions, overflows, fallbacks, probes int }

func (s *oursScheme) name() string {
	switch s.choices {
	case 1:
		return "ours-1choice"
	case 2:
		return "ours"
	}
	return fmt.Sprintf("ours-%dchoices", s.choices)
}

func (s *oursScheme) reset(ms []member, load []float64) {
	nodes := make([]placement.Node, len(ms))
	for i, m := range ms {
		nodes[i] = placement.Node{ID: placement.NodeID(m.id), Capacity: m.cap, State: m.state}
	}
	snap, err := placement.NewSnapshot(nodes, placement.Options{Epsilon: s.eps, Choices: s.choices})
	if err != nil {
		log.Fatalf("placementsim: %v", err) // the simulation builds valid memberships
	}
	s.snap = snap
	s.toWorld = make([]int, snap.Len())
	s.toSnap = make([]int, len(s.w.nodes))
	for i := range s.toSnap {
		s.toSnap[i] = -1
	}
	for _, m := range ms {
		i, _ := snap.Index(placement.NodeID(m.id))
		s.toWorld[i], s.toSnap[m.idx] = m.idx, i
		if load[m.idx] > 0 {
			if err := snap.AddLoad(placement.NodeID(m.id), load[m.idx]); err != nil {
				log.Fatalf("placementsim: %v", err)
			}
		}
	}
}

func (s *oursScheme) host(ch int, seq uint64) int {
	d, ok := s.snap.Host(s.w.names[ch], seq, s.w.load[ch])
	if !ok {
		return -1
	}
	s.stats.decisions++
	s.stats.probes += d.Probes
	if d.Overflow {
		s.stats.overflows++
	}
	if d.Fallback {
		s.stats.fallbacks++
	}
	return s.toWorld[d.Index]
}

func (s *oursScheme) commit(idx int, delta float64) {
	if i := s.toSnap[idx]; i >= 0 {
		n, _ := s.snap.Node(i)
		if err := s.snap.AddLoad(n.ID, delta); err != nil {
			log.Fatalf("placementsim: %v", err)
		}
	}
}

func (s *oursScheme) manager(ch int) int {
	id, ok := s.snap.Manager(s.w.names[ch])
	if !ok {
		return -1
	}
	i, _ := s.snap.Index(id)
	return s.toWorld[i]
}

func newSchemes(w *world) []scheme {
	return []scheme{
		&ringScheme{w: w, byChannel: true},
		&ringScheme{w: w},
		&hrwScheme{w: w},
		&jumpScheme{w: w},
		&p2cScheme{w: w, a: ringScheme{w: w}, b: ringScheme{w: w}},
		&leastScheme{w: w},
		&oursScheme{w: w, eps: w.cfg.eps, choices: 1},
		&oursScheme{w: w, eps: w.cfg.eps, choices: 2},
	}
}
