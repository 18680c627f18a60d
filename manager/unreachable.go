package manager

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

// A follower its orderer cannot reach (DESIGN.md "Replication", "An
// unreachable follower"). The orderer of a replicated streamlet shows and
// acknowledges a record only once every follower holds it, so a follower
// that the orderer cannot reach stops the streamlet's acknowledgements,
// while this manager, which may still reach both, sees nothing wrong (a
// one-way cut between two hosts, or a partition of the two from each other
// alone). The orderer reports it (Unreachable) once the follower
// acknowledged nothing for its stall timeout (package cluster); the
// manager then recovers the streamlet as after a replica's death (fence
// every replica, seal at the length all that answer hold) and answers its
// outcome, which the orderer applies to its own replica when the manager
// could not reach it. The pair is noted as cut for cutHold: no streamlet
// opened meanwhile has one of the two as its orderer and the other as a
// follower, so the channel continues on a full replica set that works.

// cutHold is how long a reported cut keeps its two nodes from being
// orderer and follower of one new streamlet (renewed by every report).
const cutHold = 30 * time.Second

// maxCuts bounds the cut pairs remembered (the oldest go first).
const maxCuts = 1024

// Recovered is Unreachable's answer: the streamlet's state in the list
// once recovered. Lost: no replica could be sealed (readers get GAP lost
// for it); otherwise it holds Len records, sealed, on Replicas.
type Recovered struct {
	Lost     bool
	Len      uint32
	Replicas []string
}

// cuts remembers reported cuts between pairs of nodes, each until an
// expiry (unix ns). Safe for concurrent use (its own mutex, taken alone).
type cuts struct {
	mu sync.Mutex
	m  map[[2]string]int64
}

// pairKey orders a pair: a cut counts in both directions (a one-way cut
// at the IP level breaks TCP both ways).
func pairKey(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// note records that a and b cannot reach each other, until until.
func (c *cuts) note(a, b string, now, until int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[2]string]int64)
	}
	for k, exp := range c.m {
		if exp <= now {
			delete(c.m, k)
		}
	}
	if len(c.m) >= maxCuts {
		var oldest [2]string
		first := true
		for k, exp := range c.m {
			if first || exp < c.m[oldest] {
				oldest, first = k, false
			}
		}
		delete(c.m, oldest)
	}
	c.m[pairKey(a, b)] = until
}

// from returns the nodes noted as cut from node at now, sorted.
func (c *cuts) from(node string, now int64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cutFrom(c.m, node, now)
}

// cutFrom returns the nodes that m notes as cut from node and whose cut
// has not expired at now, sorted (pure).
func cutFrom(m map[[2]string]int64, node string, now int64) []string {
	var out []string
	for k, exp := range m {
		if exp <= now {
			continue
		}
		switch node {
		case k[0]:
			out = append(out, k[1])
		case k[1]:
			out = append(out, k[0])
		}
	}
	slices.Sort(out)
	return out
}

// unreachableStep is what Unreachable does with a report.
type unreachableStep uint8

const (
	// stepUnknown: the list has no such streamlet (expired, or another
	// manager's list): nothing to recover here.
	stepUnknown unreachableStep = iota
	// stepRecover: recover the streamlet, then answer its state.
	stepRecover
	// stepAnswer: the streamlet was recovered already without the
	// follower, or lost: answer its state as it is.
	stepAnswer
)

// decideUnreachable decides what to do with the report that the orderer
// of streamlet id cannot reach follower, given the channel's committed
// list (pure). A replicated streamlet that still lists the follower is
// recovered if it is open (a closed one's committed end is held by every
// replica: its orderer sealed it only once all was durable); one that no
// longer does, or is lost, is answered as it is.
func decideUnreachable(list []role.StreamletRef, id uint64, follower string) (unreachableStep, role.StreamletRef) {
	i := slices.IndexFunc(list, func(r role.StreamletRef) bool { return r.ID == id })
	if i < 0 {
		return stepUnknown, role.StreamletRef{}
	}
	ref := list[i]
	if !ref.Lost && len(ref.Replicas) > 1 && slices.Contains(ref.Replicas, follower) {
		return stepRecover, ref
	}
	return stepAnswer, ref
}

// answerOf is the answer for streamlet ref once nothing more is to be
// recovered of it (pure); false while it is open.
func answerOf(ref role.StreamletRef) (Recovered, bool) {
	switch {
	case ref.Lost:
		return Recovered{Lost: true}, true
	case !ref.Closed:
		return Recovered{}, false
	}
	return Recovered{Len: uint32(ref.End - ref.First), Replicas: slices.Clone(ref.Set())}, true
}

// Unreachable handles the report of orderer, the first replica of
// streamlet id of channel, that it cannot reach follower (its stall
// timeout passed with records unacknowledged): the pair is kept from
// ordering and following one new streamlet for cutHold, the streamlet is
// recovered (fence, tails, seal at what every replica that answers holds,
// committed) unless it is closed already, and its committed state is
// returned. It waits for hosts and a commit (call it off the loops); it
// fails with role.ErrUnknownStreamlet when the list has no such streamlet
// and with an error wrapping role.ErrUnavailable or role.ErrNotLeader when
// it cannot recover it now.
func (m *Manager) Unreachable(channel string, id uint64, orderer, follower string) (Recovered, error) {
	if !m.leading.Load() {
		return Recovered{}, fmt.Errorf("%w: recovery of streamlet %d of %q", role.ErrNotLeader, id, channel)
	}
	now := m.now().UnixNano()
	m.cut.note(orderer, follower, now, now+int64(cutHold))
	c, ok := m.st.Channel(channel)
	if !ok {
		return Recovered{}, fmt.Errorf("%w: streamlet %d of unknown channel %q", role.ErrUnknownStreamlet, id, channel)
	}
	step, ref := decideUnreachable(c.List, id, follower)
	switch step {
	case stepUnknown:
		return Recovered{}, fmt.Errorf("%w: streamlet %d is not in the list of %q", role.ErrUnknownStreamlet, id, channel)
	case stepRecover:
		if !ref.Closed {
			m.logger().Warn("sluice cluster: a replica's orderer cannot reach a follower; recovering the streamlet without the link",
				"channel", channel, "streamlet", id, "orderer", orderer, "follower", follower, "first", ref.First)
			op := m.begin(channel, false)
			err := m.closeOpen(channel, id, true)
			m.end(channel, op, role.Grant{}, nil)
			if err != nil {
				return Recovered{}, err
			}
			if c, ok = m.st.Channel(channel); !ok {
				return Recovered{}, fmt.Errorf("%w: channel %q dropped while recovering streamlet %d", role.ErrUnknownStreamlet, channel, id)
			}
			i := slices.IndexFunc(c.List, func(r role.StreamletRef) bool { return r.ID == id })
			if i < 0 {
				return Recovered{}, fmt.Errorf("%w: streamlet %d of %q expired", role.ErrUnknownStreamlet, id, channel)
			}
			ref = c.List[i]
		}
	}
	r, ok := answerOf(ref)
	if !ok {
		return Recovered{}, fmt.Errorf("%w: streamlet %d of %q is still open", role.ErrUnavailable, id, channel)
	}
	return r, nil
}
