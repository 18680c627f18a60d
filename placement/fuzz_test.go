package placement

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// byteReader hands out fuzzer bytes; past the end it returns zeros.
type byteReader struct{ b []byte }

func (r *byteReader) u8() uint8 {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *byteReader) u16() uint16 { return uint16(r.u8())<<8 | uint16(r.u8()) }

func (r *byteReader) u64() uint64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = r.u8()
	}
	return binary.BigEndian.Uint64(buf[:])
}

// fuzzInput turns bytes into a membership, options, a channel and its load.
func fuzzInput(data []byte) ([]Node, Options, string, uint64, ChannelLoad, int) {
	r := &byteReader{b: data}
	n := int(r.u8() % 65)
	o := Options{
		Epsilon:       float64(r.u8()%200+1) / 100,
		PointsPerUnit: int(r.u8()%64) + 1,
		MaxProbes:     int(r.u8()%32) + 1,
	}
	o.Choices = int(o.MaxProbes%MaxChoices) + 1
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{
			ID:       NodeID(fmt.Sprintf("n%d", r.u8())), // duplicates are possible and must be rejected
			Capacity: float64(r.u8()%16+1) / 4,
			State:    State(r.u8() % 3),
			Load: NodeLoad{
				Streamlets:    int(r.u16()),
				MsgsInPerSec:  float64(r.u16()) * 10,
				MsgsOutPerSec: float64(r.u16()) * 10,
				BytesInPerSec: float64(r.u16()) * 1000,
				Conns:         int(r.u8()),
				CPU:           float64(r.u8()) / 255,
				Mem:           float64(r.u8()) / 255,
			},
		}
	}
	seq := r.u64()
	cl := ChannelLoad{MsgsPerSec: float64(r.u16()) * 4, BytesPerSec: float64(r.u16()) * 256, Subscribers: int(r.u8())}
	steps := int(r.u8() % 32)
	return nodes, o, string(r.b), seq, cl, steps
}

// FuzzHost: any membership, loads and channel give, for every choice, a live
// non-draining node within the load bound (or an honest overflow), and the
// same decision from the same snapshot built from the nodes in another order.
func FuzzHost(f *testing.F) {
	f.Add([]byte{3, 25, 10, 8, 1, 4, 0, 0, 1, 0, 2, 0, 3, 0, 0, 5, 50, 50, 2, 8, 1, 0, 9, 0, 8, 0, 7, 0, 6, 9, 8, 8, 3, 12, 0, 1})
	f.Add([]byte{1, 1, 1, 1, 7, 4, 2})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, o, ch, seq, cl, steps := fuzzInput(data)
		s, err := NewSnapshot(nodes, o)
		if err != nil {
			return // duplicate IDs
		}
		rev := make([]Node, len(nodes))
		for i := range nodes {
			rev[len(nodes)-1-i] = nodes[i]
		}
		s2, err := NewSnapshot(rev, o)
		if err != nil {
			t.Fatalf("reordered nodes rejected: %v", err)
		}
		_, capTotal := freshTotals(s)
		m, mok := s.Manager(ch)
		if m2, _ := s2.Manager(ch); m2 != m {
			t.Fatalf("Manager depends on node order: %q vs %q", m, m2)
		}
		if mok != (capTotal > 0) {
			t.Fatalf("Manager ok=%v with alive capacity %v", mok, capTotal)
		}
		if mok {
			i, _ := s.Index(m)
			if n, _ := s.Node(i); n.State != Alive {
				t.Fatalf("manager %q is %v", m, n.State)
			}
		}
		for k := 0; k <= steps; k++ {
			d, ok := s.Place(ch, seq+uint64(k), cl)
			d2, _ := s2.Place(ch, seq+uint64(k), cl)
			if d != d2 {
				t.Fatalf("Host depends on node order: %+v vs %+v", d, d2)
			}
			if ok != (capTotal > 0) {
				t.Fatalf("Host ok=%v with alive capacity %v", ok, capTotal)
			}
			if ok {
				checkDecision(t, s, d)
			}
		}
	})
}
