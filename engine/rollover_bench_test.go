package engine

import (
	"fmt"
	"testing"
)

// BenchmarkClusterRollover measures, in one run on a three-node cluster
// over loopback, what the metadata log's coordination costs:
//   - rollover: a streamlet rollover at the leader's manager (WriteGrant
//     after the open streamlet: seal it at its host, commit the OPEN to
//     the log while the next is hosted);
//   - grant-new-channel: a non-leader gateway's first write grant of a new
//     channel (a request to the leader, which commits the OPEN and hosts
//     the streamlet in parallel);
//   - first-publish: a client's first acknowledged publish to a new
//     channel through a non-leader node (the grant, then the APPEND to the
//     host): at most three round trips between nodes.
func BenchmarkClusterRollover(b *testing.B) {
	nodes := startCluster3(b, func(o *Options) { o.Logger = nil })
	a, gw := nodes[0], nodes[1]
	ch := channelManagedBy(b, a, "a", "rollover")
	g, err := a.mgr.WriteGrant(ch, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rollover", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if g, err = a.mgr.WriteGrant(ch, g.Streamlet); err != nil {
				b.Fatal(err)
			}
		}
	})
	n := 0
	b.Run("grant-new-channel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n++
			if _, err := gw.clu().WriteGrant(fmt.Sprintf("fresh.g.%d", n), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	pub, _ := helloRaw(b, gw.Addr())
	b.Run("first-publish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n++
			if _, err := pub.publishBatch(fmt.Sprintf("fresh.p.%d", n), [][]byte{[]byte("x")}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
