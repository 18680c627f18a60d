package host

import (
	"sync"
	"time"
)

// A first-streamlet claim: the streamlet a manager is about to open as the
// first of a channel (none before it that it knows of, or only lost ones),
// and the node chosen to host it. A manager opens a first streamlet only
// once a majority of the cluster's nodes hold its claim (package cluster,
// op CLAIM): majorities intersect, so two managers whose views of a
// channel disagree (a heartbeat flap left both rebuilding it from nothing)
// cannot both open one. Later streamlets are fenced by their
// predecessor's successor record (Streamlet.seal).

// claimKeep is how long a node holds a claim it took: far longer than a
// manager's state of a channel stays stale while its node keeps its quorum
// (a node that loses it forgets every channel), so that a manager that
// rebuilt an empty channel before the winner opened its first streamlet
// still meets the winner's claim when it asks. maxClaims bounds the claims
// held, the oldest evicted first.
const (
	claimKeep = time.Hour
	maxClaims = 1 << 16
)

type claim struct {
	id    uint64
	host  string
	until int64
}

// claims are the first-streamlet claims a node holds, by channel.
type claims struct {
	mu    sync.Mutex
	m     map[string]claim
	order []string // channels in the order their claims were taken
}

// Claim takes or answers the claim of channel's first streamlet at this
// node: it holds (id, node) if it holds no live claim of channel, or holds
// over (a claim whose streamlet the asker barred at its node: never hosted,
// so it can be replaced), and returns the claim it holds then. An asker
// won this node's vote when the returned id is its own. Safe for
// concurrent use.
func (h *Host) Claim(channel string, id uint64, node string, over uint64) (uint64, string) {
	now := h.clock().UnixNano()
	c := &h.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]claim)
	}
	c.prune(now)
	old, ok := c.m[channel]
	if ok && old.until > now && old.id != id && (over == 0 || old.id != over) {
		return old.id, old.host
	}
	if !ok {
		if len(c.order) >= maxClaims {
			delete(c.m, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, channel)
	}
	c.m[channel] = claim{id: id, host: node, until: now + int64(claimKeep)}
	return id, node
}

// prune drops the expired claims at the head of the order (mu held); a
// replaced claim keeps its place, so an entry may outlive its place by
// one claimKeep (it is then dropped when reached).
func (c *claims) prune(now int64) {
	for len(c.order) > 0 {
		ch := c.order[0]
		if cl, ok := c.m[ch]; ok && cl.until > now {
			return
		}
		delete(c.m, ch)
		c.order = c.order[1:]
	}
	if len(c.order) == 0 && len(c.m) == 0 {
		c.m, c.order = make(map[string]claim), nil
	}
}
