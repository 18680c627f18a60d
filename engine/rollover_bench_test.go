package engine

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/benchhook"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkClusterRollover measures, in one run on a three-node cluster
// over loopback (three voters, the leader a), what the metadata log's
// coordination costs:
//   - rollover: a streamlet rollover at the leader's manager (WriteGrant
//     after the open streamlet: seal it at its host, commit the OPEN to
//     the log while the next is hosted);
//   - grant-new-channel: a non-leader gateway's first write grant of a new
//     channel (a request to the leader, which commits the OPEN and hosts
//     the streamlet in parallel);
//   - first-publish: a client's first acknowledged publish to a new
//     channel through a non-leader node (the grant, then the APPEND to the
//     host): at most three round trips between nodes;
//   - node-rtt: one NODE_APPEND of one record from the gateway to a
//     streamlet on the third node, the unit the others are counted in.
//
// Each sub-benchmark also reports what crossed between the nodes per
// operation (costCounter): node requests, NODE_APPENDs and entries of the
// metadata log; the new-channel ones report the median latency by where
// placement put the first streamlet ("third": neither the leader nor the
// gateway, so every round trip crosses nodes). Each node keeps its log in
// a data directory (fsync per append, as in production). Leases last a minute, so
// that no lease ends during the run (a streamlet whose lease ended would
// be closed by the leader's tick, beside what is measured).
func BenchmarkClusterRollover(b *testing.B) {
	dir := b.TempDir()
	nodes := startCluster3(b, func(o *Options) {
		o.Logger, o.LimitLife, o.LimitMsgs = nil, time.Minute, 1<<20
		o.Cluster.DataDir = filepath.Join(dir, o.ServerName) // the log on disk, as in production
		o.Cluster.RaftTimeout = 0                            // the default, 1 s
	})
	a, gw := nodes[0], nodes[1]
	ch := channelManagedBy(b, a, "a", "rollover")
	eventually(b, 6*waitFor, "three voters", func() bool { return len(a.clu().Status().Raft.Voters) == 3 })
	g, err := a.mgr.WriteGrant(ch, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rollover", func(b *testing.B) {
		b.ReportAllocs()
		cc := startCost(a)
		for b.Loop() {
			t0 := time.Now()
			if g, err = a.mgr.WriteGrant(ch, g.Streamlet); err != nil {
				b.Fatal(err)
			}
			cc.took("", time.Since(t0))
		}
		cc.report(b, b.N)
	})
	n := 0
	b.Run("grant-new-channel", func(b *testing.B) {
		b.ReportAllocs()
		cc := startCost(a)
		for b.Loop() {
			n++
			name := fmt.Sprintf("fresh.g.%d", n)
			t0 := time.Now()
			if _, err := gw.clu().WriteGrant(name, 0); err != nil {
				b.Fatal(err)
			}
			cc.took(name, time.Since(t0))
		}
		cc.report(b, b.N)
	})
	pub, _ := helloRaw(b, gw.Addr())
	b.Run("first-publish", func(b *testing.B) {
		b.ReportAllocs()
		cc := startCost(a)
		for b.Loop() {
			n++
			name := fmt.Sprintf("fresh.p.%d", n)
			t0 := time.Now()
			if _, err := pub.publishBatch(name, [][]byte{[]byte("x")}); err != nil {
				b.Fatal(err)
			}
			cc.took(name, time.Since(t0))
		}
		cc.report(b, b.N)
	})
	b.Run("node-rtt", func(b *testing.B) { benchNodeRTT(b, a, gw, "c") })
}

// benchNodeRTT measures one NODE_APPEND round trip of one record from gw
// to a streamlet that leader's manager opened on node to.
func benchNodeRTT(b *testing.B, leader, gw *Server, to string) {
	var g role.Grant
	for i := 0; g.Host != to; i++ {
		if i == 100 {
			b.Fatalf("no streamlet placed on %s in 100 channels", to)
		}
		var err error
		if g, err = leader.mgr.WriteGrant(fmt.Sprintf("rtt.%d", i), 0); err != nil {
			b.Fatal(err)
		}
	}
	run := wire.AppendRecord(nil, []byte("x"))
	done := make(chan error, 1)
	cc := startCost(leader)
	for b.Loop() {
		err := gw.clu().Append(g, 1, run, func(r wire.NodeAppended, err error) {
			if err == nil && r.Status != wire.NodeOK {
				err = fmt.Errorf("NODE_APPENDED status %d", r.Status)
			}
			done <- err
		})
		if err == nil {
			err = <-done
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	cc.report(b, b.N)
}

// costCounter counts what crosses between the nodes of one process's
// cluster while a sub-benchmark runs (benchhook's node frame counts), the
// entries the metadata log applied, and each new channel's latency by
// where its first streamlet went (the leader, the gateway, or the third
// node).
type costCounter struct {
	leader  *Server
	applied uint64
	names   []string
	lat     []time.Duration
}

func startCost(leader *Server) *costCounter {
	benchhook.CountNodeFrames(true)
	return &costCounter{leader: leader, applied: leader.state.Applied()}
}

// took records one operation's latency, and the new channel it created
// ("" for none).
func (cc *costCounter) took(channel string, d time.Duration) {
	cc.names, cc.lat = append(cc.names, channel), append(cc.lat, d)
}

// where returns the role of the node that hosts the channel's first
// streamlet: "leader", "gateway" (node b) or "third".
func (cc *costCounter) where(channel string) string {
	c, ok := cc.leader.state.Channel(channel)
	if !ok || len(c.List) == 0 {
		return "?"
	}
	switch c.List[0].Host {
	case cc.leader.opts.ServerName:
		return "leader"
	case "b":
		return "gateway"
	}
	return "third"
}

// report stops counting and reports per operation (n of them): node
// requests (node-req/op) and NODE_APPENDs (append/op) received by any
// node, entries the metadata log applied (log-entries/op), and, for new
// channels, the median latency by host role and the share of the third.
func (cc *costCounter) report(b *testing.B, n int) {
	frames, ops := benchhook.NodeFrameCounts()
	benchhook.CountNodeFrames(false)
	applied := cc.leader.state.Applied() - cc.applied
	var reqs int64
	var detail string
	for op, k := range ops {
		if k > 0 {
			reqs += k
			detail += fmt.Sprintf(" %s=%.2f", opName(op), float64(k)/float64(n))
		}
	}
	b.ReportMetric(float64(reqs)/float64(n), "node-req/op")
	b.ReportMetric(float64(frames[wire.TypeNodeAppend])/float64(n), "append/op")
	b.ReportMetric(float64(applied)/float64(n), "log-entries/op")
	if len(cc.lat) > 0 {
		all := slices.Sorted(slices.Values(cc.lat))
		b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "p50-ns")
	}
	lat := make(map[string][]time.Duration)
	for i, name := range cc.names {
		if name != "" { // a new channel
			w := cc.where(name)
			lat[w] = append(lat[w], cc.lat[i])
		}
	}
	for where, l := range lat {
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2].Nanoseconds()), "p50-"+where+"-ns")
		b.ReportMetric(float64(len(l))/float64(n), where+"-share")
	}
	b.Logf("n=%d node requests per op:%s; frames per op: %s", n, detail, frameDetail(frames, n))
}

func frameDetail(frames [256]int64, n int) string {
	var s string
	for t, k := range frames {
		if k > 0 {
			s += fmt.Sprintf(" %v=%.2f", wire.Type(t), float64(k)/float64(n))
		}
	}
	return s
}

// opName names a node op of this code's protocol (wire.NodeOp).
func opName(op int) string {
	names := map[wire.NodeOp]string{wire.OpWriteGrant: "WRITE_GRANT", wire.OpHost: "HOST", wire.OpSeal: "SEAL",
		wire.OpFree: "FREE", wire.OpList: "LIST", wire.OpStatus: "STATUS", wire.OpLen: "LEN", wire.OpExpire: "EXPIRE",
		wire.OpDedupIDs: "DEDUP_IDS", wire.OpCopy: "COPY", wire.OpDrain: "DRAIN", wire.OpFence: "FENCE",
		wire.OpSealAt: "SEAL_AT", wire.OpUnreachable: "UNREACHABLE", wire.OpCreate: "CREATE", wire.OpInterest: "INTEREST",
		wire.OpPresenceSync: "PRESENCE_SYNC"}
	if s, ok := names[wire.NodeOp(op)]; ok {
		return s
	}
	return fmt.Sprintf("op%d", op)
}
