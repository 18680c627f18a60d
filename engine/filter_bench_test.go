package engine

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkFilteredBesideUnfiltered measures an unfiltered subscriber's
// delivery rate with and without a filtered subscriber of the same
// channel in the same run: filter=none (the unfiltered one alone),
// filter=header (plus one whose filter reads a header) and filter=payload
// (plus one whose filter decodes the JSON payload). The messages are
// extended records (header type, a 128-byte JSON payload), one in three
// matching; the publisher writes them without acks in batches of 64. The
// unfiltered subscriber's delivered/s of the three should be within
// noise of each other (BENCHMARKS.md, "Filters"): delivered/s is
// measured to the moment the unfiltered subscriber has every message,
// whenever the filtered one finishes; filtered/s is the filtered
// subscriber's matches per second to its own end.
func BenchmarkFilteredBesideUnfiltered(b *testing.B) {
	for _, tc := range []struct{ name, expr string }{
		{"none", ""},
		{"header", `headers.type == "t"`},
		{"payload", `headers.type == "t" && payload.price > 100`},
	} {
		b.Run("filter="+tc.name, func(b *testing.B) {
			s := startTest(b, nil)
			const ch = "fbench"
			// Message i: type t when i%3 == 0 (and price 101), else q.
			bodies := make([][]byte, 3)
			for i := range bodies {
				typ, price := "q", 99
				if i == 0 {
					typ, price = "t", 101
				}
				payload := fmt.Sprintf(`{"sym":"EURUSD","price":%d,"qty":10,"side":"buy","venue":"XLON","pad":"%s"}`, price, "0123456789abcdef012345678901234567")
				bodies[i] = wire.AppendExt(nil, nil, []wire.HeaderField{{Key: "type", Value: typ}}, []byte(payload))
			}
			var ready, done, fdone sync.WaitGroup
			var got, fgot atomic.Int64
			ready.Add(1)
			done.Add(1)
			benchSubscriber(b, s.Addr(), ch, b.N+1, &ready, &done, &got)
			if tc.expr != "" {
				ready.Add(1)
				fdone.Add(1)
				filteredBenchSubscriber(b, s.Addr(), ch, tc.expr, uint64(b.N), &ready, &fdone, &fgot)
			}
			ready.Wait()
			pub, _ := helloFeat(b, s.Addr(), wire.FeatureHeaders)
			_ = pub.nc.SetDeadline(time.Time{})
			acked := make(chan struct{})
			go func() {
				for {
					h, _, err := pub.r.Next()
					if err != nil || h.Type == wire.TypePubAck {
						close(acked)
						return
					}
				}
			}()
			b.SetBytes(int64(len(bodies[1])))
			b.ResetTimer()
			start := time.Now()
			var buf []byte
			for i := 0; i < b.N; {
				buf = buf[:0]
				for k := 0; k < 64 && i < b.N; k++ {
					buf = appendPublishBody(buf, 0, 0, ch, bodies[i%3])
					i++
				}
				if _, err := pub.nc.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			// The last one matches, so the filtered subscriber sees the end.
			if _, err := pub.nc.Write(appendPublishBody(nil, 1, wire.FlagAck, ch, bodies[0])); err != nil {
				b.Fatal(err)
			}
			<-acked
			done.Wait()
			unfiltered := time.Since(start)
			fdone.Wait()
			b.StopTimer()
			b.ReportMetric(float64(got.Load())/unfiltered.Seconds(), "delivered/s")
			if tc.expr != "" {
				b.ReportMetric(float64(fgot.Load())/b.Elapsed().Seconds(), "filtered/s")
			}
		})
	}
}

// appendPublishBody appends a PUBLISH whose body after the channel is an
// extended record body.
func appendPublishBody(dst []byte, id uint32, flags wire.Flags, ch string, ext []byte) []byte {
	return wire.AppendPublish(dst, id, flags|wire.FlagExt, ch, ext)
}

// filteredBenchSubscriber subscribes with expr and counts FDATA entries
// until one at a position of at least the channel's position of message
// last (positions start at the SUBSCRIBED's next).
func filteredBenchSubscriber(b *testing.B, addr, ch, expr string, last uint64, ready, done *sync.WaitGroup, got *atomic.Int64) {
	c, _ := helloFeat(b, addr, filterFeatures)
	sb := c.subscribeFiltered(1, ch, wire.StartLive, 0, expr)
	end := sb.Next + last
	ready.Done()
	go func() {
		defer done.Done()
		for {
			_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			h, body, err := c.r.Next()
			if err != nil {
				b.Logf("filtered subscriber: %v", err)
				return
			}
			if h.Type != wire.TypeFData {
				continue
			}
			n, entries, err := wire.DecodeFData(body)
			if err != nil {
				b.Logf("filtered subscriber: %v", err)
				return
			}
			got.Add(int64(n))
			var pos uint64
			for p, _, _, rest, ok := wire.NextFEntry(entries); ok; p, _, _, rest, ok = wire.NextFEntry(rest) {
				pos, entries = p, rest
			}
			if pos >= end {
				return
			}
		}
	}()
}

// BenchmarkFilteredWireBytes measures what a filtered subscription costs
// on the wire against an unfiltered one when both negotiated S2: FDATA
// is never compressed (PROTOCOL.md 2.17), DATA is when the batch's record
// run is at least 512 bytes and S2 saves an eighth. Two raw subscribers
// of one channel, one unfiltered and one whose filter matches every
// message (payload.price > 0), read while b.N messages of the same 1 KiB
// JSON object are published one at a time with acks (publish=sync: live
// batches of one) or pipelined without waiting (publish=pipelined).
// Metrics: frame bytes (header and body) per message of each, and their
// ratio; B/op is not the point.
func BenchmarkFilteredWireBytes(b *testing.B) {
	for _, mode := range []string{"sync", "pipelined"} {
		b.Run("publish="+mode, func(b *testing.B) {
			s := startTest(b, nil)
			const ch = "fbytes"
			f := wire.FeatureS2 | wire.FeatureFilters | wire.FeatureHeaders
			plain, _ := helloFeat(b, s.Addr(), f)
			plain.subscribe(1, ch, wire.StartLive, 0)
			filt, _ := helloFeat(b, s.Addr(), f)
			next := filt.subscribeFiltered(1, ch, wire.StartLive, 0, `payload.price > 0`).Next
			last := next + uint64(b.N) - 1 // no one else publishes to ch
			type res struct {
				bytes int64
				err   error
			}
			dres, fres := make(chan res, 1), make(chan res, 1)
			go func() { n, err := wireBytesUntil(plain, last, s.maxBody); dres <- res{n, err} }()
			go func() { n, err := wireBytesUntil(filt, last, s.maxBody); fres <- res{n, err} }()
			if m := fixedJSON1K(7); len(m) != 1024 || !json.Valid(m) {
				b.Fatalf("fixedJSON1K: %d bytes, valid JSON %v", len(m), json.Valid(m))
			}
			pub, _ := helloFeat(b, s.Addr(), 0)
			b.ResetTimer()
			for i := range b.N {
				p := wire.AppendPublish(nil, 1, wire.FlagAck, ch, fixedJSON1K(i))
				if mode == "sync" {
					pub.publishFrame(p)
				} else if _, err := pub.nc.Write(p); err != nil {
					b.Fatal(err)
				}
			}
			d, fd := <-dres, <-fres
			b.StopTimer()
			if d.err != nil || fd.err != nil {
				b.Fatalf("unfiltered: %v; filtered: %v", d.err, fd.err)
			}
			b.ReportMetric(float64(d.bytes)/float64(b.N), "data-B/msg")
			b.ReportMetric(float64(fd.bytes)/float64(b.N), "fdata-B/msg")
			b.ReportMetric(float64(fd.bytes)/float64(d.bytes), "fdata/data")
		})
	}
}

// wireBytesUntil sums the frame bytes of c's DATA and FDATA frames until
// one reaches position last.
func wireBytesUntil(c *rawConn, last uint64, maxBody uint32) (int64, error) {
	var n int64
	for {
		h, body, err := c.tryNext(20 * time.Second)
		if err != nil {
			return n, err
		}
		var end uint64
		switch h.Type {
		case wire.TypeData:
			var first uint64
			var count uint32
			if h.Flags&wire.FlagCompressed != 0 {
				first, count, _, _, err = wire.DecodeDataS2(body, nil, maxBody)
			} else {
				first, count, _, err = wire.DecodeData(body)
			}
			end = first + uint64(count) - 1
		case wire.TypeFData:
			var entries []byte
			_, entries, err = wire.DecodeFData(body)
			for p, _, _, rest, ok := wire.NextFEntry(entries); ok; p, _, _, rest, ok = wire.NextFEntry(rest) {
				end = p
			}
		case wire.TypePubAck, wire.TypePing:
			continue
		default:
			return n, fmt.Errorf("unexpected %s", describe(h, body))
		}
		if err != nil {
			return n, err
		}
		n += int64(wire.HeaderLen + len(body))
		if end >= last {
			return n, nil
		}
	}
}

// fixedJSON1K is a JSON object of exactly 1,024 bytes (a price, then sensor
// readings as jsonLike writes them, then padding), varying with seed.
func fixedJSON1K(seed int) []byte {
	b := fmt.Appendf(nil, `{"type":"trade","price":%d,"readings":[`, 100+seed%50)
	for i := 0; ; i++ {
		e := fmt.Appendf(nil, `{"id":%d,"sensor":"probe-%d","ts":%d,"value":%d.%03d}`, (seed*7919+i*104729)%1000003, (seed+i)%37, 1764547200000+int64(seed*1000+i), (seed*31+i*17)%100, (seed+i*7)%1000)
		if len(b)+len(e)+12 > 1024 {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	b = append(b, `],"pad":"`...)
	for len(b) < 1022 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}
