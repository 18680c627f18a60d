package presence

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkMemberMemory measures the heap per member entry of a channel
// of 10,000 members (16-byte client ids, no info), local and remote: the
// basis of entryOverhead.
func BenchmarkMemberMemory(b *testing.B) {
	const n = 10000
	for _, where := range []string{"local", "remote"} {
		b.Run(where, func(b *testing.B) {
			var per float64
			for range b.N {
				r := New("a", 1, Limits{MaxMembers: n, MaxBytes: 1 << 40, EventsMax: 100}, func(int) {})
				r.Peers([]string{"a", "b"})
				var items []byte
				if where == "remote" {
					for i := range n {
						items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncJoin, Channel: []byte("room"),
							ClientID: []byte(fmt.Sprintf("user-%011d", i)), Conn: uint64(i)})
					}
				}
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("user-%011d", i)
				}
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				if where == "local" {
					for i := range n {
						_ = r.Join("room", uint64(i), ids[i], nil)
					}
				} else {
					body := wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: 1, Seq: 1, Flags: wire.SyncBegin | wire.SyncEnd, Count: n}, items)
					if _, err := r.Serve("b", body); err != nil {
						b.Fatal(err)
					}
					items, body = nil, nil
				}
				r.mu.Lock()
				for _, p := range r.peers {
					p.reset() // the pushes waiting for peer b are not the entries' cost
				}
				r.mu.Unlock()
				runtime.GC()
				runtime.ReadMemStats(&after)
				if got := r.Stats().Members; got != n {
					b.Fatalf("%d members", got)
				}
				per = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(r)
				runtime.KeepAlive(ids)
			}
			b.ReportMetric(per, "B/member")
		})
	}
}

// BenchmarkJoinLeave measures the CPU of a local join and leave (each
// recorded for the peers and delivered to the channel's event watchers on
// every sink) with 0, 2 and 4 peers and 1 and 8 sinks watching.
func BenchmarkJoinLeave(b *testing.B) {
	for _, peers := range []int{0, 2, 4} {
		for _, sinks := range []int{1, 8} {
			b.Run(fmt.Sprintf("peers=%d/sinks=%d", peers, sinks), func(b *testing.B) {
				r := New("a", sinks, Limits{MaxMembers: 1 << 20, MaxBytes: 1 << 40, EventsMax: 1 << 20}, func(int) {})
				alive := []string{"a"}
				for i := range peers {
					alive = append(alive, fmt.Sprint("p", i))
				}
				r.Peers(alive)
				for _, p := range alive[1:] {
					_ = r.NextPush(p) // the snapshot goes; changes are recorded from then on
					r.Done(p, wire.SyncApplied, 1, nil)
				}
				for s := range sinks {
					r.Watch("room", s, 1, 1)
				}
				var buf []Delivery
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					_ = r.Join("room", uint64(i), "user-00000000001", nil)
					r.Leave("room", uint64(i), "user-00000000001")
					if i%64 == 63 { // drain as the loops and senders would
						for s := range sinks {
							buf = r.Take(s, buf[:0])
						}
						for _, p := range alive[1:] {
							_ = r.NextPush(p)
							r.Done(p, wire.SyncApplied, 1, nil)
						}
					}
				}
			})
		}
	}
}

// BenchmarkApplyRemoteJoins measures a receiver's cost per remote join
// and leave: pushes of 256 joins then 256 leaves of one channel watched
// by 4 sinks.
func BenchmarkApplyRemoteJoins(b *testing.B) {
	r := New("a", 4, Limits{MaxMembers: 1 << 20, MaxBytes: 1 << 40, EventsMax: 1 << 20}, func(int) {})
	r.Peers([]string{"a", "b"})
	for s := range 4 {
		r.Watch("room", s, 1, 0)
	}
	if _, err := r.Serve("b", wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: 1, Seq: 1, Flags: wire.SyncBegin | wire.SyncEnd}, nil)); err != nil {
		b.Fatal(err)
	}
	const batch = 256
	var joins, leaves []byte
	for i := range batch {
		it := wire.SyncItem{Kind: wire.SyncJoin, Channel: []byte("room"), ClientID: []byte("user-00000000001"), Conn: uint64(i)}
		joins = wire.AppendSyncItem(joins, &it)
		it.Kind = wire.SyncLeave
		leaves = wire.AppendSyncItem(leaves, &it)
	}
	seq := uint64(1)
	var buf []Delivery
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		for _, items := range [][]byte{joins, leaves} {
			seq++
			body := wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: 1, Seq: seq, Count: batch}, items)
			if _, err := r.Serve("b", body); err != nil {
				b.Fatal(err)
			}
		}
		for s := range 4 {
			buf = r.Take(s, buf[:0])
		}
	}
}

// BenchmarkChannelMemory measures the heap per channel of the counts a
// node keeps for every channel with a subscriber on some node: 10,000
// channels with a subscription here ("local"), or pushed by one other node
// ("remote").
func BenchmarkChannelMemory(b *testing.B) {
	const n = 10000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("channel.%06d", i)
	}
	for _, where := range []string{"local", "remote"} {
		b.Run(where, func(b *testing.B) {
			var per float64
			for range b.N {
				r := New("a", 1, Limits{MaxMembers: n, MaxBytes: 1 << 40, EventsMax: 100}, func(int) {})
				r.Peers([]string{"a", "b"})
				var body []byte
				if where == "remote" {
					var items []byte
					for _, ch := range names {
						items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncCounts, Channel: []byte(ch), Counts: wire.Occupancy{Subscribers: 1}})
					}
					body = wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: 1, Seq: 1, Flags: wire.SyncBegin | wire.SyncEnd, Count: n}, items)
				}
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				if where == "local" {
					for _, ch := range names {
						r.Count(ch, 1, 0)
					}
				} else if _, err := r.Serve("b", body); err != nil {
					b.Fatal(err)
				}
				body = nil
				r.mu.Lock()
				for _, p := range r.peers {
					p.reset()
				}
				r.mu.Unlock()
				runtime.GC()
				runtime.ReadMemStats(&after)
				if got := r.Stats().Channels; got != n {
					b.Fatalf("%d channels", got)
				}
				per = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(r)
			}
			b.ReportMetric(per, "B/channel")
		})
	}
}
