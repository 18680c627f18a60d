package host

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkAppendBatchExt: the host's side of a publish of 128 bytes,
// appended in batches of 64 (as a gateway's run): plain records against
// extended ones with a W3C traceparent and a content type, with a 16-byte
// message id (each new, so every record is looked up and inserted in the
// channel's dedup window of 100,000 ids), and with both. The streamlet is
// replaced when full, as rollover does. Same run, so the ratios hold.
func BenchmarkAppendBatchExt(b *testing.B) {
	payload := make([]byte, 128)
	hs := []wire.HeaderField{
		{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{Key: "content-type", Value: "application/json"},
	}
	const batch = 64
	for _, mode := range []struct {
		name    string
		headers bool
		id      bool
	}{{"plain", false, false}, {"headers", true, false}, {"msgid", false, true}, {"headers+msgid", true, true}} {
		b.Run(mode.name, func(b *testing.B) {
			h := New("h", time.Now)
			first := uint64(1)
			next := func() *Streamlet {
				g := role.Grant{Channel: "c", Epoch: 1, Streamlet: h.NewID(), First: first, LimitMsgs: 5000,
					LimitSize: 2 << 20, LeaseEnd: 1 << 62}
				if err := h.HostStreamlet(g); err != nil {
					b.Fatal(err)
				}
				return h.Streamlet(g.Streamlet)
			}
			s := next()
			// 2,048 batches prepared beforehand (131,072 records): more ids
			// than the window keeps (100,000), so each is new when it
			// comes round again.
			const batches = 2048
			all := make([][][]byte, batches)
			ext := make([]bool, batch)
			pos := make([]uint64, batch)
			id := make([]byte, 16)
			copy(id, "bench-id-")
			n := uint64(0)
			for j := range all {
				all[j] = make([][]byte, batch)
				for k := range all[j] {
					if !mode.headers && !mode.id {
						all[j][k] = payload
						continue
					}
					var mid []byte
					if mode.id {
						binary.BigEndian.PutUint64(id[8:], n)
						mid = id
					}
					var hh []wire.HeaderField
					if mode.headers {
						hh = hs
					}
					all[j][k] = wire.AppendExt(nil, mid, hh, payload)
					ext[k] = true
					n++
				}
			}
			b.SetBytes(int64(len(payload)) * batch)
			b.ReportAllocs()
			j := 0
			var kept []uint64
			for b.Loop() {
				recs := all[j%batches]
				j++
				now := time.Now().UnixNano()
				for done := 0; done < batch; {
					k := s.AppendBatchExt(recs[done:], ext[done:], pos[done:], nil, now)
					if done += k; done < batch {
						// Rollover; the oldest of four retained streamlets
						// is freed (freeing the last one would drop the
						// channel's window with it).
						first = s.First() + uint64(s.Buf().Len())
						if kept = append(kept, s.ID()); len(kept) > 4 {
							h.Free(kept[0])
							kept = kept[1:]
						}
						s = next()
					}
				}
			}
		})
	}
}
