package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// startCluster2 starts nodes a and b, each with mutate, and waits until
// both see both.
func startCluster2(t testing.TB, mutate func(*Options)) (a, b *Server) {
	t.Helper()
	a = startNode(t, "a", nil, mutate)
	b = startNode(t, "b", []string{a.clu().GossipAddr()}, mutate)
	eventually(t, waitFor, "two members everywhere", func() bool { return a.clu().Alive() == 2 && b.clu().Alive() == 2 })
	return a, b
}

// nodeBytes sums what both nodes sent as NODE_APPEND and NODE_FEED, as
// sent and as it would have been uncompressed.
func nodeBytes(nodes ...*Server) (sent, raw uint64) {
	for _, n := range nodes {
		st := n.clu().Stats()
		sent += st.AppendSent + st.FeedSent
		raw += st.AppendRaw + st.FeedRaw
	}
	return sent, raw
}

// TestClusterNodeLinksCompressed: JSON-like batches cross the node link
// S2-compressed (whichever of NODE_APPEND or NODE_FEED carries them) and
// arrive intact, extended records included; without ClusterOptions.S2 they cross as they
// are.
func TestClusterNodeLinksCompressed(t *testing.T) {
	for _, noS2 := range []bool{false, true} {
		a, b := startCluster2(t, func(o *Options) { o.LimitMsgs = 1000; o.LimitLife = time.Minute; o.Cluster.S2 = !noS2 })
		sub, _ := helloFeat(t, b.Addr(), wire.FeatureHeaders)
		sub.subscribe(1, "nl", wire.StartLive, 0)
		pub, _ := helloFeat(t, a.Addr(), wire.FeatureHeaders)
		const n = 60
		var frames []byte
		want := make([]string, n)
		for i := range n {
			want[i] = string(jsonLike(1024, i))
			if i == n-1 {
				frames = wire.AppendPublishExt(frames, uint32(i+1), wire.FlagAck, "nl", []byte("last"), tHdrs, []byte(want[i]))
			} else {
				frames = wire.AppendPublish(frames, uint32(i+1), wire.FlagAck, "nl", []byte(want[i]))
			}
		}
		pub.write(frames)
		got, _ := sub.records(n)
		for i, r := range got {
			if r.payload != want[i] {
				t.Fatalf("noS2=%v: record %d differs", noS2, i)
			}
		}
		if last := got[n-1]; last.id != "last" || len(last.headers) != 2 {
			t.Fatalf("noS2=%v: the extended record lost its id or headers: %+v", noS2, last.id)
		}
		sent, raw := nodeBytes(a, b)
		t.Logf("noS2=%v: node links carried %d bytes for %d uncompressed", noS2, sent, raw)
		switch {
		case raw < n*1024:
			t.Fatalf("noS2=%v: only %d bytes crossed", noS2, raw)
		case noS2 && sent != raw:
			t.Fatalf("compression off, yet %d bytes sent for %d", sent, raw)
		case !noS2 && sent > raw*3/4:
			t.Fatalf("compression on, yet %d bytes sent for %d", sent, raw)
		}
	}
}

// BenchmarkCrossNode publishes JSON-like 1 KiB messages through node a to
// a subscriber on node b (so every message crosses the node link once, as
// a NODE_APPEND or a NODE_FEED), with node-link S2 on and off in the same
// run; the SDKs do not compress (WithCompression(0)), so only the node
// link differs. It reports messages per second end to end and the node
// link bytes per message.
func BenchmarkCrossNode(b *testing.B) {
	payloads := make([][]byte, 256)
	for i := range payloads {
		payloads[i] = jsonLike(1024, i)
	}
	for _, mode := range []struct {
		name string
		noS2 bool
	}{{"s2", false}, {"none", true}} {
		b.Run(mode.name, func(b *testing.B) {
			na, nb := startCluster2(b, func(o *Options) {
				o.Logger = nil
				o.LimitMsgs = 5000
				o.LimitLife = 4 * time.Second
				o.Cluster.S2 = !mode.noS2
			})
			ctx := context.Background()
			subc, err := client.Dial(ctx, nb.Addr(), client.WithCompression(0))
			if err != nil {
				b.Fatal(err)
			}
			defer subc.Close()
			got := make(chan struct{}, 1)
			var n, want int
			var wantSet = make(chan int, 1)
			sub, err := subc.SubscribeFunc(ctx, "xnode", func(ev client.Event) {
				if ev.Kind == client.KindMessage {
					n++
				}
				select {
				case w := <-wantSet:
					want = w
				default:
				}
				if want > 0 && n >= want {
					select {
					case got <- struct{}{}:
					default:
					}
				}
			}, client.WithBuffer(1<<16))
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe(ctx)
			pubc, err := client.Dial(ctx, na.Addr(), client.WithCompression(0), client.WithMaxPending(1024))
			if err != nil {
				b.Fatal(err)
			}
			defer pubc.Close()
			sent0, raw0 := nodeBytes(na, nb)
			b.SetBytes(1024)
			b.ReportAllocs()
			start := time.Now()
			i := 0
			for b.Loop() {
				a, err := pubc.PublishAsync(ctx, "xnode", payloads[i%len(payloads)])
				if err != nil {
					b.Fatal(err)
				}
				a.Release()
				i++
			}
			if _, err := pubc.Publish(ctx, "xnode", payloads[0]); err != nil {
				b.Fatal(err)
			}
			wantSet <- i + 1
			// Wake the callback in case everything arrived already.
			if _, err := pubc.Publish(ctx, "xnode", payloads[0]); err != nil {
				b.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(time.Minute):
				b.Fatalf("the subscriber got %d of %d", n, i+1)
			}
			el := time.Since(start)
			sent, raw := nodeBytes(na, nb)
			b.ReportMetric(float64(i)/el.Seconds(), "msgs/s")
			b.ReportMetric(float64(sent-sent0)/float64(i+2), "link-B/msg")
			b.ReportMetric(float64(raw-raw0)/float64(i+2), "raw-B/msg")
		})
	}
}
