package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/sluice-rtm/sluice/placement"
)

// Streamlet limits of the model (BRIEF.md defaults).
const (
	limitMsgs  = 5000
	limitBytes = 2 << 20
	limitLife  = 4.0 // seconds
)

// simNode is a node of the simulated cluster, joined or not.
type simNode struct {
	id  string
	cap float64
}

// changeKind is a membership change.
type changeKind int

const (
	join changeKind = iota
	drain
	fail
)

func (k changeKind) String() string { return [...]string{"join", "drain", "fail"}[k] }

// change happens at simulated time t to node.
type change struct {
	t    float64
	kind changeKind
	node int
}

// world is everything that does not depend on the placement scheme: the
// nodes, the channels and their loads, the membership changes. Every scheme
// replays the same world.
type world struct {
	cfg     config
	nodes   []simNode // initial nodes first, then the joiners
	initial int

	names []string
	load  []placement.ChannelLoad
	w     []float64 // streamlet weight the placers see (capped, DefaultScorer)
	lam   []float64 // true load per second while a streamlet is open (uncapped)
	life  []float64 // streamlet lifetime, s
	first []float64 // first rollover time, s

	changes []change
	// floors: the best max/avg any placement can reach, because one
	// streamlet cannot be split: its weight (or its work in one window) on
	// the largest node, over that node's fair share.
	floorCommitted, floorWindow float64
	// heaviest: the heaviest streamlet weight over the fair share of a
	// capacity-1 node. placement's bound is guaranteed satisfiable while
	// this is at most eps (see the package doc); above that, a single
	// streamlet can be too coarse for the smallest nodes.
	heaviest float64
}

var capacityMix = []float64{1, 2, 4}

func newWorld(cfg config, n int) *world {
	r := rand.New(rand.NewPCG(cfg.seed, uint64(n)))
	wd := &world{cfg: cfg, initial: n}
	joins := 0
	for _, c := range cfg.changes {
		if c == join {
			joins++
		}
	}
	for i := 0; i < n+joins; i++ {
		wd.nodes = append(wd.nodes, simNode{id: fmt.Sprintf("node-%04d", i), cap: capacityMix[i%len(capacityMix)]})
	}
	capTotal := 0.0
	for _, nd := range wd.nodes[:n] {
		capTotal += nd.cap
	}

	N := cfg.channels
	// Zipf popularity: rank k has weight k^-s; ranks are dealt to channels
	// in random order so names carry no rank information.
	perm := r.Perm(N)
	z := make([]float64, N)
	size := make([]float64, N)
	subs := make([]int, N)
	for i := 0; i < N; i++ {
		z[i] = math.Pow(float64(perm[i]+1), -cfg.zipf)
		size[i] = math.Round(math.Exp(math.Log(32) + r.Float64()*math.Log(4096.0/32))) // 32 B .. 4 KiB, log-uniform
		subs[i] = int(math.Exp(r.Float64()*math.Log(1000))) - 1                        // 0 .. 999, log-uniform
	}
	// Scale publish rates so that the true load per capacity unit is cfg.load.
	sc := placement.DefaultScorer()
	unc := *sc
	unc.Window = 0 // no cap: true load rate
	base, per := 0.0, 0.0
	for i := 0; i < N; i++ {
		base += unc.StreamletWeight(placement.ChannelLoad{Subscribers: subs[i]})
		per += unc.StreamletWeight(placement.ChannelLoad{MsgsPerSec: z[i], BytesPerSec: z[i] * size[i], Subscribers: subs[i]}) -
			unc.StreamletWeight(placement.ChannelLoad{Subscribers: subs[i]})
	}
	scale := (cfg.load*capTotal - base) / per
	if scale <= 0 {
		scale = 1e-9 // the per-streamlet cost alone exceeds the target load
	}
	wd.names = make([]string, N)
	wd.load = make([]placement.ChannelLoad, N)
	wd.w = make([]float64, N)
	wd.lam = make([]float64, N)
	wd.life = make([]float64, N)
	wd.first = make([]float64, N)
	sumW, sumLam, maxW, maxWin := 0.0, 0.0, 0.0, 0.0
	for i := 0; i < N; i++ {
		wd.names[i] = fmt.Sprintf("chan-%07d", i)
		rate := z[i] * scale
		cl := placement.ChannelLoad{MsgsPerSec: rate, BytesPerSec: rate * size[i], Subscribers: subs[i]}
		wd.load[i] = cl
		wd.w[i] = sc.StreamletWeight(cl)
		wd.lam[i] = unc.StreamletWeight(cl)
		l := math.Min(limitLife, math.Min(limitMsgs/rate, limitBytes/(rate*size[i])))
		wd.life[i] = l
		wd.first[i] = r.Float64() * l
		sumW += wd.w[i]
		sumLam += wd.lam[i]
		maxW = math.Max(maxW, wd.w[i])
		maxWin = math.Max(maxWin, wd.lam[i]*math.Min(l, cfg.window)/cfg.window)
	}
	maxCap := slices.Max(capacityMix)
	wd.heaviest = maxW / (sumW * slices.Min(capacityMix) / capTotal)
	wd.floorCommitted = math.Max(1, maxW/maxCap/(sumW/capTotal))
	wd.floorWindow = math.Max(1, maxWin/maxCap/(sumLam/capTotal))

	// Membership changes at fixed fractions of the run; the node that
	// drains or fails is drawn from the seed among the initial nodes.
	next := n
	victims := r.Perm(n)
	for k, kind := range cfg.changes {
		c := change{t: cfg.duration * float64(k+1) / float64(len(cfg.changes)+1), kind: kind}
		if kind == join {
			c.node = next
			next++
		} else {
			c.node = victims[0]
			victims = victims[1:]
		}
		wd.changes = append(wd.changes, c)
	}
	return wd
}
