package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/placement"
)

// Sentinel errors of package cluster.
var (
	// ErrNotReady: the nodes did not all see each other in time.
	ErrNotReady = errors.New("cluster bench: cluster not formed")
	// ErrProbe: a node-to-node probe request failed.
	ErrProbe = errors.New("cluster bench: probe failed")
	// ErrCheck: a run's result is wrong (messages lost, placement on one
	// node only).
	ErrCheck = errors.New("cluster bench: check failed")
)

// Nodes is a set of in-process Sluice servers on loopback: one standalone
// server, or the members of one cluster.
type Nodes struct {
	// Servers are the nodes, in start order; in a cluster the first is
	// the seed the others joined.
	Servers []*engine.Server
	// Names are the nodes' names (Options.ServerName), parallel to
	// Servers.
	Names []string
}

// NodeOptions returns the options of node name: engine defaults on a free
// loopback port, quiet logs, loops event loops (0 = one per CPU), and,
// when join is not nil, cluster mode with gossip on a free loopback port
// joining the seeds in join (an empty, non-nil join starts a new cluster).
func NodeOptions(name string, loops int, join []string) engine.Options {
	o := engine.DefaultOptions()
	o.Listen = "127.0.0.1:0"
	o.MaxConnsPerAddr = 0 // every load generator connection comes from 127.0.0.1
	o.ServerName = name
	o.Loops = loops
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if join != nil {
		o.Cluster = &engine.ClusterOptions{Listen: "127.0.0.1:0", Join: join,
			ReportInterval: 250 * time.Millisecond}
	}
	return o
}

// StartNodes starts n nodes named prefix+"a", prefix+"b", ...: a
// standalone server when cluster is false (n must be 1), else a cluster
// whose members all see n alive members before it returns (bounded by
// ctx). mutate, if not nil, adjusts each node's options before it starts
// (limits, loops, report interval). On error every started node is shut
// down.
func StartNodes(ctx context.Context, n int, cluster bool, prefix string, mutate func(*engine.Options)) (*Nodes, error) {
	if n < 1 || n > 26 || (!cluster && n != 1) {
		return nil, fmt.Errorf("%w: %d nodes (cluster %v)", ErrNotReady, n, cluster)
	}
	ns := &Nodes{}
	var seed []string
	for i := 0; i < n; i++ {
		name := prefix + string(rune('a'+i))
		var join []string
		if cluster {
			join = append([]string{}, seed...)
		}
		o := NodeOptions(name, 1, join)
		if mutate != nil {
			mutate(&o)
		}
		s, err := engine.Start(o)
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("cluster bench: start node %s: %w", name, err)
		}
		ns.Servers = append(ns.Servers, s)
		ns.Names = append(ns.Names, name)
		if cluster && seed == nil {
			st, _ := s.Cluster()
			for _, m := range st.Members {
				if m.Name == name {
					seed = []string{m.Gossip}
				}
			}
			if seed == nil {
				ns.Close()
				return nil, fmt.Errorf("%w: seed %s reports no gossip address", ErrNotReady, name)
			}
		}
	}
	if cluster {
		if err := ns.WaitMembers(ctx, n); err != nil {
			ns.Close()
			return nil, err
		}
	}
	return ns, nil
}

// WaitMembers polls every node's Cluster view until each lists n members
// in state "alive", or ctx ends.
func (ns *Nodes) WaitMembers(ctx context.Context, n int) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ready := true
		for _, s := range ns.Servers {
			st, ok := s.Cluster()
			alive := 0
			for _, m := range st.Members {
				if m.State == "alive" {
					alive++
				}
			}
			if !ok || alive != n {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %d members not alive everywhere: %v", ErrNotReady, n, ctx.Err())
		}
	}
}

// AllAlive reports whether every node sees every member as "alive".
func (ns *Nodes) AllAlive() bool {
	for _, s := range ns.Servers {
		st, _ := s.Cluster()
		if len(st.Members) != len(ns.Servers) {
			return false
		}
		for _, m := range st.Members {
			if m.State != "alive" {
				return false
			}
		}
	}
	return true
}

// Addrs returns the nodes' client addresses, parallel to Servers.
func (ns *Nodes) Addrs() []string {
	out := make([]string, len(ns.Servers))
	for i, s := range ns.Servers {
		out[i] = s.Addr()
	}
	return out
}

// Self returns node i's own entry of its Cluster view (its freshest load
// report); ok is false on a standalone server.
func (ns *Nodes) Self(i int) (engine.MemberStatus, bool) {
	st, ok := ns.Servers[i].Cluster()
	if !ok {
		return engine.MemberStatus{}, false
	}
	for _, m := range st.Members {
		if m.Name == ns.Names[i] {
			return m, true
		}
	}
	return engine.MemberStatus{}, false
}

// ManagerOf returns the node that manages channel when every node of the
// cluster is alive: the engine's choice (placement.Snapshot.Manager over
// the members and their capacities), computed here from node 0's view.
func (ns *Nodes) ManagerOf(channel string) (string, error) {
	st, ok := ns.Servers[0].Cluster()
	if !ok {
		return ns.Names[0], nil
	}
	var nodes []placement.Node
	for _, m := range st.Members {
		c := m.Capacity
		if !(c > 0) {
			c = 1
		}
		nodes = append(nodes, placement.Node{ID: placement.NodeID(m.Name), Capacity: c})
	}
	snap, err := placement.NewSnapshot(nodes, placement.Options{})
	if err != nil {
		return "", fmt.Errorf("cluster bench: manager of %q: %w", channel, err)
	}
	id, _ := snap.Manager(channel)
	return string(id), nil
}

// Close shuts every node down (5 s each at most). Idempotent.
func (ns *Nodes) Close() {
	for _, s := range ns.Servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Shutdown(ctx)
		cancel()
	}
	ns.Servers, ns.Names = nil, nil
}
