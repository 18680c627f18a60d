package placement

import (
	"fmt"
	"testing"
)

// benchSnapshot builds n nodes of mixed capacity with some load on each.
func benchSnapshot(b *testing.B, n int) (*Snapshot, []string) {
	nodes := make([]Node, n)
	caps := []float64{1, 2, 4}
	for i := range nodes {
		nodes[i] = Node{ID: NodeID(fmt.Sprintf("node-%04d", i)), Capacity: caps[i%3], State: Alive,
			Load: NodeLoad{Streamlets: 100 + i%50, MsgsInPerSec: float64(1000 * (1 + i%7))}}
	}
	s, err := NewSnapshot(nodes, Options{})
	if err != nil {
		b.Fatal(err)
	}
	chans := make([]string, 1024)
	for i := range chans {
		chans[i] = fmt.Sprintf("channel-%d", i)
	}
	return s, chans
}

func BenchmarkHost(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s, chans := benchSnapshot(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Host(chans[i&1023], uint64(i), ChannelLoad{MsgsPerSec: 100, Subscribers: 3})
				i++
			}
		})
	}
}

// BenchmarkHostManyChannels spreads decisions over 100,000 channel names, so
// names and ring points come from memory rather than cache, as in a cluster.
func BenchmarkHostManyChannels(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s, _ := benchSnapshot(b, n)
			chans := make([]string, 100000)
			for i := range chans {
				chans[i] = fmt.Sprintf("channel-%d", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Host(chans[(i*7919)%len(chans)], uint64(i), ChannelLoad{MsgsPerSec: 100, Subscribers: 3})
				i++
			}
		})
	}
}

// BenchmarkPlace includes the commit, so loads keep changing as in a cluster.
func BenchmarkPlace(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s, chans := benchSnapshot(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Place(chans[i&1023], uint64(i), ChannelLoad{MsgsPerSec: 100, Subscribers: 3})
				i++
			}
		})
	}
}

func BenchmarkManager(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			s, chans := benchSnapshot(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Manager(chans[i&1023])
				i++
			}
		})
	}
}

func BenchmarkNewSnapshot(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := make([]Node, n)
			for i := range nodes {
				nodes[i] = Node{ID: NodeID(fmt.Sprintf("node-%04d", i)), Capacity: float64(1 + i%3), State: Alive}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewSnapshot(nodes, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
