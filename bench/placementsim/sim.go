package main

import (
	"log"
	"math"
	"slices"
	"time"

	"github.com/sluice-rtm/sluice/placement"
)

// event: channel ch rolls over to a new streamlet at time t.
type event struct {
	t  float64
	ch int32
}

// eventHeap is a binary min-heap on (t, ch); ties by channel keep the
// order deterministic.
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	return h[i].t < h[j].t || (h[i].t == h[j].t && h[i].ch < h[j].ch)
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

// replaceTop replaces the minimum with e and restores the heap.
func (h eventHeap) replaceTop(e event) {
	h[0] = e
	n := len(h)
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// charge is one streamlet's weight on one node, to be uncharged when the
// streamlet has closed and one window has passed since it opened.
type charge struct {
	due  float64 // openAt + window
	ch   int32
	node int32
	seq  uint64 // the streamlet's sequence number in its channel
}

// sample is the state of one scheme at one sampling moment.
type sample struct {
	t                float64
	maxAvg, p99Avg   float64 // committed load (what the placer sees), capacity-weighted
	wMaxAvg, wP99Avg float64 // work done in the last window, capacity-weighted
}

// changeResult is what one membership change did to one scheme.
type changeResult struct {
	kind        changeKind
	ideal       float64 // capacity share of the node that changed
	mgrMoved    float64 // fraction of channels whose manager changed; NaN if none
	nextMoved   float64 // fraction of channels whose next streamlet's host changed
	forcedMoved float64 // fraction of open streamlets re-placed at once (failures)
}

// result is one scheme's run over one world.
type result struct {
	scheme  string
	samples []sample
	changes []changeResult
	// decision cost, measured after the run on its final state
	nsPerDecision float64
	// ours only
	decisions, overflows, fallbacks int
	initialOverflows                int // overflows while filling the empty cluster at t=0
	meanProbes                      float64
	seq                             []uint64 // final sequence numbers, for timeDecisions
}

// run replays the world under one scheme.
func run(wd *world, sc scheme) result {
	N := len(wd.names)
	host := make([]int32, N)
	seq := make([]uint64, N)
	openAt := make([]float64, N)
	load := make([]float64, len(wd.nodes))
	acc := make([]float64, len(wd.nodes))
	states := make([]placement.State, len(wd.nodes))
	for i := range states {
		states[i] = placement.Down
		if i < wd.initial {
			states[i] = placement.Alive
		}
	}
	members := func() []member {
		var ms []member
		for i, st := range states {
			if i < wd.initial || st != placement.Down || load[i] > 0 {
				ms = append(ms, member{idx: i, id: wd.nodes[i].id, cap: wd.nodes[i].cap, state: st})
			}
		}
		return ms
	}
	sc.reset(members(), load)

	var charges []charge // FIFO from head, ordered by due
	head := 0
	place := func(ch int, t float64) {
		h := sc.host(ch, seq[ch])
		if h < 0 {
			log.Fatalf("placementsim: %s found no live node", sc.name())
		}
		host[ch] = int32(h)
		openAt[ch] = t
		charges = append(charges, charge{t + wd.cfg.window, int32(ch), int32(h), seq[ch]})
		load[h] += wd.w[ch]
		sc.commit(h, wd.w[ch])
	}
	winStart := 0.0
	uncharge := func(h int, w float64) {
		load[h] -= w
		if load[h] < 1e-9 {
			load[h] = 0
		}
		sc.commit(h, -w)
	}
	// A streamlet's weight stays charged to its node until it closes, but
	// at least one window after it opened: a node's load report covers a
	// window, so the work of a short-lived streamlet (a hot channel rolls
	// over many times per window) still shows for the rest of the window.
	// Streamlets open in time order, so their due times form a FIFO.
	matured := make([]uint64, N) // seq+1 of the channel's open streamlet once its window passed
	closeAt := func(ch int, t float64) {
		h := int(host[ch])
		acc[h] += wd.lam[ch] * (t - math.Max(openAt[ch], winStart))
		if matured[ch] == seq[ch]+1 {
			uncharge(h, wd.w[ch])
		}
		seq[ch]++
	}
	mature := func(c charge) {
		if c.seq < seq[c.ch] { // closed already
			uncharge(int(c.node), wd.w[c.ch])
		} else {
			matured[c.ch] = c.seq + 1
		}
	}
	var res result
	res.scheme = sc.name()
	heap := make(eventHeap, 0, N)
	for ch := 0; ch < N; ch++ {
		place(ch, 0)
		heap.push(event{wd.first[ch], int32(ch)})
	}
	if o, ok := sc.(*oursScheme); ok {
		res.initialOverflows = o.stats.overflows
	}

	// sample channels for movement measurements
	mgrSample := min(N, 200000)
	nextSample := min(N, 20000)
	stride := max(1, N/nextSample)

	applyChange := func(c change) changeResult {
		cr := changeResult{kind: c.kind}
		capBefore, capAfter := 0.0, 0.0
		for i, st := range states {
			if st == placement.Alive {
				capBefore += wd.nodes[i].cap
			}
		}
		ours, isOurs := sc.(*oursScheme)
		var saved oursStats
		if isOurs { // peeks are not decisions
			saved = ours.stats
		}
		mgr := make([]int, mgrSample)
		for ch := range mgr {
			mgr[ch] = sc.manager(ch)
		}
		next := make([]int, 0, nextSample)
		for ch := 0; ch < N && len(next) < nextSample; ch += stride {
			next = append(next, sc.host(ch, seq[ch]+1))
		}
		switch c.kind {
		case join:
			states[c.node] = placement.Alive
		case drain:
			states[c.node] = placement.Draining
		case fail:
			states[c.node] = placement.Down
		}
		for i, st := range states {
			if st == placement.Alive {
				capAfter += wd.nodes[i].cap
			}
		}
		if c.kind == join {
			cr.ideal = wd.nodes[c.node].cap / capAfter
		} else {
			cr.ideal = wd.nodes[c.node].cap / capBefore
		}
		if c.kind == fail {
			load[c.node] = 0 // its streamlets are gone
		}
		sc.reset(members(), load)
		moved, defined := 0, false
		for ch := range mgr {
			m := sc.manager(ch)
			if m >= 0 || mgr[ch] >= 0 {
				defined = true
			}
			if m != mgr[ch] {
				moved++
			}
		}
		cr.mgrMoved = math.NaN()
		if defined {
			cr.mgrMoved = float64(moved) / float64(mgrSample)
		}
		moved = 0
		for k, ch := 0, 0; k < len(next); k, ch = k+1, ch+stride {
			if sc.host(ch, seq[ch]+1) != next[k] {
				moved++
			}
		}
		cr.nextMoved = float64(moved) / float64(len(next))
		if isOurs {
			ours.stats = saved
		}
		if c.kind == fail {
			forced := 0
			for ch := 0; ch < N; ch++ {
				if int(host[ch]) == c.node {
					forced++
					seq[ch]++
					place(ch, c.t)
				}
			}
			cr.forcedMoved = float64(forced) / float64(N)
		}
		return cr
	}

	ratios := make([]float64, 0, len(wd.nodes))
	stats := func(x []float64) (maxAvg, p99Avg float64) {
		ratios = ratios[:0]
		sum, capSum := 0.0, 0.0
		for i, st := range states {
			if st == placement.Alive {
				ratios = append(ratios, x[i]/wd.nodes[i].cap)
				sum += x[i]
				capSum += wd.nodes[i].cap
			}
		}
		avg := sum / capSum
		if avg == 0 {
			return 1, 1
		}
		slices.Sort(ratios)
		p := int(math.Ceil(0.99*float64(len(ratios)))) - 1
		return ratios[len(ratios)-1] / avg, ratios[p] / avg
	}

	nextChange := 0
	for ts := wd.cfg.window; ts <= wd.cfg.duration+1e-9; ts += wd.cfg.window {
		for {
			tc := math.Inf(1)
			if nextChange < len(wd.changes) {
				tc = wd.changes[nextChange].t
			}
			if head < len(charges) && charges[head].due <= heap[0].t && charges[head].due < tc && charges[head].due < ts {
				mature(charges[head])
				if head++; head > 1<<16 && head*2 > len(charges) {
					charges = append(charges[:0], charges[head:]...)
					head = 0
				}
				continue
			}
			if heap[0].t < tc && heap[0].t < ts {
				e := heap[0]
				ch := int(e.ch)
				closeAt(ch, e.t)
				place(ch, e.t)
				heap.replaceTop(event{e.t + wd.life[ch], e.ch})
				continue
			}
			if tc < ts {
				res.changes = append(res.changes, applyChange(wd.changes[nextChange]))
				nextChange++
				continue
			}
			break
		}
		// window end: count the open part of every open streamlet
		for ch := 0; ch < N; ch++ {
			acc[host[ch]] += wd.lam[ch] * (ts - math.Max(openAt[ch], winStart))
		}
		s := sample{t: ts}
		s.maxAvg, s.p99Avg = stats(load)
		s.wMaxAvg, s.wP99Avg = stats(acc)
		res.samples = append(res.samples, s)
		clear(acc)
		winStart = ts
	}

	if o, ok := sc.(*oursScheme); ok {
		res.decisions, res.overflows, res.fallbacks = o.stats.decisions, o.stats.overflows, o.stats.fallbacks
		res.meanProbes = float64(o.stats.probes) / float64(o.stats.decisions)
	}
	res.seq = seq
	return res
}

// timeDecisions measures host() on the final state of a run, alone, in
// thread CPU time where the platform has it (wall time otherwise).
func timeDecisions(wd *world, sc scheme, r *result) {
	const reps = 200000
	N := len(wd.names)
	tt := startThreadTimer()
	start := time.Now()
	for k := 0; k < reps; k++ {
		ch := (k * 7919) % N
		sc.host(ch, r.seq[ch]+uint64(k))
	}
	d, ok := tt.stop()
	if !ok {
		d = time.Since(start)
	}
	r.nsPerDecision = float64(d.Nanoseconds()) / reps
}
