package engine

import (
	"testing"
)

// BenchmarkClusterRollover measures, in one run on a three-node cluster
// over loopback, what a streamlet rollover costs its channel's manager
// (WriteGrant after the open streamlet: seal it, confirm the role, record
// the successor, host the next) and what the confirmation alone costs
// (MANAGER to the two other nodes in parallel), so the share of the
// confirmation in a rollover is their ratio.
func BenchmarkClusterRollover(b *testing.B) {
	nodes := startCluster3(b, func(o *Options) { o.Logger = nil })
	a := nodes[0]
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
	b.Run("confirm", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, other := a.clu().Confirm(ch); !ok {
				b.Fatalf("not confirmed (the others name %q)", other)
			}
		}
	})
}
