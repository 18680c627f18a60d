// Package role holds the types the three roles of a Sluice node (BRIEF.md,
// "How it works": gateway, channel manager, streamlet host) exchange: write
// grants, streamlet lists, channel info, hosts' reports, the Manager and
// Host interfaces and their errors. It imports nothing from the project.
//
// Implementations: package manager (the channel manager), package host
// (the streamlet host) and package cluster (the same interfaces reached
// over node links). The gateway (package engine) never calls a Manager
// directly: it asks through the asynchronous control plane (engine's
// plane.go), which is a direct call on a single node and a routed request
// in a cluster.
package role

import (
	"errors"
	"time"
)

// Grant is the channel manager's permission to write one streamlet (or to
// read it, for readers). It names the streamlet, its host, the position of
// its first message and the limits under which the host accepts writes. A
// grant stops working when its streamlet closes or when LeaseEnd passes;
// the holder then asks the manager again.
type Grant struct {
	Channel   string
	Epoch     uint64 // the channel incarnation the grant belongs to
	Streamlet uint64 // streamlet id, unique per node
	Host      string // id of the hosting node
	First     uint64 // position of the streamlet's first message
	LimitMsgs int
	LimitSize int
	LeaseEnd  int64 // unix nanoseconds; writes are refused from then on
	// Replicas names the nodes holding the streamlet, Host first: the
	// first replica orders the appends (assigns positions) and forwards
	// them to the others; a write is acknowledged once every replica holds
	// it. nil or one entry: the streamlet has a single copy, on Host.
	Replicas []string
	// Prior is set only in the grant a manager sends with HostStreamlet:
	// the channel's earlier retained streamlets that may hold message ids
	// within the dedup window (not lost; oldest first; at most MaxPrior,
	// the newest), so that the new host completes the channel's dedup
	// window from them before its first append (package host, dedup.go).
	// A write grant handed to a gateway has none.
	Prior []StreamletRef
}

// Set returns the streamlet's replica set: Replicas, or just Host.
func (g *Grant) Set() []string { return replicaSet(g.Host, g.Replicas) }

func replicaSet(host string, replicas []string) []string {
	if len(replicas) > 0 {
		return replicas
	}
	if host == "" {
		return nil
	}
	return []string{host}
}

// MaxPrior bounds Grant.Prior.
const MaxPrior = 1024

// StreamletRef is one entry of a channel's streamlet list.
type StreamletRef struct {
	ID uint64
	// Host is the streamlet's first replica, which orders its appends;
	// Replicas (when there are several) lists every node holding a copy,
	// Host first. A replica that died is removed from the list; the
	// streamlet is Lost only when none is left.
	Host     string
	Replicas []string
	First    uint64
	// End is one past the last position; meaningful only when Closed.
	End    uint64
	Closed bool
	// Lost: the streamlet's data died with its hosts. Readers get GAP
	// lost for whatever of [First, End) they cannot read from a copy they
	// hold.
	Lost bool
	// LeaseEnd is when the streamlet stops taking writes (unix ns).
	LeaseEnd int64
	// Expires is when a closed streamlet is freed (unix ns); 0 while open.
	Expires int64
}

// Set returns the streamlet's replica set: Replicas, or just Host.
func (r *StreamletRef) Set() []string { return replicaSet(r.Host, r.Replicas) }

// ChannelInfo is a reader's view of a channel: what is retained and where.
type ChannelInfo struct {
	Epoch uint64
	// Earliest is the first retained position; Earliest == Next when
	// nothing is retained.
	Earliest uint64
	// Next is the position the next publish will get.
	Next       uint64
	Streamlets []StreamletRef // oldest first; only the last may be open
}

// Locate returns the index in info.Streamlets of the streamlet holding
// position p, or -1 when p is not retained (p < Earliest) or not yet
// written (p >= Next).
func (info *ChannelInfo) Locate(p uint64) int {
	for i := len(info.Streamlets) - 1; i >= 0; i-- {
		s := &info.Streamlets[i]
		if p >= s.First && (!s.Closed || p < s.End) {
			if p >= info.Next {
				return -1
			}
			return i
		}
	}
	return -1
}

// Manager is the channel-manager role: it keeps each channel's streamlet
// list and grants write and read permission. Safe for concurrent use.
type Manager interface {
	// WriteGrant returns a write grant for channel's open streamlet,
	// creating the channel and opening a streamlet on a host chosen by
	// load when needed. after names the streamlet of the caller's previous
	// grant, which refused a write (full, sealed or lease over); 0 if none.
	// The manager then closes that streamlet before granting a new one.
	WriteGrant(channel string, after uint64) (Grant, error)
	// Info returns the channel's retained streamlets and positions;
	// found is false for a channel that does not exist, unless create is
	// set: then it is created (a new incarnation), which fails with err
	// when the change cannot be committed now.
	Info(channel string, create bool) (info ChannelInfo, found bool, err error)
	// Interest adds delta (+1 or -1) to the number of gateway loops of
	// node reading the channel; a channel with readers is never dropped.
	Interest(channel, node string, delta int)
	// Expire frees the channel's closed streamlets up to and including
	// streamlet through now, ahead of their TTL: the host of through holds
	// more than its retention budget (Options.MaxRetained). Readers of the
	// freed range get GAP expired, as after a TTL. The open streamlet is
	// never expired, and an id the channel does not list as closed frees
	// nothing. It returns how many streamlets it expired.
	Expire(channel string, through uint64) (int, error)
}

// Host is the hosting-node role: it keeps streamlets in memory and serves
// appends and reads by position. Safe for concurrent use.
type Host interface {
	// HostStreamlet asks the host to host a new streamlet under grant g.
	HostStreamlet(g Grant) error
	// Seal closes streamlet id for writes and returns its end position
	// once every record it holds is durable (held by each of its
	// replicas): the end a channel's committed list may name. It fails
	// with ErrNotDurable when that does not happen within the host's
	// bound (a follower cannot be reached: the streamlet is recovered
	// instead) and with ErrUnknownStreamlet for an id it does not hold.
	Seal(id uint64) (end uint64, err error)
	// Free releases streamlet id's memory once its readers are done.
	Free(id uint64)
	// Len reports how many messages streamlet id holds.
	Len(id uint64) (int, bool)
	// Fence stops this replica of streamlet id from taking appends, for
	// good (the recovery of a replicated streamlet, DESIGN.md
	// "Replication"), and reports its tail.
	Fence(id uint64) (Tail, error)
	// SealAt ends this replica of streamlet id at n records (dropping
	// what lies beyond, which no replica ever showed) with keep as its
	// replica set. It fails when the replica holds fewer than n records,
	// or when an earlier recovery sealed it at another length.
	SealAt(id uint64, n uint32, keep []string) error
}

// Tail is a fenced replica's report (Host.Fence): the records it holds,
// and whether an earlier recovery sealed it already (Final: Held is then
// the streamlet's content).
type Tail struct {
	Held  uint32
	Final bool
}

// Hosted is a host's report of one streamlet it holds (status, drain).
type Hosted struct {
	ID, Epoch, First uint64
	Host             string
	Len              uint32 // messages held
	Sealed           bool
	LeaseEnd         int64
	LimitMsgs        uint32
	// Replicas is the replica set the streamlet was hosted with (orderer
	// first; nil for a single copy).
	Replicas []string
	// Fenced: recovery fenced this replica (it takes no more appends);
	// Final: recovery sealed it at its present length.
	Fenced, Final bool
}

// Limits are the streamlet limits in force for one channel: a streamlet
// closes for writes at Msgs messages, when the next message would take it
// over Size stored bytes, or when its write lease of Life ends; a closed
// streamlet is freed TTL after it closed.
type Limits struct {
	Msgs, Size int
	Life, TTL  time.Duration
	// Replicas is how many distinct nodes hold each streamlet (1 or more;
	// 0 counts as 1).
	Replicas int
}

// Errors of the roles.
var (
	// ErrStreamletClosed: the streamlet refused a write because it is full,
	// sealed or its lease ended; ask for a new grant.
	ErrStreamletClosed = errors.New("sluice: streamlet closed for writes")
	// ErrUnknownStreamlet: the host does not hold that streamlet.
	ErrUnknownStreamlet = errors.New("sluice: unknown streamlet")
	// ErrNotDurable: a replicated streamlet's orderer sealed it but its
	// followers did not confirm every record in time; recover it.
	ErrNotDurable = errors.New("sluice: sealed streamlet not durable in time")
	// ErrSealedElsewhere: a replica was sealed at another length by an
	// earlier recovery.
	ErrSealedElsewhere = errors.New("sluice: replica sealed at another length")
	// ErrNotLeader: this node does not coordinate the cluster now (it is
	// not the leader of the metadata log); ask the leader. Retriable.
	ErrNotLeader = errors.New("sluice: not the cluster's leader")
	// ErrUnavailable: the change cannot be made now (a host that must be
	// asked is unreachable but not known dead, or the metadata log cannot
	// commit); nothing was changed. Retriable.
	ErrUnavailable = errors.New("sluice: unavailable")
	// ErrNoHost: no live node could host a new streamlet (or, in a
	// cluster, no live node manages the channel).
	ErrNoHost = errors.New("sluice: no host available")
)
