// Package meta is the cluster's metadata state machine: every channel's
// committed streamlet list. Every change is a command (cmd.go) applied in
// log order by Apply, on every node alike; a command carries its time and
// checks what it expects (compare-and-set), so a stale proposer's command
// changes nothing and answers ResultConflict. The package is pure: no
// clock, no I/O, no randomness; the replicated log (package
// cluster/metalog) or, on a single node, a direct call feeds it.
package meta

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rtm/sluice/internal/mapshrink"

	"github.com/sluice-rtm/sluice/role"
)

const shards = 64

type shard struct {
	mu sync.RWMutex
	m  map[string]*Channel
	// peak lets drops give the map's memory back (package mapshrink).
	peak mapshrink.Peak
}

// State is the state machine. Apply, Restore and Snapshot must be called
// by one goroutine at a time (the log's apply goroutine); Channel, Range
// and Len may be called concurrently with them and with each other, and
// return copies. The observer (SetObserver) runs on the applying goroutine
// after each change, with no lock of State held.
type State struct {
	shards [shards]shard
	// epochFloor is the largest epoch of any incarnation that ended (a
	// dropped channel): a new incarnation's epoch must be above it, so a
	// recreated channel never gets an epoch it had. Channels created
	// concurrently do not raise it, so they never conflict with each
	// other. Written by Apply only.
	epochFloor atomic.Uint64
	count      atomic.Int64
	// applied is the index of the last command applied.
	applied atomic.Uint64
	// instances maps a node to its incarnation that may hold streamlets
	// (NODE_GONE); under imu (Apply writes, anyone reads).
	imu       sync.RWMutex
	instances map[string]string
	observe   func(Change)
	// gen is the snapshot generation, bumped by every Snapshot (applying
	// goroutine only). A channel made in an earlier generation may be held
	// by a Snapshot being encoded on another goroutine: it is frozen, and
	// a command changes a copy of it instead (writable).
	gen uint64
}

// Change describes what one command did to one channel, for observers
// (the node's host, which frees and seals its replicas; the gateway, which
// wakes the channel's readers). Entries are copies.
type Change struct {
	Index   uint64
	Kind    Kind
	Channel string
	Epoch   uint64
	// Opened is the streamlet an OPEN appended.
	Opened *role.StreamletRef
	// Closed lists the streamlets closed by the command (OPEN's tail,
	// CLOSE) or whose holders changed (HOLDERS, NODE_GONE), as they are
	// now.
	Closed []role.StreamletRef
	// Freed lists the streamlets removed from the list (EXPIRE).
	Freed []role.StreamletRef
	// Removed lists the nodes the command took out of the sets of Closed
	// (HOLDERS' Remove, NODE_GONE's node): what they held of those is
	// theirs no longer. A node left out of a set by another change (a
	// HOLDERS adding someone else, a NODE_GONE of another node) may hold a
	// copy whose own HOLDERS has not committed yet.
	Removed []string
	// Created: the command created the incarnation; Dropped: it removed it.
	Created, Dropped bool
}

// New returns an empty state.
func New() *State {
	s := &State{instances: make(map[string]string)}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*Channel)
	}
	return s
}

// SetObserver sets the function told of every change; call it before the
// first Apply.
func (s *State) SetObserver(fn func(Change)) { s.observe = fn }

func (s *State) shard(name string) *shard { return &s.shards[xxhash.Sum64String(name)%shards] }

// Channel returns a copy of the channel's committed state.
func (s *State) Channel(name string) (*Channel, bool) {
	sh := s.shard(name)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	c, ok := sh.m[name]
	if !ok {
		return nil, false
	}
	return c.clone(), true
}

// Range calls fn with a copy of every channel until fn returns false; a
// channel changed or created meanwhile may be seen before or after the
// change.
func (s *State) Range(fn func(*Channel) bool) {
	var buf []*Channel
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		buf = buf[:0]
		for _, c := range sh.m {
			buf = append(buf, c.clone())
		}
		sh.mu.RUnlock()
		for _, c := range buf {
			if !fn(c) {
				return
			}
		}
	}
}

// Len returns how many channels exist.
func (s *State) Len() int { return int(s.count.Load()) }

// Applied returns the index of the last command applied.
func (s *State) Applied() uint64 { return s.applied.Load() }

// Apply decodes and applies one command of the log at index and returns
// the encoded Result (one byte). A command that does not decode changes
// nothing (ResultInvalid), on every node alike.
func (s *State) Apply(index uint64, b []byte) []byte {
	s.applied.Store(index)
	c, err := DecodeCmd(b)
	if err != nil {
		return []byte{byte(ResultInvalid)}
	}
	return []byte{byte(s.ApplyCmd(index, &c))}
}

// ApplyCmd applies a decoded command (Apply's body; a single node's log
// calls it directly, skipping the encoding).
func (s *State) ApplyCmd(index uint64, c *Cmd) Result {
	s.applied.Store(index)
	var changes []Change
	var r Result
	switch c.Kind {
	case KindCreate:
		r, changes = s.create(c)
	case KindOpen:
		r, changes = s.openCmd(c)
	case KindClose:
		r, changes = s.closeCmd(c)
	case KindHolders:
		r, changes = s.holdersCmd(c)
	case KindNodeGone:
		r, changes = s.nodeGoneCmd(c)
	case KindExpire:
		r, changes = s.expireCmd(c)
	case KindDrop:
		r, changes = s.dropCmd(c)
	default:
		r = ResultInvalid
	}
	if s.observe != nil {
		for i := range changes {
			changes[i].Index = index
			changes[i].Kind = c.Kind
			s.observe(changes[i])
		}
	}
	return r
}

// NewEpoch proposes the epoch of an incarnation created at now (unix ns):
// its millisecond clock, or one above the epoch floor (the largest epoch of
// an incarnation that ended) if that is not above it. A single node, whose
// log starts empty at every restart, thus gives a channel recreated after
// a restart a new epoch as long as its clock did not go back; a cluster's
// log remembers the floor. The proposer puts it in its CREATE or OPEN (it
// needs it before the command is applied: the new streamlet's hosts are
// told it); a command whose epoch is not above the floor by then
// conflicts.
func (s *State) NewEpoch(now int64) uint64 {
	return max(uint64(max(now, 0)/1e6), s.epochFloor.Load()+1)
}

// EpochFloor returns the largest epoch of an incarnation that ended.
func (s *State) EpochFloor() uint64 { return s.epochFloor.Load() }

func (s *State) create(c *Cmd) (Result, []Change) {
	sh := s.shard(c.Channel)
	sh.mu.Lock()
	if _, ok := sh.m[c.Channel]; ok {
		sh.mu.Unlock()
		return ResultOK, nil
	}
	if c.Epoch <= s.epochFloor.Load() {
		sh.mu.Unlock()
		return ResultConflict, nil
	}
	ch := &Channel{Name: c.Channel, Epoch: c.Epoch, Next: 1, Used: c.Time, gen: s.gen}
	sh.m[c.Channel] = ch
	s.count.Add(1)
	sh.mu.Unlock()
	return ResultOK, []Change{{Channel: c.Channel, Epoch: ch.Epoch, Created: true}}
}

func (s *State) openCmd(c *Cmd) (Result, []Change) {
	if len(c.New.Replicas) == 0 || c.New.ID == 0 {
		return ResultInvalid, nil
	}
	sh := s.shard(c.Channel)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ch, ok := sh.m[c.Channel]
	created := false
	switch {
	case !ok && c.Tail == 0:
		if c.Epoch <= s.epochFloor.Load() {
			return ResultConflict, nil
		}
		ch = &Channel{Name: c.Channel, Epoch: c.Epoch, Next: 1, Used: c.Time, gen: s.gen}
		created = true
	case !ok || ch.Epoch != c.Epoch || ch.TailID() != c.Tail:
		return ResultConflict, nil
	}
	if _, open := ch.Open(); open != (c.Seal.End != 0) {
		// The proposer saw the tail open (it says how it ends) and a
		// CLOSE ended it since, or the reverse: the new streamlet would
		// start elsewhere than where the proposer hosted it.
		return ResultConflict, nil
	}
	for _, r := range ch.List {
		if r.ID == c.New.ID {
			return ResultInvalid, nil // an id is never reused within a list
		}
	}
	chg := Change{Channel: c.Channel, Epoch: ch.Epoch, Created: created}
	ch = s.writable(sh, ch)
	if _, open := ch.Open(); open {
		if !ch.closeTail(&c.Seal, c.Time) {
			return ResultInvalid, nil
		}
		t, _ := ch.Tail()
		chg.Closed = []role.StreamletRef{cloneRef(t)}
	}
	o := ch.open(&c.New, c.Time)
	o = cloneRef(o)
	chg.Opened = &o
	if created {
		sh.m[c.Channel] = ch
		s.count.Add(1)
	}
	return ResultOK, []Change{chg}
}

func (s *State) closeCmd(c *Cmd) (Result, []Change) {
	sh := s.shard(c.Channel)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ch, ok := sh.m[c.Channel]
	if !ok || ch.Epoch != c.Epoch {
		return ResultConflict, nil
	}
	if o, open := ch.Open(); !open || o.ID != c.Tail {
		return ResultConflict, nil
	}
	ch = s.writable(sh, ch)
	if !ch.closeTail(&c.Seal, c.Time) {
		return ResultInvalid, nil
	}
	t, _ := ch.Tail()
	return ResultOK, []Change{{Channel: c.Channel, Epoch: ch.Epoch, Closed: []role.StreamletRef{cloneRef(t)}}}
}

func (s *State) holdersCmd(c *Cmd) (Result, []Change) {
	sh := s.shard(c.Channel)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ch, ok := sh.m[c.Channel]
	if !ok || ch.Epoch != c.Epoch {
		return ResultConflict, nil
	}
	ch = s.writable(sh, ch)
	r, ok := ch.holders(c.Tail, c.Add, c.Remove)
	if !ok {
		return ResultConflict, nil
	}
	ch.Used = c.Time
	return ResultOK, []Change{{Channel: c.Channel, Epoch: ch.Epoch, Closed: []role.StreamletRef{cloneRef(r)},
		Removed: slices.Clone(c.Remove)}}
}

// Instance returns the incarnation of node that may hold streamlets, as
// the last NODE_GONE of it recorded ("", false: none recorded).
func (s *State) Instance(node string) (string, bool) {
	s.imu.RLock()
	defer s.imu.RUnlock()
	i, ok := s.instances[node]
	return i, ok
}

// Instances returns a copy of every node's recorded incarnation.
func (s *State) Instances() map[string]string {
	s.imu.RLock()
	defer s.imu.RUnlock()
	return maps.Clone(s.instances)
}

func (s *State) nodeGoneCmd(c *Cmd) (Result, []Change) {
	s.imu.Lock()
	if c.Instance == "" {
		delete(s.instances, c.Node)
	} else {
		s.instances[c.Node] = c.Instance
	}
	s.imu.Unlock()
	var changes []Change
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for name, ch := range sh.m {
			if !ch.holdsClosed(c.Node) {
				continue
			}
			ch = s.writable(sh, ch) // (replacing an existing key while ranging is allowed)
			if changed := ch.nodeGone(c.Node); len(changed) > 0 {
				for k := range changed {
					changed[k] = cloneRef(changed[k])
				}
				changes = append(changes, Change{Channel: name, Epoch: ch.Epoch, Closed: changed, Removed: []string{c.Node}})
			}
		}
		sh.mu.Unlock()
	}
	return ResultOK, changes
}

func (s *State) expireCmd(c *Cmd) (Result, []Change) {
	var changes []Change
	for _, ref := range c.Batch {
		sh := s.shard(ref.Channel)
		sh.mu.Lock()
		if ch, ok := sh.m[ref.Channel]; ok && ch.Epoch == ref.Epoch {
			if k := ch.expiring(ref.ID); k > 0 {
				ch = s.writable(sh, ch)
				changes = append(changes, Change{Channel: ref.Channel, Epoch: ch.Epoch, Freed: ch.expire(k)})
			}
		}
		sh.mu.Unlock()
	}
	return ResultOK, changes
}

func (s *State) dropCmd(c *Cmd) (Result, []Change) {
	var changes []Change
	for _, ref := range c.Batch {
		sh := s.shard(ref.Channel)
		sh.mu.Lock()
		if ch, ok := sh.m[ref.Channel]; ok && ch.Epoch == ref.Epoch && len(ch.List) == 0 {
			s.epochFloor.Store(max(s.epochFloor.Load(), ch.Epoch))
			sh.m = mapshrink.Delete(sh.m, ref.Channel, &sh.peak)
			s.count.Add(-1)
			changes = append(changes, Change{Channel: ref.Channel, Epoch: ch.Epoch, Dropped: true})
		}
		sh.mu.Unlock()
	}
	return ResultOK, changes
}

// writable returns ch to change in place, or, when ch was made before the
// last Snapshot (which may be encoding it on another goroutine), a copy
// that replaces it in sh, which the caller holds locked. The copy shares
// the entries' replica slices: they are never changed in place, only
// replaced (setReplicas). So a channel is copied at most once per
// snapshot, and only when a command changes it.
func (s *State) writable(sh *shard, ch *Channel) *Channel {
	if ch.gen == s.gen {
		return ch
	}
	c := *ch
	c.List = slices.Clone(ch.List)
	c.gen = s.gen
	sh.m[c.Name] = &c
	return &c
}

func cloneRef(r role.StreamletRef) role.StreamletRef {
	r.Replicas = append([]string(nil), r.Replicas...)
	if len(r.Replicas) == 0 {
		r.Replicas = nil
	}
	return r
}

// Tail returns the channel's epoch and newest streamlet (ok false when
// the channel does not exist; has false when its list is empty), copying
// nothing else: the write path's lookup.
func (s *State) Tail(name string) (epoch uint64, tail role.StreamletRef, ok, has bool) {
	sh := s.shard(name)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	c, ok := sh.m[name]
	if !ok {
		return 0, role.StreamletRef{}, false, false
	}
	t, has := c.Tail()
	return c.Epoch, cloneRef(t), true, has
}
