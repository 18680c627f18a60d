package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// jsonish is a JSON-like payload of n bytes: an array of sensor readings
// with repeating keys and varying (pseudo-random, seeded) values, as
// telemetry or chat events look.
func jsonish(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
	b := []byte(`[`)
	for len(b) < n {
		b = fmt.Appendf(b, `{"id":%d,"sensor":"%s-%d","ts":%d,"value":%.3f,"ok":%t},`,
			r.IntN(1_000_000), words[r.IntN(len(words))], r.IntN(100), 1764547200000+r.Int64N(1_000_000), r.Float64()*100, r.IntN(2) == 0)
	}
	return b[:n]
}

func TestS2Golden(t *testing.T) {
	run := wire.AppendRecord(nil, []byte(`{"id":1,"name":"abcabcabcabcabcabcabc"}`))
	blk := wire.AppendS2(nil, run)
	frame := append(wire.AppendDataS2Header(nil, 7, 1001, 1, len(blk)), blk...)
	golden := readHex(t, filepath.Join("testdata", "s2", "data_s2.hex"))
	if !bytes.Equal(frame, golden) {
		t.Fatalf("encoded\n% x\ngolden\n% x", frame, golden)
	}
	h, body, _, err := wire.Split(golden, testMaxBody)
	if err != nil || h.Flags != wire.FlagCompressed {
		t.Fatal(err)
	}
	first, count, recs, _, err := wire.DecodeDataS2(body, nil, testMaxBody)
	if err != nil || first != 1001 || count != 1 || !bytes.Equal(recs, run) {
		t.Fatalf("DecodeDataS2: %d %d % x %v", first, count, recs, err)
	}
}

func TestS2RoundTrip(t *testing.T) {
	var run []byte
	for i := range 50 {
		run = wire.AppendRecord(run, jsonish(1024, uint64(i)))
	}
	blk := wire.AppendS2(nil, run)
	if len(blk) >= len(run)*3/4 {
		t.Fatalf("JSON-like run of %d bytes compressed to %d", len(run), len(blk))
	}
	body := append(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 1), 50), blk...)
	scratch := make([]byte, 0, 64)
	_, count, recs, buf, err := wire.DecodeDataS2(body, scratch, wire.MaxBodyFor(1<<20))
	if err != nil || count != 50 || !bytes.Equal(recs, run) {
		t.Fatalf("DecodeDataS2: %d %v", count, err)
	}
	// The buffer is reused when big enough.
	_, _, _, buf2, err := wire.DecodeDataS2(body, buf, wire.MaxBodyFor(1<<20))
	if err != nil || &buf2[0] != &buf[0] {
		t.Fatal("buffer not reused")
	}
	// PUBLISH: the bytes after the channel are compressed.
	payload := jsonish(4000, 1)
	f, _ := wire.AppendPublishS2(nil, 3, wire.FlagAck, "ch", payload, nil)
	h, pbody, _, err := wire.Split(f, testMaxBody)
	if err != nil || h.Flags != wire.FlagAck|wire.FlagCompressed || len(f) > 2000 {
		t.Fatalf("PUBLISH %v flags %v len %d", err, h.Flags, len(f))
	}
	pl, err := wire.PublishPrefixLen(pbody)
	if err != nil || pl != 3 {
		t.Fatal(err)
	}
	plain, err := wire.Inflate(nil, pbody, pl, uint32(pl+4000), wire.TypePublish)
	if err != nil {
		t.Fatal(err)
	}
	ch, p, err := wire.DecodePublish(plain)
	if err != nil || string(ch) != "ch" || !bytes.Equal(p, payload) {
		t.Fatalf("inflated PUBLISH %q %v", ch, err)
	}
	if _, err := wire.Inflate(nil, pbody, pl, uint32(pl+3999), wire.TypePublish); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("payload over the limit: %v", err)
	}
}

// bomb is a DATA body whose S2 block claims decoded bytes it does not have.
func bomb(claim uint64, tail []byte) []byte {
	b := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 1), 1)
	b = binary.AppendUvarint(b, claim)
	return append(b, tail...)
}

// TestS2Bombs: blocks that lie about their size, or are corrupt, are
// malformed, and a lie over the limit is caught before any allocation.
func TestS2Bombs(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"claims 4 GiB", bomb(1<<32-1, []byte{0x00}), "claims 4294967295 bytes"},
		{"claims limit+1", bomb(limit-wire.DataPrefixLen+1, nil), "the limit is"},
		{"claims more than it holds", bomb(100, []byte{0x0c, 'a', 'b', 'c', 'd'}), "compressed block"},
		{"claims less than it holds", bomb(2, []byte{0x0c, 'a', 'b', 'c', 'd'}), "compressed block"},
		{"varint too long", append(bomb(0, nil)[:12], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), "compressed block"},
		{"empty block", bomb(0, nil)[:12], "compressed block"},
		{"no prefix", []byte{1, 2, 3}, "prefix"},
		{"valid block, bad run", append(bomb(0, nil)[:12], wire.AppendS2(nil, []byte{0, 0, 0, 9})...), "overruns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, _, err := wire.DecodeDataS2(tc.body, nil, limit)
			if !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want malformed with %q", err, tc.want)
			}
		})
	}
	// The 4 GiB claim allocates only its error, not the claimed bytes.
	b := bomb(1<<32-1, []byte{0x00})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100 {
		_, _ = wire.Inflate(nil, b, wire.DataPrefixLen, limit, wire.TypeData)
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 100*1024 {
		t.Fatalf("100 bombs allocated %d bytes", d)
	}
}

// FuzzS2 gives arbitrary bytes to the compressed DATA decoder (they are
// mostly bombs and corrupt blocks) and compresses them as a run: decoding
// never panics, never returns more than the limit, and a compressed valid
// body decodes to itself.
func FuzzS2(f *testing.F) {
	f.Add(bomb(1<<32-1, []byte{0}))
	f.Add(bomb(100, []byte{0x0c, 'a', 'b', 'c', 'd'}))
	f.Add(append(bomb(0, nil)[:12], wire.AppendS2(nil, wire.AppendRecord(nil, jsonish(300, 1)))...))
	f.Add(append(bomb(0, nil)[:12], wire.AppendS2(nil, wire.AppendRecordExt(nil, wire.AppendExt(nil, []byte("id"), nil, []byte("p")), true))...))
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 64 << 10
		first, count, recs, buf, err := wire.DecodeDataS2(body, nil, limit)
		if len(buf) > limit {
			t.Fatalf("decoded %d bytes, limit %d", len(buf), limit)
		}
		if err == nil {
			// What decoded is a valid uncompressed DATA body.
			if _, _, _, err := wire.DecodeData(buf); err != nil || count == 0 || len(recs) != len(buf)-wire.DataPrefixLen {
				t.Fatalf("accepted an invalid body: %v", err)
			}
			_ = first
		} else if !errors.Is(err, wire.ErrMalformed) {
			t.Fatalf("error %v is not ErrMalformed", err)
		}
		if len(body) < wire.DataPrefixLen {
			return
		}
		// Compress body's tail as a run: it inflates back exactly.
		c := append(append([]byte(nil), body[:wire.DataPrefixLen]...), wire.AppendS2(nil, body[wire.DataPrefixLen:])...)
		got, err := wire.Inflate(nil, c, wire.DataPrefixLen, uint32(len(body)), wire.TypeData)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func BenchmarkS2(b *testing.B) {
	var run []byte
	for i := range 64 {
		run = wire.AppendRecord(run, jsonish(1024, uint64(i)))
	}
	blk := wire.AppendS2(nil, run)
	b.Run("encode-64KiB-json", func(b *testing.B) {
		b.SetBytes(int64(len(run)))
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			dst = wire.AppendS2(dst[:0], run)
		}
		b.ReportMetric(float64(len(blk))/float64(len(run)), "ratio")
	})
	b.Run("decode-64KiB-json", func(b *testing.B) {
		b.SetBytes(int64(len(run)))
		b.ReportAllocs()
		dst := make([]byte, 0, len(run))
		for b.Loop() {
			dst, _ = wire.DecodeS2(dst, blk, len(run), wire.TypeData)
		}
	})
}

// TestS2NodeFrames: compressed NODE_APPEND and NODE_FEED inflate to the
// uncompressed frames, and their bombs are malformed.
func TestS2NodeFrames(t *testing.T) {
	var run []byte
	for i := range 8 {
		run = wire.AppendRecord(run, jsonish(1024, uint64(i)))
	}
	run = wire.AppendRecordExt(run, wire.AppendExt(nil, []byte("id"), nil, jsonish(600, 9)), true)
	a := wire.NodeAppend{Streamlet: 5, Epoch: 6, Count: 9}
	blk, ok, _ := wire.AppendCompressedRun(nil, [][]byte{run[:100], run[100:]}, len(run), 512, nil)
	if !ok || len(blk) >= len(run) {
		t.Fatalf("compressed %v %d of %d", ok, len(blk), len(run))
	}
	f := append(wire.AppendNodeAppendS2Header(nil, 3, a, len(blk)), blk...)
	h, body, _, err := wire.Split(f, 1<<22)
	if err != nil || h.Flags != wire.FlagCompressed || h.Type != wire.TypeNodeAppend {
		t.Fatalf("%v %+v", err, h)
	}
	plain, err := wire.Inflate(nil, body, wire.NodeAppendPrefixLen, 1<<22, wire.TypeNodeAppend)
	if err != nil {
		t.Fatal(err)
	}
	got, grun, err := wire.DecodeNodeAppend(plain)
	if err != nil || got != a || !bytes.Equal(grun, run) {
		t.Fatalf("NODE_APPEND %+v %v", got, err)
	}
	stamps := make([]int64, 9)
	for i := range stamps {
		stamps[i] = int64(1000 + i)
	}
	nf := wire.NodeFeed{Streamlet: 7, Start: 10, Count: 9}
	ff := append(wire.AppendNodeFeedS2Header(nil, nf, stamps, len(blk)), blk...)
	h, body, _, err = wire.Split(ff, 1<<22)
	if err != nil || h.Flags != wire.FlagCompressed {
		t.Fatal(err)
	}
	pre, err := wire.NodeFeedPrefix(body)
	if err != nil || pre != wire.NodeFeedPrefixLen+8*9 {
		t.Fatalf("prefix %d %v", pre, err)
	}
	plain, err = wire.Inflate(nil, body, pre, 1<<22, wire.TypeNodeFeed)
	if err != nil {
		t.Fatal(err)
	}
	gf, gst, grun, err := wire.DecodeNodeFeed(plain)
	if err != nil || gf.Streamlet != 7 || gf.Count != 9 || wire.FeedStamp(gst, 8) != 1008 || !bytes.Equal(grun, run) {
		t.Fatalf("NODE_FEED %+v %v", gf, err)
	}
	// Not paying: incompressible or small runs are left alone.
	if _, ok, _ := wire.AppendCompressedRun(nil, [][]byte{run[:100]}, 100, 512, nil); ok {
		t.Fatal("a 100-byte run compressed")
	}
	// Bombs.
	huge := binary.AppendUvarint(nil, 1<<31)
	if _, err := wire.Inflate(nil, append(make([]byte, wire.NodeAppendPrefixLen), huge...), wire.NodeAppendPrefixLen, 1<<22, wire.TypeNodeAppend); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("NODE_APPEND bomb: %v", err)
	}
	fb := make([]byte, wire.NodeFeedPrefixLen)
	binary.BigEndian.PutUint32(fb[13:], 1<<30) // stamps that cannot fit
	if _, err := wire.NodeFeedPrefix(fb); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("NODE_FEED stamps bomb: %v", err)
	}
	if _, err := wire.NodeFeedPrefix(fb[:5]); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("short NODE_FEED: %v", err)
	}
}
