package wire_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// fdataGolden are the entries of testdata/filter/fdata.hex.
func fdataGolden() []wire.FRecord {
	ext := wire.AppendExt(nil, nil, []wire.HeaderField{{Key: "type", Value: "t"}}, []byte(`{"price":101}`))
	return []wire.FRecord{{Pos: 1002, Body: []byte("p1")}, {Pos: 1005, Body: ext, Ext: true}}
}

// TestGoldenFilter checks SUBSCRIBE with FlagFilter and FDATA against
// their annotated vectors (testdata/filter/) in both directions.
func TestGoldenFilter(t *testing.T) {
	sub := wire.Subscribe{SubID: 7, Start: wire.StartLive, Channel: []byte("trades")}
	const filter = "headers.type=='t'&&payload.price>100"
	for name, frame := range map[string][]byte{
		"subscribe_filter": wire.AppendSubscribeFilter(nil, 3, sub, filter),
		"fdata":            wire.AppendFData(nil, 7, fdataGolden()),
	} {
		golden := readHex(t, filepath.Join("testdata", "filter", name+".hex"))
		if !bytes.Equal(frame, golden) {
			t.Fatalf("%s: encoded\n% x\ngolden\n% x", name, frame, golden)
		}
		h, body, _, err := wire.Split(golden, testMaxBody)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Type {
		case wire.TypeSubscribe:
			s, f, err := wire.DecodeSubscribeFilter(body)
			if err != nil || h.Flags != wire.FlagFilter || string(f) != filter || !reflect.DeepEqual(s, sub) {
				t.Fatalf("SUBSCRIBE: %+v %q %v", s, f, err)
			}
			if _, err := wire.DecodeSubscribe(body); err == nil {
				t.Fatal("a plain SUBSCRIBE decoder accepted the filtered body")
			}
		case wire.TypeFData:
			if got := decodeFData(t, body); !reflect.DeepEqual(got, fdataGolden()) {
				t.Fatalf("FDATA: %+v", got)
			}
		}
	}
}

func decodeFData(t testing.TB, body []byte) []wire.FRecord {
	t.Helper()
	n, entries, err := wire.DecodeFData(body)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.FRecord
	for pos, b, ext, rest, ok := wire.NextFEntry(entries); ok; pos, b, ext, rest, ok = wire.NextFEntry(rest) {
		out = append(out, wire.FRecord{Pos: pos, Body: b, Ext: ext})
	}
	if len(out) != int(n) {
		t.Fatalf("%d entries iterated, count %d", len(out), n)
	}
	return out
}

// TestFilterFramesMalformed: every way the two bodies can be wrong.
func TestFilterFramesMalformed(t *testing.T) {
	sub := wire.AppendSubscribe(nil, 1, wire.Subscribe{SubID: 1, Channel: []byte("c")})[wire.HeaderLen:]
	entry := func(pos uint64, body string) []byte { return wire.AppendFEntry(nil, pos, []byte(body), false) }
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"SUBSCRIBE/no filterLen", "filterLen", errOf3(wire.DecodeSubscribeFilter(sub))},
		{"SUBSCRIBE/empty filter", "empty filter", errOf3(wire.DecodeSubscribeFilter(cat(sub, u16(0))))},
		{"SUBSCRIBE/short filter", "filter at offset", errOf3(wire.DecodeSubscribeFilter(cat(sub, u16(4), []byte("ab"))))},
		{"SUBSCRIBE/trailing", "1 trailing", errOf3(wire.DecodeSubscribeFilter(cat(sub, u16(1), []byte("ab"))))},
		{"SUBSCRIBE/bad start", "start kind 9", errOf3(wire.DecodeSubscribeFilter(cat(sub[:4], u8(9), sub[5:], u16(1), []byte("a"))))},
		{"SUBSCRIBE/short", "subID", errOf3(wire.DecodeSubscribeFilter(u8(1)))},
		{"FDATA/empty", "count", errOf3(wire.DecodeFData(nil))},
		{"FDATA/count 0", "entry count 0", errOf3(wire.DecodeFData(u32(0)))},
		{"FDATA/count too big", "cannot fit", errOf3(wire.DecodeFData(cat(u32(2), entry(1, ""))))},
		{"FDATA/position 0", "position 0 after 0", errOf3(wire.DecodeFData(cat(u32(1), entry(0, "x"))))},
		{"FDATA/not increasing", "position 5 after 5", errOf3(wire.DecodeFData(cat(u32(2), entry(5, "a"), entry(5, "b"))))},
		{"FDATA/overrun", "overruns", errOf3(wire.DecodeFData(cat(u32(1), u64(1), u32(9), []byte("abcdefgh"))))},
		{"FDATA/trailing", "trailing", errOf3(wire.DecodeFData(cat(u32(1), entry(1, "a"), u8(0))))},
		{"FDATA/short entry", "an entry needs 12", errOf3(wire.DecodeFData(cat(u32(2), entry(1, "abcdefghijkl"), u64(9))))},
	} {
		if !errors.Is(tc.err, wire.ErrMalformed) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrMalformed mentioning %q", tc.name, tc.err, tc.want)
		}
	}
	// A filter over MaxFilterLen is well-formed: the server refuses it
	// with INVALID_FILTER.
	long := strings.Repeat("x", wire.MaxFilterLen+1)
	if _, f, err := wire.DecodeSubscribeFilter(cat(sub, u16(uint16(len(long))), []byte(long))); err != nil || len(f) != len(long) {
		t.Fatalf("long filter: %v", err)
	}
}

func errOf3[A, B any](_ A, _ B, err error) error { return err }

// FuzzFilterFrames: arbitrary bytes through both decoders never panic,
// fail only as malformed, and what decodes re-encodes to the same bytes.
func FuzzFilterFrames(f *testing.F) {
	f.Add(wire.AppendSubscribeFilter(nil, 3, wire.Subscribe{SubID: 7, Channel: []byte("trades")}, "payload.x > 1")[wire.HeaderLen:])
	f.Add(wire.AppendFData(nil, 7, fdataGolden())[wire.HeaderLen:])
	f.Add(cat(u32(1), u64(1), u32(0x80000001), u8(2)))
	f.Fuzz(func(t *testing.T, body []byte) {
		if s, flt, err := wire.DecodeSubscribeFilter(body); err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("SUBSCRIBE: %v", err)
			}
		} else if again := wire.AppendSubscribeFilter(nil, 0, s, string(flt))[wire.HeaderLen:]; !bytes.Equal(again, body) {
			t.Fatalf("SUBSCRIBE re-encoded % x, body % x", again, body)
		}
		n, entries, err := wire.DecodeFData(body)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("FDATA: %v", err)
			}
			return
		}
		var recs []wire.FRecord
		for pos, b, ext, rest, ok := wire.NextFEntry(entries); ok; pos, b, ext, rest, ok = wire.NextFEntry(rest) {
			recs = append(recs, wire.FRecord{Pos: pos, Body: b, Ext: ext})
		}
		if len(recs) != int(n) {
			t.Fatalf("FDATA: %d entries of %d", len(recs), n)
		}
		if again := wire.AppendFData(nil, 0, recs)[wire.HeaderLen:]; !bytes.Equal(again, body) {
			t.Fatalf("FDATA re-encoded % x, body % x", again, body)
		}
	})
}
