package engine

import (
	"fmt"
	"sync"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/filter"
	"github.com/sluice-rtm/sluice/wire"
)

// Server-side filters (PROTOCOL.md 2.17, docs/filters.md).
//
// A filtered subscription belongs to its loop view's filterGroup of the
// same expression; each member reads with its own cursor up to the
// channel's live position (never the live stream itself, so unfiltered
// delivery pays one nil check per batch, lc.groups, and nothing per
// message), and members that read the same batch in one pass share its
// FDATA encodings. The results come from the node's sharedFilter of that
// channel and expression (gwChan.filt): one compiled program and a cache
// of results by position. Evaluation never runs on an event loop: a
// member that meets positions not evaluated yet hands the batch to the
// filter workers (filterWorkers) and its group waits; the worker that owns
// the filter evaluates what the cache lacks, once per message for every
// loop, and wakes the view. A filter that cannot keep up makes its own
// subscribers lag (they read on from history), never the others.

// gwFilters are the compiled filters of one channel on this node.
type gwFilters struct {
	mu sync.Mutex
	m  map[string]*sharedFilter
}

// sharedFilter is one filter expression of one channel on this node,
// shared by the loops whose subscribers use it.
type sharedFilter struct {
	src  string
	prog *filter.Program
	refs int // groups using it; under gwFilters.mu

	mu    sync.Mutex // guards cache; never held during an evaluation
	cache resultCache
	// worker is the index of the filter worker that evaluates this
	// filter: one, so that no message is evaluated twice.
	worker int
}

// cacheBlocks blocks of 64 positions: results of the last 16,384
// positions a filter evaluated (6 KiB), so that members a few batches
// apart, on any loop, find them.
const cacheBlocks = 256

// resultCache remembers which positions of one epoch matched. A block
// holds 64 consecutive positions; tag is the block number + 1 (0: empty).
type resultCache struct {
	epoch       uint64
	tag         [cacheBlocks]uint64
	done, match [cacheBlocks]uint64
}

// lookup returns the cached result of position p: known, matched.
func (rc *resultCache) lookup(p uint64) (bool, bool) {
	blk := p / 64
	i, bit := blk%cacheBlocks, uint64(1)<<(p%64)
	if rc.tag[i] != blk+1 || rc.done[i]&bit == 0 {
		return false, false
	}
	return true, rc.match[i]&bit != 0
}

// store records p's result.
func (rc *resultCache) store(p uint64, m bool) {
	blk := p / 64
	i, bit := blk%cacheBlocks, uint64(1)<<(p%64)
	if rc.tag[i] != blk+1 {
		rc.tag[i], rc.done[i], rc.match[i] = blk+1, 0, 0
	}
	rc.done[i] |= bit
	if m {
		rc.match[i] |= bit
	}
}

// acquireFilter returns the node's compiled filter src of the channel,
// compiling it when no loop has it; an error for an expression that does
// not compile (INVALID_FILTER) or when the node holds MaxFilters already
// (UNAVAILABLE). Release it with releaseFilter.
func (srv *Server) acquireFilter(gc *gwChan, src string) (*sharedFilter, wire.Code, error) {
	gf := gc.filterSet()
	gf.mu.Lock()
	if sf := gf.m[src]; sf != nil {
		sf.refs++
		gf.mu.Unlock()
		return sf, 0, nil
	}
	gf.mu.Unlock()
	if len(src) > wire.MaxFilterLen {
		return nil, wire.CodeInvalidFilter, fmt.Errorf("the filter is %d bytes, at most %d", len(src), wire.MaxFilterLen)
	}
	prog, err := filter.Compile(src) // outside the lock: about 0.1 ms
	if err != nil {
		return nil, wire.CodeInvalidFilter, err
	}
	gf.mu.Lock()
	defer gf.mu.Unlock()
	if sf := gf.m[src]; sf != nil { // another loop compiled it meanwhile
		sf.refs++
		return sf, 0, nil
	}
	if n := srv.filters.Add(1); n > int64(srv.opts.MaxFilters) {
		srv.filters.Add(-1)
		return nil, wire.CodeUnavailable, fmt.Errorf("this node holds %d distinct filters, its limit", srv.opts.MaxFilters)
	}
	sf := &sharedFilter{src: src, prog: prog, refs: 1, worker: srv.fworkers.assign()}
	if gf.m == nil {
		gf.m = make(map[string]*sharedFilter)
	}
	gf.m[src] = sf
	return sf, 0, nil
}

// releaseFilter drops a reference taken by acquireFilter.
func (srv *Server) releaseFilter(gc *gwChan, sf *sharedFilter) {
	gf := gc.filterSet()
	gf.mu.Lock()
	defer gf.mu.Unlock()
	if sf.refs--; sf.refs == 0 {
		delete(gf.m, sf.src)
		srv.filters.Add(-1)
	}
}

// filterSet returns gc's filters, made on first use.
func (gc *gwChan) filterSet() *gwFilters {
	if f := gc.filt.Load(); f != nil {
		return f
	}
	gc.filt.CompareAndSwap(nil, new(gwFilters))
	return gc.filt.Load()
}

// cached fills out with whether each record of the run (positions from
// first, of epoch) matches, as far as the cache knows; complete is false
// when some position was not evaluated yet.
func (sf *sharedFilter) cached(epoch, first uint64, run [][]byte, out []bool) (_ []bool, complete bool) {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if epoch != sf.cache.epoch {
		return out, false
	}
	p := first
	for _, seg := range run {
		for _, _, rest, ok := wire.NextRecordExt(seg); ok; _, _, rest, ok = wire.NextRecordExt(rest) {
			known, m := sf.cache.lookup(p)
			if !known {
				return out, false
			}
			out = append(out, m)
			p++
		}
	}
	return out, true
}

// evalRun evaluates the records of the run the cache lacks, with m as
// scratch, and caches the results; run by the filter's worker only.
func (sf *sharedFilter) evalRun(srv *Server, epoch, first uint64, run [][]byte, m *filter.Message) {
	sf.mu.Lock()
	if epoch != sf.cache.epoch {
		sf.cache = resultCache{epoch: epoch}
	}
	sf.mu.Unlock()
	var evals, aborted int64
	p := first
	for _, seg := range run {
		for body, ext, rest, ok := wire.NextRecordExt(seg); ok; body, ext, rest, ok = wire.NextRecordExt(rest) {
			sf.mu.Lock()
			known, _ := sf.cache.lookup(p)
			sf.mu.Unlock()
			if !known {
				m.Reset(body, ext)
				r := sf.prog.Match(m)
				evals++
				if r == filter.Aborted {
					aborted++
				}
				sf.mu.Lock()
				if sf.cache.epoch == epoch {
					sf.cache.store(p, r == filter.Match)
				}
				sf.mu.Unlock()
			}
			p++
		}
	}
	srv.filterEvals.Add(evals)
	if aborted > 0 {
		srv.filterAborts.Add(aborted)
	}
}

// filterGroup is the filtered subscriptions of one loop view with one
// expression. Loop-owned.
type filterGroup struct {
	sf      *sharedFilter
	members []*sub // each reads with its own cursor (sub.cur)
	// waiting: a batch is with the filter's worker, which wakes the view
	// when its results are in; until then the members do not read.
	waiting bool
}

// joinGroup adds s to lc's group of sf (made if needed; it then holds the
// reference to sf the caller took, which is otherwise released).
func (lc *loopChan) joinGroup(s *sub, sf *sharedFilter) {
	g := lc.groups[sf.src]
	if g == nil {
		if lc.groups == nil {
			lc.groups = make(map[string]*filterGroup)
		}
		g = &filterGroup{sf: sf}
		lc.groups[sf.src] = g
	} else {
		lc.l.srv.releaseFilter(lc.gc, sf) // the group holds one already
	}
	g.members = append(g.members, s)
	s.fg = g
}

// leaveGroup removes s from its group, and the group when it was the last.
func (lc *loopChan) leaveGroup(s *sub) {
	g := s.fg
	g.members = removeFrom(g.members, s)
	if len(g.members) == 0 {
		delete(lc.groups, g.sf.src)
		if len(lc.groups) == 0 {
			lc.groups = nil
		}
		lc.l.srv.releaseFilter(lc.gc, g.sf)
	}
}

// fbatch is one FDATA encoding of a batch's matches: the bodies (several
// when they would not fit one frame), each in l.shared until the flush.
type fbatch struct {
	bodies [][]byte
}

// encodeF builds the FDATA bodies of the matched records of the batch
// (l.iov from position first): as stored, or stripped of their
// extensions (payload alone) for subscribers without FeatureHeaders.
// Each body stays within the client's body limit.
func (l *loop) encodeF(first uint64, matched []bool, strip bool) fbatch {
	var fb fbatch
	limit := int(l.srv.maxBody)
	start, count := -1, uint32(0)
	closeBody := func() {
		if start >= 0 {
			wire.PutFDataCount(l.shared[start:], count)
			fb.bodies = append(fb.bodies, l.shared[start:len(l.shared):len(l.shared)])
		}
		start, count = -1, 0
	}
	i, p := 0, first
	for _, seg := range l.iov {
		for body, ext, rest, ok := wire.NextRecordExt(seg); ok; body, ext, rest, ok = wire.NextRecordExt(rest) {
			if matched[i] {
				if strip && ext {
					body, ext = wire.RecordPayload(body, true), false
				}
				if start >= 0 && len(l.shared)-start+wire.FEntryOverhead+len(body) > limit {
					closeBody()
				}
				if start < 0 {
					start = len(l.shared)
					l.shared = wire.AppendFDataPrefix(l.shared, 0)
				}
				l.shared = wire.AppendFEntry(l.shared, p, body, ext)
				count++
			}
			i, p = i+1, p+1
		}
	}
	closeBody()
	return fb
}

// sendTo queues the FDATA frames for subscription subID of c.
func (fb *fbatch) sendTo(c *conn, subID uint32) {
	for _, b := range fb.bodies {
		n, _ := wire.FDataCount(b)
		c.l.stats.msgsOut += uint64(n)
		s, k := c.ownStart()
		c.scratch = wire.AppendFDataHeader(c.scratch, subID, len(b))
		c.ownEnd(s, k)
		c.shared(b)
	}
	if len(c.iov) > maxIov {
		c.flush()
	}
}

// groupBatch is one batch's matches for a group, its FDATA encodings
// built at most once each (while l.iov holds the batch: every member that
// uses it has just read the same range).
type groupBatch struct {
	l           *loop
	first       uint64
	count       int
	matched     []bool
	any, hasExt bool
	built       [2]bool
	fb          [2]fbatch // 0: as stored, 1: stripped
}

func (gb *groupBatch) sendTo(c *conn, subID uint32) {
	k := 0
	if !c.headers && gb.hasExt {
		k = 1
	}
	if !gb.built[k] {
		gb.built[k] = true
		gb.fb[k] = gb.l.encodeF(gb.first, gb.matched, k == 1)
	}
	gb.fb[k].sendTo(c, subID)
}

// deliverGroups lets the members of every group that is not waiting for
// its worker read towards the live position, within a budget each, and
// while their connection is under the outbound limit (past it a member
// waits for its socket to drain, as a catch-up reader does: filtered
// subscriptions follow the lag policy).
func (lc *loopChan) deliverGroups() {
	more := false
	for _, g := range lc.groups {
		if !g.waiting && lc.deliverGroup(g) {
			more = true
		}
	}
	if more {
		lc.schedule()
	}
}

// deliverGroup serves g's members; it reports whether one stopped on its
// budget with more to read.
func (lc *loopChan) deliverGroup(g *filterGroup) (more bool) {
	l := lc.l
	var gb groupBatch // the batch last evaluated, for members reading the same
	for _, s := range g.members {
		c := s.c
		budget := catchupBudget
		for {
			r, ok := lc.catchupRead(s, budget)
			if !ok {
				break
			}
			if gb.l == nil || gb.first != r.first || gb.count != r.count {
				matched, complete := g.sf.cached(s.cur.s.Epoch(), r.first, l.iov, l.fmatch[:0])
				l.fmatch = matched
				if !complete {
					lc.requestEval(g, s.cur.s, r)
					return more
				}
				gb = groupBatch{l: l, first: r.first, count: r.count, matched: matched, any: anyTrue(matched), hasExt: runHasExt(l.iov)}
			}
			if gb.any {
				gb.sendTo(c, s.id)
			}
			s.cur.pos += uint64(r.count)
			budget -= r.nbytes
		}
		if s.cur.pos < lc.live.pos && budget <= 0 {
			more = true
		}
	}
	return more
}

// requestEval hands the batch just read (l.iov, of streamlet st) to the
// filter's worker and makes g wait for it. The batch keeps st acquired
// until the worker is done with it.
func (lc *loopChan) requestEval(g *filterGroup, st *host.Streamlet, r readResult) {
	if !st.Buf().Acquire() {
		return // freed meanwhile: the next read finds out
	}
	l := lc.l
	job := filterJob{sf: g.sf, epoch: st.Epoch(), first: r.first, run: append([][]byte(nil), l.iov...), st: st,
		done: func() {
			l.execute(func() {
				g.waiting = false
				if lc.groups[g.sf.src] == g {
					lc.deliver()
				}
			})
		}}
	if l.srv.fworkers.submit(job) {
		g.waiting = true
	} else {
		st.Buf().Release()
	}
}

// runHasExt reports whether a record run holds an extended record.
func runHasExt(run [][]byte) bool {
	for _, seg := range run {
		for _, ext, rest, ok := wire.NextRecordExt(seg); ok; _, ext, rest, ok = wire.NextRecordExt(rest) {
			if ext {
				return true
			}
		}
	}
	return false
}

func anyTrue(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

// dropFilter releases the filter of a subscription that ended before it
// joined its group (pending, then refused or abandoned).
func (s *sub) dropFilter() {
	if s.sf != nil {
		s.lc.l.srv.releaseFilter(s.lc.gc, s.sf)
		s.sf = nil
	}
}
