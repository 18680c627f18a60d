package wire_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

const testMaxBody = 1 << 20

// validCase is one well-formed frame with its expected decoding. The golden
// vectors in testdata/ are these frames, byte for byte.
type validCase struct {
	name  string // also the golden file name: testdata/<name>.hex
	frame []byte
	want  msg
}

func hdr(t wire.Type, f wire.Flags, id uint32, n int) wire.Header {
	return wire.Header{Len: uint32(n), Type: t, Flags: f, ID: id}
}

func validCases() []validCase {
	welcome := wire.Welcome{
		Version: 1, Features: wire.FeatureS2, MaxPayload: 1 << 20, MaxBody: wire.MaxBodyFor(1 << 20),
		MaxSubs: 1024, LimitMsgs: 5000, LimitSize: 2 << 20, LimitLife: 4 * time.Second,
		TTL: 60 * time.Second, PingInterval: 30 * time.Second, ServerName: "node-a",
		Nodes: []string{"10.0.0.1:4222", "10.0.0.2:4222"},
	}
	sub := wire.Subscribe{SubID: 7, Start: wire.StartPosition, Arg: 1001, Epoch: 0x1122334455667788, Channel: []byte("prices.eu")}
	return []validCase{
		{"hello", wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "sdk-go", Token: []byte("s3cret")}),
			msg{hdr(wire.TypeHello, 0, 1, 23), helloV{1, 1, 0, "sdk-go", "s3cret"}}},
		{"hello_empty", wire.AppendHello(nil, 9, wire.Hello{MinVersion: 1, MaxVersion: 3, Features: wire.FeatureS2}),
			msg{hdr(wire.TypeHello, 0, 9, 11), helloV{1, 3, wire.FeatureS2, "", ""}}},
		{"welcome", wire.AppendWelcome(nil, 1, welcome),
			msg{hdr(wire.TypeWelcome, 0, 1, 73), welcome}},
		{"publish", wire.AppendPublish(nil, 42, wire.FlagAck, "prices.eu", []byte("hello")),
			msg{hdr(wire.TypePublish, wire.FlagAck, 42, 15), publishMsg{"prices.eu", "hello"}}},
		{"publish_empty", wire.AppendPublish(nil, 43, 0, "x", nil),
			msg{hdr(wire.TypePublish, 0, 43, 2), publishMsg{"x", ""}}},
		{"puback", wire.AppendPubAck(nil, []wire.Ack{{ID: 42, Position: 1000}, {ID: 44, Position: 1001}}),
			msg{hdr(wire.TypePubAck, 0, 0, 26), []wire.Ack{{ID: 42, Position: 1000}, {ID: 44, Position: 1001}}}},
		{"subscribe", wire.AppendSubscribe(nil, 5, sub),
			msg{hdr(wire.TypeSubscribe, 0, 5, 31), subscribeV{7, wire.StartPosition, 1001, 0x1122334455667788, "prices.eu"}}},
		{"subscribed", wire.AppendSubscribed(nil, 5, wire.Subscribed{SubID: 7, First: 1001, Earliest: 900, Next: 1010, Epoch: 0x1122334455667788}),
			msg{hdr(wire.TypeSubscribed, 0, 5, 36), wire.Subscribed{SubID: 7, First: 1001, Earliest: 900, Next: 1010, Epoch: 0x1122334455667788}}},
		// A resume as clients send it: positions count from 1 within an
		// epoch, and an epoch is about its incarnation's creation time in
		// milliseconds (both far below 2^53, which the TypeScript SDK
		// needs; subscribe and subscribed show any u64 travels).
		{"subscribe_resume", wire.AppendSubscribe(nil, 8, wire.Subscribe{SubID: 3, Start: wire.StartPosition, Arg: 43, Epoch: 1764633600000, Channel: []byte("chat")}),
			msg{hdr(wire.TypeSubscribe, 0, 8, 26), subscribeV{3, wire.StartPosition, 43, 1764633600000, "chat"}}},
		{"subscribed_resume", wire.AppendSubscribed(nil, 8, wire.Subscribed{SubID: 3, First: 43, Earliest: 1, Next: 57, Epoch: 1764633600000}),
			msg{hdr(wire.TypeSubscribed, 0, 8, 36), wire.Subscribed{SubID: 3, First: 43, Earliest: 1, Next: 57, Epoch: 1764633600000}}},
		{"unsubscribe", wire.AppendUnsubscribe(nil, 6, 7),
			msg{hdr(wire.TypeUnsubscribe, 0, 6, 4), unsubMsg(7)}},
		{"data", wire.AppendData(nil, 7, 1001, []byte("a"), []byte("bc"), []byte{}),
			msg{hdr(wire.TypeData, 0, 7, 27), dataMsg{1001, []string{"a", "bc", ""}}}},
		{"gap", wire.AppendGap(nil, 7, wire.Gap{From: 901, To: 1000, Reason: wire.GapExpired}),
			msg{hdr(wire.TypeGap, 0, 7, 17), wire.Gap{From: 901, To: 1000, Reason: wire.GapExpired}}},
		{"ping", wire.AppendPing(nil, 77),
			msg{hdr(wire.TypePing, 0, 77, 0), pingMsg{}}},
		{"pong", wire.AppendPong(nil, 77),
			msg{hdr(wire.TypePong, 0, 77, 0), pongMsg{}}},
		{"error", wire.AppendError(nil, 42, wire.Error{Code: wire.CodeRateLimited, Retriable: true, Text: "slow down"}),
			msg{hdr(wire.TypeError, wire.FlagRetriable, 42, 13), wire.Error{Code: wire.CodeRateLimited, Retriable: true, Text: "slow down"}}},
		{"goaway", wire.AppendGoAway(nil, wire.GoAway{Code: wire.CodeShuttingDown, Text: "bye"}),
			msg{hdr(wire.TypeGoAway, 0, 0, 7), wire.GoAway{Code: wire.CodeShuttingDown, Text: "bye"}}},
		{"unsubscribed", wire.AppendUnsubscribed(nil, 6, 7),
			msg{hdr(wire.TypeUnsubscribed, 0, 6, 4), unsubdMsg(7)}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range validCases() {
		t.Run(tc.name, func(t *testing.T) {
			h, body, n, err := wire.Split(tc.frame, testMaxBody)
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if n != len(tc.frame) || int(h.Len) != len(body) || n != wire.HeaderLen+len(body) {
				t.Fatalf("Split: n=%d len(body)=%d h.Len=%d, frame is %d bytes", n, len(body), h.Len, len(tc.frame))
			}
			if cap(body) != len(body) {
				t.Errorf("body capacity %d not capped to %d", cap(body), len(body))
			}
			v, err := decodeAny(h, body)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got := (msg{h, v}); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded\n got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

// TestAppendKeepsPrefix checks the append-style contract: encoding onto a
// non-empty dst leaves its bytes alone and appends exactly the frame.
func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("prefix")
	got := wire.AppendPublish(append([]byte(nil), prefix...), 1, 0, "c", []byte("p"))
	want := append(append([]byte(nil), prefix...), wire.AppendPublish(nil, 1, 0, "c", []byte("p"))...)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}

// TestSplitStream splits a concatenation of every valid frame and checks the
// frames come back in order.
func TestSplitStream(t *testing.T) {
	var stream []byte
	cases := validCases()
	for _, tc := range cases {
		stream = append(stream, tc.frame...)
	}
	for i, tc := range cases {
		h, body, n, err := wire.Split(stream, testMaxBody)
		if err != nil {
			t.Fatalf("frame %d (%s): %v", i, tc.name, err)
		}
		v, err := decodeAny(h, body)
		if err != nil || !reflect.DeepEqual(msg{h, v}, tc.want) {
			t.Fatalf("frame %d (%s): got %#v, %v", i, tc.name, msg{h, v}, err)
		}
		stream = stream[n:]
	}
	if len(stream) != 0 {
		t.Fatalf("%d bytes left", len(stream))
	}
}

// TestSplitEveryPrefixIncomplete: every strict prefix of a valid frame is
// ErrIncomplete, returned unwrapped.
func TestSplitEveryPrefixIncomplete(t *testing.T) {
	for _, tc := range validCases() {
		for i := 0; i < len(tc.frame); i++ {
			_, body, n, err := wire.Split(tc.frame[:i], testMaxBody)
			if err != wire.ErrIncomplete || body != nil || n != 0 {
				t.Fatalf("%s: prefix of %d/%d bytes: body=%x n=%d err=%v, want ErrIncomplete", tc.name, i, len(tc.frame), body, n, err)
			}
			if errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("%s: ErrIncomplete must not be malformed", tc.name)
			}
		}
	}
}

// TestSplitChecksLimitFirst: a declared length over the limit is refused as
// soon as the header is there, before the body is buffered.
func TestSplitChecksLimitFirst(t *testing.T) {
	hdrOnly := wire.AppendHeader(nil, wire.TypePublish, 0, 1, 1<<30)
	_, _, _, err := wire.Split(hdrOnly, testMaxBody)
	if !errors.Is(err, wire.ErrTooLarge) || !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("err = %v, want ErrTooLarge wrapping ErrMalformed", err)
	}
	// Exactly at the limit is fine.
	f := wire.AppendPublish(nil, 1, 0, "c", make([]byte, 98))
	if _, _, _, err := wire.Split(f, 100); err != nil {
		t.Fatalf("body of exactly maxBody: %v", err)
	}
	if _, _, _, err := wire.Split(f, 99); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("body of maxBody+1: err = %v, want ErrTooLarge", err)
	}
	if _, err := wire.ParseHeader(hdrOnly[:wire.HeaderLen-1], testMaxBody); err != wire.ErrIncomplete {
		t.Fatalf("ParseHeader of 9 bytes: %v, want ErrIncomplete", err)
	}
}

func TestParseHeaderFields(t *testing.T) {
	b := []byte{0x00, 0x00, 0x01, 0x02, 0x7A, 0x81, 0xDE, 0xAD, 0xBE, 0xEF}
	h, err := wire.ParseHeader(b, testMaxBody)
	want := wire.Header{Len: 0x102, Type: 0x7A, Flags: 0x81, ID: 0xDEADBEEF}
	if err != nil || h != want {
		t.Fatalf("got %+v, %v; want %+v", h, err, want)
	}
	if got := wire.AppendHeader(nil, want.Type, want.Flags, want.ID, int(want.Len)); !bytes.Equal(got, b) {
		t.Fatalf("AppendHeader = %x, want %x", got, b)
	}
}

type malformedCase struct {
	name  string
	frame []byte
	want  error // ErrMalformed or ErrTooLarge
	where string
}

func malformedCases() []malformedCase {
	long := strings.Repeat("x", 300)
	sub := func(kind uint8, chLen uint8, ch string, extra ...byte) []byte {
		return raw(wire.TypeSubscribe, 0, 1, u32(7), u8(kind), u64(1), u64(0), u8(chLen), str(ch), extra)
	}
	helloHead := append(append(u16(1), u16(1)...), u32(0)...)
	welcomeFixed := raw(wire.TypeWelcome, 0, 1, make([]byte, 36))[wire.HeaderLen:]
	return []malformedCase{
		{"header/length over limit", wire.AppendHeader(nil, wire.TypeData, 0, 1, testMaxBody+1), wire.ErrTooLarge, "limit"},

		{"HELLO/empty body", raw(wire.TypeHello, 0, 1), wire.ErrMalformed, "minVersion"},
		{"HELLO/truncated features", raw(wire.TypeHello, 0, 1, u16(1), u16(1), u16(0)), wire.ErrMalformed, "features"},
		{"HELLO/name overruns body", raw(wire.TypeHello, 0, 1, helloHead, u8(10), str("abc")), wire.ErrMalformed, "name"},
		{"HELLO/missing tokenLen", raw(wire.TypeHello, 0, 1, helloHead, u8(0)), wire.ErrMalformed, "tokenLen"},
		{"HELLO/token overruns body", raw(wire.TypeHello, 0, 1, helloHead, u8(0), u16(5), str("ab")), wire.ErrMalformed, "token"},

		{"WELCOME/truncated fixed part", raw(wire.TypeWelcome, 0, 1, make([]byte, 20)), wire.ErrMalformed, "limitSize at offset 20"},
		{"WELCOME/server name overruns", raw(wire.TypeWelcome, 0, 1, welcomeFixed, u8(9), str("ab")), wire.ErrMalformed, "serverName"},
		{"WELCOME/missing nodeCount", raw(wire.TypeWelcome, 0, 1, welcomeFixed, u8(0)), wire.ErrMalformed, "nodeCount"},
		{"WELCOME/node count over body", raw(wire.TypeWelcome, 0, 1, welcomeFixed, u8(0), u16(65535), u8(1), str("a")), wire.ErrMalformed, "node list"},
		{"WELCOME/node overruns", raw(wire.TypeWelcome, 0, 1, welcomeFixed, u8(0), u16(2), u8(1), str("a"), u8(20), str("b")), wire.ErrMalformed, "node address"},

		{"PUBLISH/empty body", raw(wire.TypePublish, 0, 1), wire.ErrMalformed, "channelLen"},
		{"PUBLISH/channel length 0", raw(wire.TypePublish, 0, 1, u8(0), str("payload")), wire.ErrMalformed, "empty channel"},
		{"PUBLISH/channel length over body", raw(wire.TypePublish, 0, 1, u8(10), str("abc")), wire.ErrMalformed, "channel length 10 exceeds body"},

		{"PUBACK/empty body", raw(wire.TypePubAck, 0, 0), wire.ErrMalformed, "count"},
		{"PUBACK/count 0", raw(wire.TypePubAck, 0, 0, u16(0)), wire.ErrMalformed, "count 0"},
		{"PUBACK/count 0 with acks", raw(wire.TypePubAck, 0, 0, u16(0), u32(1), u64(1)), wire.ErrMalformed, "count 0"},
		{"PUBACK/count over acks", raw(wire.TypePubAck, 0, 0, u16(2), u32(1), u64(1)), wire.ErrMalformed, "want 26"},
		{"PUBACK/count under acks", raw(wire.TypePubAck, 0, 0, u16(1), u32(1), u64(1), u32(2), u64(2)), wire.ErrMalformed, "want 14"},
		{"PUBACK/partial ack", raw(wire.TypePubAck, 0, 0, u16(1), u32(1), u32(1)), wire.ErrMalformed, "want 14"},

		{"SUBSCRIBE/truncated", raw(wire.TypeSubscribe, 0, 1, u32(7), u8(0), u64(0)), wire.ErrMalformed, "epoch"},
		{"SUBSCRIBE/start kind 5", sub(5, 1, "c"), wire.ErrMalformed, "start kind 5"},
		{"SUBSCRIBE/start kind 255", sub(255, 1, "c"), wire.ErrMalformed, "start kind 255"},
		{"SUBSCRIBE/channel length 0", sub(0, 0, ""), wire.ErrMalformed, "empty channel"},
		{"SUBSCRIBE/channel overruns", sub(0, 5, "abc"), wire.ErrMalformed, "channel"},
		{"SUBSCRIBE/trailing byte", sub(0, 1, "c", 0), wire.ErrMalformed, "trailing"},

		{"SUBSCRIBED/truncated", raw(wire.TypeSubscribed, 0, 1, make([]byte, 35)), wire.ErrMalformed, "epoch"},

		{"UNSUBSCRIBE/short", raw(wire.TypeUnsubscribe, 0, 1, make([]byte, 3)), wire.ErrMalformed, "subID"},
		{"UNSUBSCRIBE/trailing", raw(wire.TypeUnsubscribe, 0, 1, make([]byte, 5)), wire.ErrMalformed, "trailing"},
		{"UNSUBSCRIBED/short", raw(wire.TypeUnsubscribed, 0, 1), wire.ErrMalformed, "subID"},
		{"UNSUBSCRIBED/trailing", raw(wire.TypeUnsubscribed, 0, 1, make([]byte, 6)), wire.ErrMalformed, "trailing"},

		{"DATA/short prefix", raw(wire.TypeData, 0, 7, u64(1), u16(1)), wire.ErrMalformed, "count"},
		{"DATA/count 0", raw(wire.TypeData, 0, 7, u64(1), u32(0)), wire.ErrMalformed, "count 0"},
		{"DATA/count 0 with records", raw(wire.TypeData, 0, 7, u64(1), u32(0), u32(1), str("a")), wire.ErrMalformed, "count 0"},
		{"DATA/count cannot fit", raw(wire.TypeData, 0, 7, u64(1), u32(1<<31), u32(0)), wire.ErrMalformed, "cannot fit"},
		{"DATA/record overruns body", raw(wire.TypeData, 0, 7, u64(1), u32(1), u32(9), str("abc")), wire.ErrMalformed, "overruns"},
		{"DATA/record huge length", raw(wire.TypeData, 0, 7, u64(1), u32(1), u32(math.MaxUint32), str("abc")), wire.ErrMalformed, "overruns"},
		{"DATA/fewer records than count", raw(wire.TypeData, 0, 7, u64(1), u32(2), u32(1), str("a"), u8(0), u8(0), u8(0)), wire.ErrMalformed, "record 1 of 2"},
		{"DATA/trailing after records", raw(wire.TypeData, 0, 7, u64(1), u32(1), u32(1), str("a"), u8(0)), wire.ErrMalformed, "trailing"},
		{"DATA/positions overflow", raw(wire.TypeData, 0, 7, u64(math.MaxUint64), u32(2), u32(0), u32(0)), wire.ErrMalformed, "overflow"},

		{"GAP/truncated", raw(wire.TypeGap, 0, 7, u64(1), u64(2)), wire.ErrMalformed, "reason"},
		{"GAP/trailing", raw(wire.TypeGap, 0, 7, u64(1), u64(2), u8(1), u8(0)), wire.ErrMalformed, "trailing"},
		{"GAP/from after to", raw(wire.TypeGap, 0, 7, u64(3), u64(2), u8(1)), wire.ErrMalformed, "from 3 > to 2"},
		{"GAP/reason 0", raw(wire.TypeGap, 0, 7, u64(1), u64(2), u8(0)), wire.ErrMalformed, "reason 0"},
		{"GAP/reason 4", raw(wire.TypeGap, 0, 7, u64(1), u64(2), u8(4)), wire.ErrMalformed, "reason 4"},

		{"PING/non-empty body", raw(wire.TypePing, 0, 1, u8(0)), wire.ErrMalformed, "trailing"},
		{"PONG/non-empty body", raw(wire.TypePong, 0, 1, u8(0)), wire.ErrMalformed, "trailing"},

		{"ERROR/truncated", raw(wire.TypeError, 0, 1, u16(1)), wire.ErrMalformed, "textLen"},
		{"ERROR/text overruns", raw(wire.TypeError, 0, 1, u16(1), u16(5), str("ab")), wire.ErrMalformed, "text"},
		{"ERROR/trailing", raw(wire.TypeError, 0, 1, u16(1), u16(1), str("ab")), wire.ErrMalformed, "trailing"},
		{"GOAWAY/truncated", raw(wire.TypeGoAway, 0, 0, u8(0)), wire.ErrMalformed, "code"},
		{"GOAWAY/text overruns", raw(wire.TypeGoAway, 0, 0, u16(15), u16(uint16(len(long))), str("ab")), wire.ErrMalformed, "text"},
		{"GOAWAY/trailing", raw(wire.TypeGoAway, 0, 0, u16(15), u16(0), u8(1)), wire.ErrMalformed, "trailing"},
	}
}

// TestMalformed: each malformed class is refused with an error that wraps the
// right sentinel, names the frame type, and says what is wrong.
func TestMalformed(t *testing.T) {
	for _, tc := range malformedCases() {
		t.Run(tc.name, func(t *testing.T) {
			h, body, _, err := wire.Split(tc.frame, testMaxBody)
			if err == nil {
				_, err = decodeAny(h, body)
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err == wire.ErrIncomplete || errors.Is(err, wire.ErrIncomplete) {
				t.Fatalf("malformed input reported as incomplete")
			}
			if tc.want != wire.ErrTooLarge && errors.Is(err, wire.ErrTooLarge) {
				t.Fatalf("err = %v wraps ErrTooLarge", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, h.Type.String()) || !strings.Contains(msg, tc.where) {
				t.Fatalf("error %q should name %v and %q", msg, h.Type, tc.where)
			}
		})
	}
}

// TestTrailingBytesIgnored: HELLO, WELCOME and SUBSCRIBED may grow within v1;
// an old decoder ignores appended fields.
func TestTrailingBytesIgnored(t *testing.T) {
	for _, tc := range validCases() {
		switch tc.want.H.Type {
		case wire.TypeHello, wire.TypeWelcome, wire.TypeSubscribed:
		default:
			continue
		}
		f := append([]byte(nil), tc.frame...)
		f = append(f, 0xAA, 0xBB, 0xCC)
		f[3] += 3 // body length (all test bodies are < 253 bytes)
		h, body, _, err := wire.Split(f, testMaxBody)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		v, err := decodeAny(h, body)
		if err != nil || !reflect.DeepEqual(v, tc.want.V) {
			t.Fatalf("%s with trailing bytes: got %#v, %v; want %#v", tc.name, v, err, tc.want.V)
		}
	}
}

func TestDecodePublishCapsSlices(t *testing.T) {
	f := wire.AppendPublish(nil, 1, 0, "ch", []byte("payload"))
	_, body, _, _ := wire.Split(f, testMaxBody)
	ch, p, err := wire.DecodePublish(body)
	if err != nil {
		t.Fatal(err)
	}
	if cap(ch) != len(ch) || cap(p) != len(p) {
		t.Fatalf("cap(channel)=%d len=%d, cap(payload)=%d len=%d", cap(ch), len(ch), cap(p), len(p))
	}
	_ = append(ch, 'X') // must not overwrite the payload
	if string(p) != "payload" {
		t.Fatalf("payload overwritten: %q", p)
	}
}

// TestDataHeaderSharesRun: a DATA frame built from AppendDataHeader plus a run
// of AppendRecord records is byte for byte AppendData, and the same run can
// follow different subscribers' headers.
func TestDataHeaderSharesRun(t *testing.T) {
	var run []byte
	payloads := [][]byte{[]byte("one"), []byte(""), []byte("three")}
	for _, p := range payloads {
		run = wire.AppendRecord(run, p)
	}
	for _, subID := range []uint32{1, 99} {
		f := append(wire.AppendDataHeader(nil, subID, 500, 3, len(run)), run...)
		if want := wire.AppendData(nil, subID, 500, payloads...); !bytes.Equal(f, want) {
			t.Fatalf("sub %d: %x != %x", subID, f, want)
		}
		h, body, _, err := wire.Split(f, testMaxBody)
		if err != nil || h.ID != subID {
			t.Fatalf("sub %d: h=%+v err=%v", subID, h, err)
		}
		first, count, records, err := wire.DecodeData(body)
		if err != nil || first != 500 || count != 3 || !bytes.Equal(records, run) {
			t.Fatalf("sub %d: first=%d count=%d err=%v", subID, first, count, err)
		}
	}
}

func TestNextRecordRejectsBrokenRun(t *testing.T) {
	for _, run := range [][]byte{nil, {0, 0, 0}, {0, 0, 0, 5, 'a'}} {
		if p, rest, ok := wire.NextRecord(run); ok || p != nil || !bytes.Equal(rest, run) {
			t.Fatalf("NextRecord(%x) = %x, %x, %v", run, p, rest, ok)
		}
	}
}

func TestPubAckAppendsToDst(t *testing.T) {
	f := wire.AppendPubAck(nil, []wire.Ack{{ID: 3, Position: 30}})
	_, body, _, _ := wire.Split(f, testMaxBody)
	dst := []wire.Ack{{ID: 1, Position: 10}}
	got, err := wire.DecodePubAck(body, dst)
	if err != nil || !reflect.DeepEqual(got, []wire.Ack{{1, 10}, {3, 30}}) {
		t.Fatalf("got %v, %v", got, err)
	}
	bad := raw(wire.TypePubAck, 0, 0, u16(2), u32(1), u64(1))
	got, err = wire.DecodePubAck(bad[wire.HeaderLen:], dst[:1])
	if err == nil || len(got) != 1 {
		t.Fatalf("malformed PUBACK appended: %v, %v", got, err)
	}
}

func TestWelcomeDurations(t *testing.T) {
	w := wire.Welcome{LimitLife: 1500*time.Microsecond + 3*time.Second, TTL: -time.Second, PingInterval: 100 * 24 * time.Hour}
	f := wire.AppendWelcome(nil, 1, w)
	got, err := wire.DecodeWelcome(f[wire.HeaderLen:])
	if err != nil {
		t.Fatal(err)
	}
	if got.LimitLife != 3001*time.Millisecond || got.TTL != 0 || got.PingInterval != math.MaxUint32*time.Millisecond {
		t.Fatalf("LimitLife=%v TTL=%v PingInterval=%v", got.LimitLife, got.TTL, got.PingInterval)
	}
}

func TestEncoderPanicsOnUnrepresentable(t *testing.T) {
	long := strings.Repeat("c", 256)
	cases := map[string]func(){
		"publish channel":   func() { wire.AppendPublish(nil, 1, 0, long, nil) },
		"subscribe channel": func() { wire.AppendSubscribe(nil, 1, wire.Subscribe{Channel: []byte(long)}) },
		"hello name":        func() { wire.AppendHello(nil, 1, wire.Hello{Name: long}) },
		"hello token":       func() { wire.AppendHello(nil, 1, wire.Hello{Token: make([]byte, 1<<16)}) },
		"welcome name":      func() { wire.AppendWelcome(nil, 1, wire.Welcome{ServerName: long}) },
		"welcome node":      func() { wire.AppendWelcome(nil, 1, wire.Welcome{Nodes: []string{long}}) },
		"welcome nodes":     func() { wire.AppendWelcome(nil, 1, wire.Welcome{Nodes: make([]string, 1<<16)}) },
		"puback count":      func() { wire.AppendPubAck(nil, make([]wire.Ack, 1<<16)) },
		"error text":        func() { wire.AppendError(nil, 1, wire.Error{Text: strings.Repeat("t", 1<<16)}) },
		"goaway text":       func() { wire.AppendGoAway(nil, wire.GoAway{Text: strings.Repeat("t", 1<<16)}) },
		"negative length":   func() { wire.AppendHeader(nil, wire.TypePing, 0, 1, -1) },
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			fn()
		})
	}
	// The largest representable values encode fine.
	max := strings.Repeat("c", 255)
	if _, _, _, err := wire.Split(wire.AppendPublish(nil, 1, 0, max, nil), testMaxBody); err != nil {
		t.Fatal(err)
	}
}

func TestMaxBodyFor(t *testing.T) {
	for _, tc := range []struct{ in, want uint32 }{
		{0, wire.MinMaxBody},
		{1024, wire.MinMaxBody},
		{wire.MinMaxBody - 256, wire.MinMaxBody},
		{wire.MinMaxBody, wire.MinMaxBody + 256},
		{1 << 20, 1<<20 + 256},
		{math.MaxUint32 - 100, math.MaxUint32},
	} {
		if got := wire.MaxBodyFor(tc.in); got != tc.want {
			t.Errorf("MaxBodyFor(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
	// A PUBLISH of maxPayload on the longest channel fits, as does the
	// largest HELLO.
	const payload = 100000
	f := wire.AppendPublish(nil, 1, 0, strings.Repeat("c", 255), make([]byte, payload))
	if _, _, _, err := wire.Split(f, wire.MaxBodyFor(payload)); err != nil {
		t.Fatal(err)
	}
	hello := wire.AppendHello(nil, 1, wire.Hello{Name: strings.Repeat("n", 255), Token: make([]byte, wire.MaxTokenLen)})
	if _, _, _, err := wire.Split(hello, wire.MaxBodyFor(0)); err != nil {
		t.Fatal(err)
	}
}

func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		cmin, cmax, smin, smax, want uint16
		ok                           bool
	}{
		{1, 1, 1, 1, 1, true},
		{1, 3, 1, 2, 2, true},
		{2, 5, 1, 3, 3, true},
		{1, 1, 2, 3, 0, false},
		{4, 5, 1, 3, 0, false},
		{3, 1, 1, 3, 0, false}, // inverted client range overlaps nothing
	} {
		got, ok := wire.Negotiate(tc.cmin, tc.cmax, tc.smin, tc.smax)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Negotiate(%d,%d,%d,%d) = %d,%v want %d,%v", tc.cmin, tc.cmax, tc.smin, tc.smax, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCodes(t *testing.T) {
	type info struct {
		name             string
		fatal, retriable bool
	}
	want := map[wire.Code]info{
		1: {"PROTOCOL_ERROR", true, false}, 2: {"UNKNOWN_TYPE", true, false}, 3: {"FRAME_TOO_LARGE", true, false},
		4: {"UNSUPPORTED_VERSION", true, false}, 5: {"HELLO_REQUIRED", true, false}, 6: {"INVALID_CHANNEL", false, false},
		7: {"PAYLOAD_TOO_LARGE", false, false}, 8: {"TOO_MANY_SUBSCRIPTIONS", false, false}, 9: {"SUBSCRIPTION_EXISTS", false, false},
		10: {"UNKNOWN_SUBSCRIPTION", false, false}, 11: {"TOO_MANY_CONNECTIONS", true, false}, 12: {"UNAUTHENTICATED", true, false},
		13: {"FORBIDDEN", false, false}, 14: {"SLOW_CONSUMER", true, false}, 15: {"SHUTTING_DOWN", true, true},
		16: {"UNAVAILABLE", false, true}, 17: {"RATE_LIMITED", false, true}, 18: {"INVALID_START", false, false},
		19: {"HANDSHAKE_TIMEOUT", true, false}, 20: {"IDLE_TIMEOUT", true, false}, 21: {"INTERNAL", false, true},
		22: {"INVALID_HEADERS", false, false}, 23: {"OUTCOME_UNKNOWN", false, false},
		24: {"TOKEN_EXPIRED", true, false}, 25: {"INVALID_FILTER", false, false},
		0: {"Code(0)", false, false}, 26: {"Code(26)", false, false}, 65535: {"Code(65535)", false, false},
	}
	for c, w := range want {
		if c.String() != w.name || c.Fatal() != w.fatal || c.Retriable() != w.retriable {
			t.Errorf("Code %d: %q fatal=%v retriable=%v, want %+v", uint16(c), c.String(), c.Fatal(), c.Retriable(), w)
		}
	}
	if wire.CodeInternal != 21 || wire.CodeTooManySubscriptions != 8 {
		t.Fatal("code constants moved")
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{wire.TypeHello.String(), "HELLO"},
		{wire.TypePubAck.String(), "PUBACK"},
		{wire.TypeUnsubscribed.String(), "UNSUBSCRIBED"},
		{wire.Type(0).String(), "Type(0x00)"},
		{wire.Type(0x4B).String(), "Type(0x4B)"},
		{wire.StartLive.String(), "live"},
		{wire.StartSince.String(), "since"},
		{wire.StartKind(5).String(), "StartKind(5)"},
		{wire.GapExpired.String(), "expired"},
		{wire.GapSlow.String(), "slow"},
		{wire.GapLost.String(), "lost"},
		{wire.GapReason(0).String(), "GapReason(0)"},
		{wire.Error{Code: wire.CodeForbidden, Text: "no"}.Error(), "sluice: FORBIDDEN: no"},
		{wire.Error{Code: wire.CodeInternal}.Error(), "sluice: INTERNAL"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if wire.Type(0x3F).Known() || !wire.TypeData.Known() || !wire.TypeFData.Known() || wire.Type(0).Known() {
		t.Fatal("Known")
	}
}

func TestErrorFlag(t *testing.T) {
	for _, retriable := range []bool{false, true} {
		f := wire.AppendError(nil, 3, wire.Error{Code: wire.CodeInternal, Retriable: retriable})
		h, body, _, _ := wire.Split(f, testMaxBody)
		if (h.Flags&wire.FlagRetriable != 0) != retriable {
			t.Fatalf("flags %x for retriable=%v", h.Flags, retriable)
		}
		e, err := wire.DecodeError(h, body)
		if err != nil || e.Retriable != retriable {
			t.Fatalf("decoded %+v, %v", e, err)
		}
	}
}

func TestValidChannel(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"empty", "", false},
		{"one byte", "a", true},
		{"dotted", "prices.eu-west/1:x_y", true},
		{"255 bytes", strings.Repeat("a", 255), true},
		{"256 bytes", strings.Repeat("a", 256), false},
		{"255 bytes unicode", strings.Repeat("é", 127) + "a", true},
		{"space", "a b", false},
		{"leading space", " a", false},
		{"tab", "a\tb", false},
		{"newline", "a\n", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7Fb", false},
		{"C1 control", "a\u0085b", false},
		{"no-break space", "a\u00A0b", false},
		{"ideographic space", "a\u3000b", false},
		{"invalid UTF-8", "a\xffb", false},
		{"truncated UTF-8", "a\xc3", false},
		{"surrogate half", "a\xed\xa0\x80", false},
		{"valid unicode", "цены.日本.🚀", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := wire.ValidChannel([]byte(tc.in))
			if (err == nil) != tc.ok {
				t.Fatalf("ValidChannel(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, wire.ErrInvalidChannel) {
				t.Fatalf("error %v does not wrap ErrInvalidChannel", err)
			}
			if err != nil && errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("an invalid channel is not a malformed frame")
			}
			if err2 := wire.ValidChannelString(tc.in); (err2 == nil) != tc.ok {
				t.Fatalf("ValidChannelString(%q) = %v", tc.in, err2)
			}
		})
	}
}

// TestZeroAllocs states the allocation contract of the hot paths.
func TestZeroAllocs(t *testing.T) {
	payload := make([]byte, 128)
	pub := wire.AppendPublish(nil, 1, wire.FlagAck, "prices.eu", payload)
	data := wire.AppendData(nil, 7, 100, payload, payload, payload)
	buf := make([]byte, 0, 4096)
	ch := []byte("prices.eu")
	for name, fn := range map[string]func(){
		"AppendPublish": func() { buf = wire.AppendPublish(buf[:0], 1, wire.FlagAck, "prices.eu", payload) },
		"AppendData":    func() { buf = wire.AppendData(buf[:0], 7, 100, payload, payload) },
		"Split+DecodePublish": func() {
			_, body, _, err := wire.Split(pub, testMaxBody)
			if _, _, err2 := wire.DecodePublish(body); err != nil || err2 != nil {
				t.Fatal(err, err2)
			}
		},
		"DecodeData+NextRecord": func() {
			_, _, recs, _ := wire.DecodeData(data[wire.HeaderLen:])
			for ok := true; ok; {
				_, recs, ok = wire.NextRecord(recs)
			}
		},
		"ValidChannel": func() {
			if wire.ValidChannel(ch) != nil {
				t.Fatal("invalid")
			}
		},
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", name, n)
		}
	}
}
