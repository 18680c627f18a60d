package metalog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// progressTransport is raft's NetworkTransport with one addition: on the
// leader, every answered AppendEntries (the heartbeats, every tenth of the
// heartbeat timeout, go through it) records the follower's last log index
// and the time, which tell the reconcile loop which non-voters are caught
// up (raft keeps its match indexes private).
type progressTransport struct {
	*raft.NetworkTransport
	peers *peerTracker
	now   func() time.Time
}

// AppendEntries implements raft.Transport.
func (t *progressTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.peers.saw(string(id), resp.LastLog, t.now())
	}
	return err
}

// peerTracker keeps, per server id, the last answer the leader had from
// it. Safe for concurrent use.
type peerTracker struct {
	mu    sync.Mutex
	peers map[string]peerSeen
}

// peerSeen is the last answer from a follower.
type peerSeen struct {
	lastLog uint64
	at      time.Time
}

func newPeerTracker() *peerTracker { return &peerTracker{peers: make(map[string]peerSeen)} }

func (p *peerTracker) saw(id string, lastLog uint64, at time.Time) {
	p.mu.Lock()
	p.peers[id] = peerSeen{lastLog: lastLog, at: at}
	p.mu.Unlock()
}

// snapshot returns a copy of what was seen.
func (p *peerTracker) snapshot() map[string]peerSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]peerSeen, len(p.peers))
	for id, s := range p.peers {
		m[id] = s
	}
	return m
}

// reset forgets everything (a new leadership starts from scratch).
func (p *peerTracker) reset() {
	p.mu.Lock()
	clear(p.peers)
	p.mu.Unlock()
}
