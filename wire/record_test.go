package wire_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

var traceHdrs = []wire.HeaderField{
	{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	{Key: "Content-Type", Value: "application/json"},
}

// extV is a decoded extended body in comparable form.
type extV struct {
	MsgID   string
	Headers []wire.HeaderField
	Payload string
}

func parseExtV(t *testing.T, body []byte) extV {
	t.Helper()
	e, err := wire.ParseExt(body, wire.TypeData)
	if err != nil {
		t.Fatalf("ParseExt(% x): %v", body, err)
	}
	return extV{string(e.MsgID), wire.AppendHeaderFields(nil, e.Headers), string(e.Payload)}
}

func TestExtRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		id   string
		hs   []wire.HeaderField
		p    string
	}{
		{"id", "order-17", nil, "payload"},
		{"headers", "", traceHdrs, `{"a":1}`},
		{"both", "x", traceHdrs, ""},
		{"empty value", "", []wire.HeaderField{{Key: "k", Value: ""}}, "p"},
		{"repeated key", "", []wire.HeaderField{{Key: "k", Value: "1"}, {Key: "k", Value: "2"}}, "p"},
		{"max id", strings.Repeat("i", wire.MaxMsgIDLen), nil, "p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := wire.CheckHeaders(tc.hs); err != nil {
				t.Fatal(err)
			}
			b := wire.AppendExt(nil, []byte(tc.id), tc.hs, []byte(tc.p))
			if len(b) != wire.ExtLen([]byte(tc.id), tc.hs, len(tc.p)) {
				t.Fatalf("ExtLen %d, encoded %d", wire.ExtLen([]byte(tc.id), tc.hs, len(tc.p)), len(b))
			}
			got := parseExtV(t, b)
			want := extV{tc.id, tc.hs, tc.p}
			if len(tc.hs) == 0 {
				want.Headers = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
			}
			e, _ := wire.ParseExt(b, wire.TypeData)
			if err := wire.CheckHeaderBlock(e.Headers); err != nil {
				t.Fatal(err)
			}
			// Through a PUBLISH frame.
			f := wire.AppendPublishExt(nil, 9, wire.FlagAck, "ch", []byte(tc.id), tc.hs, []byte(tc.p))
			h, body, _, err := wire.Split(f, 1<<20)
			if err != nil || h.Flags != wire.FlagAck|wire.FlagExt {
				t.Fatalf("Split: %v flags %v", err, h.Flags)
			}
			ch, rest, err := wire.DecodePublish(body)
			if err != nil || string(ch) != "ch" || !bytes.Equal(rest, b) {
				t.Fatalf("DecodePublish: %q % x %v", ch, rest, err)
			}
		})
	}
	// Without id and headers AppendPublishExt is AppendPublish.
	if a, b := wire.AppendPublishExt(nil, 1, 0, "c", nil, nil, []byte("p")), wire.AppendPublish(nil, 1, 0, "c", []byte("p")); !bytes.Equal(a, b) {
		t.Fatalf("plain publish differs: % x vs % x", a, b)
	}
}

func TestParseExtMalformed(t *testing.T) {
	entry := func(k string, v string) []byte {
		return append(append(append(u8(uint8(len(k))), k...), u16(uint16(len(v)))...), v...)
	}
	many := []byte{}
	for range wire.MaxHeaders + 1 {
		many = append(many, entry("k", "")...)
	}
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "ext flags"},
		{"no flags", u8(0), "without a message id or headers"},
		{"undefined flag", u8(0x04), "undefined bits"},
		{"id length 0", cat(u8(1), u8(0)), "empty message id"},
		{"id overruns", cat(u8(1), u8(5), str("ab")), "message id"},
		{"headers length 0", cat(u8(2), u16(0)), "headers length 0"},
		{"headers over limit", cat(u8(2), u16(wire.MaxHeadersLen+1)), "headers length 8193"},
		{"header block overruns", cat(u8(2), u16(10), entry("k", "v")), "header block"},
		{"entry overruns block", cat(u8(2), u16(5), entry("k", "vv")), "overruns the header block"},
		{"value length overruns", cat(u8(2), u16(4), u8(1), str("k"), u16(9)), "overruns the header block"},
		{"empty key", cat(u8(2), u16(3), u8(0), u16(0)), "empty key"},
		{"too many headers", cat(u8(2), u16(uint16(len(many))), many), "more than 64 headers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.ParseExt(tc.body, wire.TypePublish)
			if !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "PUBLISH") {
				t.Fatalf("ParseExt(% x) = %v, want malformed naming PUBLISH and %q", tc.body, err, tc.want)
			}
			// The same body as a DATA record is a malformed DATA frame.
			run := wire.AppendRecordExt(nil, tc.body, true)
			d := cat(u64(1), u32(1), run)
			if _, _, _, err := wire.DecodeData(d); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("DecodeData with that record: %v", err)
			}
			if _, ok := wire.StripRun(nil, run); ok {
				t.Fatal("StripRun accepted it")
			}
		})
	}
}

func TestCheckHeaders(t *testing.T) {
	many := make([]wire.HeaderField, wire.MaxHeaders+1)
	for i := range many {
		many[i] = wire.HeaderField{Key: "k"}
	}
	big := []wire.HeaderField{{Key: "k", Value: strings.Repeat("v", wire.MaxHeadersLen)}}
	cases := []struct {
		name string
		hs   []wire.HeaderField
		ok   bool
	}{
		{"none", nil, true},
		{"trace", traceHdrs, true},
		{"tab in value", []wire.HeaderField{{Key: "k", Value: "a\tb"}}, true},
		{"utf-8 value", []wire.HeaderField{{Key: "k", Value: "grüße"}}, true},
		{"token chars", []wire.HeaderField{{Key: "a!#$%&'*+-.^_`|~9", Value: "v"}}, true},
		{"64 headers", many[:wire.MaxHeaders], true},
		{"65 headers", many, false},
		{"block too big", big, false},
		{"empty key", []wire.HeaderField{{Key: "", Value: "v"}}, false},
		{"key too long", []wire.HeaderField{{Key: strings.Repeat("k", 256)}}, false},
		{"key with =", []wire.HeaderField{{Key: "a=b"}}, false},
		{"key with colon", []wire.HeaderField{{Key: "a:b"}}, false},
		{"key with space", []wire.HeaderField{{Key: "a b"}}, false},
		{"key non-ascii", []wire.HeaderField{{Key: "ü"}}, false},
		{"newline in value", []wire.HeaderField{{Key: "k", Value: "a\nb"}}, false},
		{"DEL in value", []wire.HeaderField{{Key: "k", Value: "a\x7f"}}, false},
		{"invalid utf-8", []wire.HeaderField{{Key: "k", Value: "\xff"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := wire.CheckHeaders(tc.hs)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, wire.ErrInvalidHeaders)) {
				t.Fatalf("CheckHeaders = %v, want ok=%v", err, tc.ok)
			}
			if len(tc.hs) == 0 || len(tc.hs) > wire.MaxHeaders || wire.HeadersLen(tc.hs) > wire.MaxHeadersLen ||
				len(tc.hs[0].Key) == 0 || len(tc.hs[0].Key) > 255 {
				return
			}
			// The block form is judged the same way.
			e, perr := wire.ParseExt(wire.AppendExt(nil, nil, tc.hs, nil), wire.TypePublish)
			if perr != nil {
				t.Fatal(perr)
			}
			if err := wire.CheckHeaderBlock(e.Headers); (err == nil) != tc.ok {
				t.Fatalf("CheckHeaderBlock = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if wire.CheckMsgID(nil) == nil || wire.CheckMsgID(make([]byte, 256)) == nil || wire.CheckMsgID([]byte{0}) != nil {
		t.Fatal("CheckMsgID bounds")
	}
}

// mixedRun is a run of a plain record, an extended one and a plain one.
func mixedRun() []byte {
	run := wire.AppendRecord(nil, []byte("a"))
	run = wire.AppendRecordExt(run, wire.AppendExt(nil, []byte("id1"), traceHdrs[1:], []byte("bc")), true)
	return wire.AppendRecord(run, []byte(""))
}

func TestDataWithExtendedRecords(t *testing.T) {
	run := mixedRun()
	body := cat(u64(1001), u32(3), run)
	first, count, recs, err := wire.DecodeData(body)
	if err != nil || first != 1001 || count != 3 {
		t.Fatalf("DecodeData: %d %d %v", first, count, err)
	}
	// NextRecord yields payloads only; NextRecordExt keeps the bodies.
	var payloads []string
	for p, rest, ok := wire.NextRecord(recs); ok; p, rest, ok = wire.NextRecord(rest) {
		payloads = append(payloads, string(p))
	}
	if !reflect.DeepEqual(payloads, []string{"a", "bc", ""}) {
		t.Fatalf("payloads %q", payloads)
	}
	var exts []bool
	var got []extV
	for b, ext, rest, ok := wire.NextRecordExt(recs); ok; b, ext, rest, ok = wire.NextRecordExt(rest) {
		exts = append(exts, ext)
		if ext {
			got = append(got, parseExtV(t, b))
		}
	}
	if !reflect.DeepEqual(exts, []bool{false, true, false}) ||
		!reflect.DeepEqual(got, []extV{{"id1", traceHdrs[1:], "bc"}}) {
		t.Fatalf("exts %v got %+v", exts, got)
	}
	// Stripped for a client without FeatureHeaders: plain records only.
	n, hasExt, ok := wire.StrippedLen(run)
	stripped, ok2 := wire.StripRun(nil, run)
	want := wire.AppendRecord(wire.AppendRecord(wire.AppendRecord(nil, []byte("a")), []byte("bc")), nil)
	if !ok || !ok2 || !hasExt || n != len(want) || !bytes.Equal(stripped, want) {
		t.Fatalf("StripRun % x (len %d, ext %v), want % x", stripped, n, hasExt, want)
	}
	// A plain run strips to itself.
	if n, hasExt, ok := wire.StrippedLen(want); !ok || hasExt || n != len(want) {
		t.Fatal("plain run")
	}
	// Node frames carry extended records and check them.
	app := wire.AppendNodeAppendHeader(nil, 1, wire.NodeAppend{Streamlet: 5, Epoch: 6, Count: 3}, len(run))
	app = append(app, run...)
	if _, r, err := wire.DecodeNodeAppend(app[wire.HeaderLen:]); err != nil || !bytes.Equal(r, run) {
		t.Fatalf("DecodeNodeAppend: %v", err)
	}
	bad := wire.AppendRecordExt(nil, []byte{0x09}, true)
	app = wire.AppendNodeAppendHeader(nil, 1, wire.NodeAppend{Streamlet: 5, Epoch: 6, Count: 1}, len(bad))
	if _, _, err := wire.DecodeNodeAppend(append(app, bad...)[wire.HeaderLen:]); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("NODE_APPEND with a bad extended record: %v", err)
	}
}

// TestGoldenExt checks the annotated vectors of testdata/ext against the
// encoders, both directions.
func TestGoldenExt(t *testing.T) {
	pub := wire.AppendPublishExt(nil, 42, wire.FlagAck, "orders", []byte("o-17"),
		[]wire.HeaderField{{Key: "ct", Value: "json"}}, []byte("{}"))
	data := wire.AppendDataHeader(nil, 7, 1001, 2, len(mixedGoldenRun()))
	data = append(data, mixedGoldenRun()...)
	hello := wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: wire.FeatureHeaders, Name: "go"})
	welcome := wire.Welcome{Version: 1, Features: wire.FeatureHeaders, MaxPayload: 1 << 20, MaxBody: 1<<20 + 256,
		MaxSubs: 1024, LimitMsgs: 5000, LimitSize: 2 << 20, LimitLife: 4 * time.Second, TTL: time.Minute,
		PingInterval: 5 * time.Second, ServerName: "a", Nodes: []string{"127.0.0.1:4222"},
		DedupWindow: time.Minute, DedupIDs: 100_000}
	for name, frame := range map[string][]byte{"publish_ext": pub, "data_ext": data, "hello_headers": hello,
		"welcome_headers": wire.AppendWelcome(nil, 1, welcome)} {
		t.Run(name, func(t *testing.T) {
			golden := readHex(t, filepath.Join("testdata", "ext", name+".hex"))
			if !bytes.Equal(frame, golden) {
				t.Fatalf("encoded\n% x\ngolden\n% x", frame, golden)
			}
			h, body, _, err := wire.Split(golden, testMaxBody)
			if err != nil {
				t.Fatal(err)
			}
			switch h.Type {
			case wire.TypePublish:
				ch, rest, err := wire.DecodePublish(body)
				if err != nil || string(ch) != "orders" || h.Flags != wire.FlagAck|wire.FlagExt {
					t.Fatal(err)
				}
				if got := parseExtV(t, rest); !reflect.DeepEqual(got, extV{"o-17", []wire.HeaderField{{Key: "ct", Value: "json"}}, "{}"}) {
					t.Fatalf("%+v", got)
				}
			case wire.TypeData:
				if _, _, _, err := wire.DecodeData(body); err != nil {
					t.Fatal(err)
				}
			case wire.TypeHello:
				v, err := wire.DecodeHello(body)
				if err != nil || v.Features != wire.FeatureHeaders {
					t.Fatal(err)
				}
			case wire.TypeWelcome:
				w, err := wire.DecodeWelcome(body)
				if err != nil || !reflect.DeepEqual(w, welcome) {
					t.Fatalf("%+v %v", w, err)
				}
				// Without FeatureHeaders the fields are not sent, and a
				// server that does not send them leaves them 0.
				plain := welcome
				plain.Features = 0
				enc := wire.AppendWelcome(nil, 1, plain)
				if len(enc) != len(golden)-8 {
					t.Fatalf("WELCOME without headers is %d bytes, want %d", len(enc), len(golden)-8)
				}
				old, err := wire.DecodeWelcome(golden[wire.HeaderLen : len(golden)-8])
				if err != nil || old.DedupWindow != 0 || old.DedupIDs != 0 {
					t.Fatalf("a WELCOME without the fields: %+v %v", old, err)
				}
			}
		})
	}
}

// mixedGoldenRun: "a" plain, then "b" with message id "m1" and header ct=x.
func mixedGoldenRun() []byte {
	run := wire.AppendRecord(nil, []byte("a"))
	return wire.AppendRecordExt(run, wire.AppendExt(nil, []byte("m1"), []wire.HeaderField{{Key: "ct", Value: "x"}}, []byte("b")), true)
}

// FuzzExt feeds arbitrary bytes to ParseExt, as a PUBLISH extension and as
// a DATA record. Whatever ParseExt accepts re-encodes to the same bytes
// (the layout has one encoding), and StripRun agrees with StrippedLen.
func FuzzExt(f *testing.F) {
	f.Add(wire.AppendExt(nil, []byte("id"), traceHdrs, []byte("p")))
	f.Add(wire.AppendExt(nil, nil, traceHdrs[:1], nil))
	f.Add(wire.AppendExt(nil, []byte("x"), nil, []byte("payload")))
	f.Add([]byte{0x02, 0x00, 0x03, 0x00, 0x00, 0x00})
	f.Add([]byte{0x03, 0x01, 'i', 0x00, 0x05, 0x01, 'k', 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := wire.ParseExt(b, wire.TypePublish)
		run := wire.AppendRecordExt(nil, b, true)
		_, _, _, derr := wire.DecodeData(cat(u64(1), u32(1), run))
		if (err == nil) != (derr == nil) {
			t.Fatalf("ParseExt %v but DecodeData %v", err, derr)
		}
		n, _, okLen := wire.StrippedLen(run)
		stripped, okStrip := wire.StripRun(nil, run)
		if okLen != (err == nil) || okStrip != (err == nil) {
			t.Fatalf("StrippedLen %v StripRun %v ParseExt %v", okLen, okStrip, err)
		}
		ce, malformed, invalid := wire.ParseExtChecked(b, wire.TypePublish)
		if (malformed == nil) != (err == nil) || err == nil && (!reflect.DeepEqual(ce, e) ||
			(invalid == nil) != (wire.CheckHeaderBlock(e.Headers) == nil)) {
			t.Fatalf("ParseExtChecked %v %v, ParseExt %v", malformed, invalid, err)
		}
		if invalid != nil && !errors.Is(invalid, wire.ErrInvalidHeaders) {
			t.Fatalf("invalid headers error %v", invalid)
		}
		if id := wire.ExtMsgIDOf(b); len(id) > len(b) || err == nil && !bytes.Equal(id, e.MsgID) {
			t.Fatalf("ExtMsgIDOf %q, ParseExt %q", id, e.MsgID)
		}
		if err != nil {
			return
		}
		if n != len(stripped) || !bytes.Equal(stripped, wire.AppendRecord(nil, e.Payload)) {
			t.Fatalf("stripped % x (len %d)", stripped, n)
		}
		hs := wire.AppendHeaderFields(nil, e.Headers)
		if len(e.Headers) > 0 && len(hs) == 0 {
			t.Fatal("header block without entries")
		}
		again := wire.AppendExt(nil, e.MsgID, hs, e.Payload)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded\n% x\ninput\n% x", again, b)
		}
		if (wire.CheckHeaderBlock(e.Headers) == nil) != (wire.CheckHeaders(hs) == nil) {
			t.Fatalf("block and fields judged differently: %+v", hs)
		}
	})
}

// BenchmarkHeaderChecks: what a publish with a W3C traceparent and a
// content type costs to check, on the client (CheckHeaders, fields) and
// on the server (ParseExt then CheckHeaderBlock), and what the host reads
// (ExtMsgIDOf against a second ParseExt).
func BenchmarkHeaderChecks(b *testing.B) {
	hs := []wire.HeaderField{
		{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{Key: "content-type", Value: "application/json"},
	}
	body := wire.AppendExt(nil, []byte("order-0000000017"), hs, make([]byte, 128))
	b.Run("CheckHeaders", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := wire.CheckHeaders(hs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseExt+CheckHeaderBlock", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := wire.ParseExt(body, wire.TypePublish)
			if err != nil || wire.CheckHeaderBlock(e.Headers) != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseExtChecked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, malformed, invalid := wire.ParseExtChecked(body, wire.TypePublish); malformed != nil || invalid != nil {
				b.Fatal(malformed, invalid)
			}
		}
	})
	b.Run("host/ParseExt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if e, err := wire.ParseExt(body, wire.TypePublish); err != nil || len(e.MsgID) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("host/ExtMsgIDOf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(wire.ExtMsgIDOf(body)) == 0 {
				b.Fatal("no id")
			}
		}
	})
}
