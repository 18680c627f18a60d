package cluster

import (
	"encoding/json"

	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/membership"
)

// Status is a node's view of the cluster (`sluice cluster status`).
type Status struct {
	Node    string         `json:"node"`
	Members []MemberStatus `json:"members"`
	// Copies are the streamlet copies of the node's manager (re-replication
	// and drains, manager/copy.go): counted on the leader, whose manager
	// makes them.
	Copies CopyStatus `json:"copies"`
	// Raft is the node's member of the metadata log.
	Raft RaftStatus `json:"raft"`
	// Channels is how many channels the committed state holds.
	Channels int `json:"channels"`
}

// RaftStatus is the metadata log as one node sees it.
type RaftStatus struct {
	State     string   `json:"state"` // leader, follower, candidate or shutdown
	Leader    string   `json:"leader"`
	Term      uint64   `json:"term"`
	ServerID  string   `json:"server_id"`
	Voters    []string `json:"voters"`
	NonVoters []string `json:"non_voters"`
	Commit    uint64   `json:"commit_index"`
	Applied   uint64   `json:"applied_index"`
	Snapshot  uint64   `json:"snapshot_index"`
}

// CopyStatus counts a manager's copies of closed streamlets: made, failed
// (tried again), running now, and (on the leader) the streamlets held by
// fewer usable nodes than they should be now: closed ones waiting for a
// copy, open ones with a replica gone, waiting for a recovery.
type CopyStatus struct {
	Done    int64 `json:"done"`
	Failed  int64 `json:"failed"`
	Running int   `json:"running"`
	Waiting int64 `json:"waiting"`
}

// MemberStatus is one member in a Status.
type MemberStatus struct {
	Name       string  `json:"name"`
	State      string  `json:"state"`
	Gossip     string  `json:"gossip"`
	Client     string  `json:"client,omitempty"`
	Capacity   float64 `json:"capacity,omitempty"`
	Streamlets int     `json:"streamlets"`
	Channels   int     `json:"channels"`
	Conns      int     `json:"conns"`
	MsgsIn     float64 `json:"msgs_in_per_sec"`
	BytesIn    float64 `json:"bytes_in_per_sec"`
	Load       float64 `json:"load"`
	// Draining: the member drains (`sluice cluster drain`, SIGTERM).
	Draining bool `json:"draining,omitempty"`
}

// Status returns the node's view of the cluster.
func (c *Cluster) Status() Status {
	st := Status{Node: c.self, Channels: c.st.Len()}
	st.Copies.Done, st.Copies.Failed, st.Copies.Running, st.Copies.Waiting = c.mgr.CopyStats()
	if rl := c.rlog.Load(); rl != nil {
		rs := rl.Status()
		st.Raft = RaftStatus{State: rs.State, Leader: rs.Leader, Term: rs.Term, ServerID: rs.ServerID,
			Commit: rs.CommitIndex, Applied: rs.AppliedIndex, Snapshot: rs.SnapshotIndex}
		for _, v := range rs.Voters {
			st.Raft.Voters = append(st.Raft.Voters, v.Node)
		}
		for _, v := range rs.NonVoters {
			st.Raft.NonVoters = append(st.Raft.NonVoters, v.Node)
		}
	}
	down, loads := c.view.Marks()
	ml := c.ml.Load()
	if ml == nil {
		return st // still joining
	}
	for _, m := range ml.All() {
		ms := MemberStatus{Name: m.Name, State: m.State.String(), Gossip: m.Addr}
		var meta view.Meta
		if m.Local {
			meta = c.view.Local()
		} else {
			_ = json.Unmarshal(m.Meta, &meta) // what decodes of a member not in the view
		}
		if down[m.Name] && m.State == membership.Alive {
			ms.State = "unreachable"
		}
		ms.Client, ms.Capacity, ms.Streamlets, ms.Channels = meta.Client, meta.Cap, meta.Streamlets, meta.Channels
		ms.Conns, ms.MsgsIn, ms.BytesIn = meta.Conns, meta.MsgsIn, meta.BytesIn
		ms.Load = loads[m.Name]
		ms.Draining = meta.Drain
		if meta.Drain && ms.State == "alive" {
			ms.State = "draining"
		}
		st.Members = append(st.Members, ms)
	}
	return st
}
