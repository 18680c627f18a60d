package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// Comparable views of the presence frames (decoded values alias bodies).
type (
	memberV struct {
		ClientID, Node string
		Conn           uint64
		Info           string
	}
	presenceQ  struct{ Channel string }
	presenceSt struct {
		Occ     wire.Occupancy
		Members []memberV
	}
	changeV struct {
		Kind wire.PresenceKind
		M    memberV
	}
	syncItemV struct {
		Kind     uint8
		Channel  string
		Counts   wire.Occupancy
		ClientID string
		Conn     uint64
		Info     string
	}
	syncV struct {
		P     wire.PresenceSync
		Items []syncItemV
	}
)

func viewMember(m wire.Member) memberV {
	return memberV{string(m.ClientID), string(m.Node), m.Conn, string(m.Info)}
}

// decodePresence decodes a presence frame (or a PRESENCE_SYNC request
// body, given as type NODE_REQUEST) into a comparable value.
func decodePresence(h wire.Header, body []byte) (any, error) {
	switch h.Type {
	case wire.TypePresence:
		ch, err := wire.DecodePresence(body)
		return presenceQ{string(ch)}, err
	case wire.TypePresenceState:
		o, ms, err := wire.DecodePresenceState(body, nil)
		v := presenceSt{Occ: o}
		for _, m := range ms {
			v.Members = append(v.Members, viewMember(m))
		}
		return v, err
	case wire.TypePresenceEvent:
		cs, err := wire.DecodePresenceEvent(body, nil)
		var v []changeV
		for _, c := range cs {
			v = append(v, changeV{c.Kind, viewMember(c.Member)})
		}
		return v, err
	case wire.TypeOccupancy:
		return wire.DecodeOccupancy(body)
	case wire.TypeNodeRequest:
		op, ob, err := wire.DecodeNodeRequest(body)
		if err != nil {
			return nil, err
		}
		if op != wire.OpPresenceSync {
			return nil, fmt.Errorf("op %d", op)
		}
		p, items, err := wire.DecodePresenceSync(ob, nil)
		v := syncV{P: p}
		for _, it := range items {
			v.Items = append(v.Items, syncItemV{it.Kind, string(it.Channel), it.Counts, string(it.ClientID), it.Conn, string(it.Info)})
		}
		return v, err
	case wire.TypeNodeResponse:
		st, res, _, err := wire.DecodeNodeResponse(body)
		if err != nil || st != wire.NodeOK {
			return nil, fmt.Errorf("status %d: %v", st, err)
		}
		st, inc, err := wire.DecodeSyncResult(res)
		return [2]uint64{uint64(st), inc}, err
	}
	return decodeAny(h, body)
}

var (
	alice = wire.Member{ClientID: []byte("alice"), Node: []byte("a"), Conn: 7, Info: []byte(`{"n":"Al"}`)}
	anon  = wire.Member{Node: []byte("b"), Conn: 12}
	bob   = wire.Member{ClientID: []byte("bob"), Node: []byte("b"), Conn: 3}
)

func syncGolden() []byte {
	var items []byte
	items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncCounts, Channel: []byte("room.1"), Counts: wire.Occupancy{Subscribers: 2, Publishers: 1, Members: 1}})
	items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncJoin, Channel: []byte("room.1"), ClientID: []byte("alice"), Conn: 7, Info: []byte("hi")})
	items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncLeave, Channel: []byte("room.1"), ClientID: []byte("bob"), Conn: 3})
	body := wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: 0x1122334455667788, Seq: 1, Flags: wire.SyncBegin | wire.SyncEnd, Count: 3}, items)
	return wire.AppendNodeRequest(nil, 5, wire.OpPresenceSync, body)
}

func presenceCases() []struct {
	name  string
	frame []byte
	want  msg
} {
	hdr := func(n int, t wire.Type, f wire.Flags, id uint32) wire.Header {
		return wire.Header{Len: uint32(n), Type: t, Flags: f, ID: id}
	}
	occ := wire.Occupancy{Subscribers: 1200, Publishers: 3, Members: 150}
	return []struct {
		name  string
		frame []byte
		want  msg
	}{
		{"presence", wire.AppendPresence(nil, 9, 0, "room.1"), msg{hdr(7, wire.TypePresence, 0, 9), presenceQ{"room.1"}}},
		{"presence_counts", wire.AppendPresence(nil, 10, wire.FlagCountsOnly, "room.1"),
			msg{hdr(7, wire.TypePresence, wire.FlagCountsOnly, 10), presenceQ{"room.1"}}},
		{"presence_state", wire.AppendPresenceState(nil, 9, 0, wire.Occupancy{Subscribers: 3, Publishers: 1, Members: 2}, []wire.Member{alice, anon}),
			msg{hdr(55, wire.TypePresenceState, 0, 9), presenceSt{wire.Occupancy{Subscribers: 3, Publishers: 1, Members: 2}, []memberV{viewMember(alice), viewMember(anon)}}}},
		{"presence_event", wire.AppendPresenceEvent(nil, 4, []wire.PresenceChange{{Kind: wire.PresenceJoin, Member: alice}, {Kind: wire.PresenceLeave, Member: bob}}),
			msg{hdr(48, wire.TypePresenceEvent, 0, 4), []changeV{{wire.PresenceJoin, viewMember(alice)}, {wire.PresenceLeave, viewMember(bob)}}}},
		{"occupancy", wire.AppendOccupancy(nil, 4, wire.FlagEventsPaused, occ), msg{hdr(12, wire.TypeOccupancy, wire.FlagEventsPaused, 4), occ}},
		{"subscribe_presence", wire.AppendSubscribeFlags(nil, 11, wire.SubscribePresenceFlags, wire.Subscribe{SubID: 4, Channel: []byte("room.1")}),
			msg{hdr(28, wire.TypeSubscribe, wire.SubscribePresenceFlags, 11), subscribeV{4, wire.StartLive, 0, 0, "room.1"}}},
		{"hello_presence", wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: wire.FeaturePresence, Name: "web"}),
			msg{hdr(14, wire.TypeHello, 0, 1), helloV{1, 1, wire.FeaturePresence, "web", ""}}},
		{"sync", syncGolden(), msg{hdr(88, wire.TypeNodeRequest, 0, 5), syncV{
			wire.PresenceSync{Incarnation: 0x1122334455667788, Seq: 1, Flags: wire.SyncBegin | wire.SyncEnd, Count: 3},
			[]syncItemV{{Kind: wire.SyncCounts, Channel: "room.1", Counts: wire.Occupancy{Subscribers: 2, Publishers: 1, Members: 1}},
				{Kind: wire.SyncJoin, Channel: "room.1", ClientID: "alice", Conn: 7, Info: "hi"},
				{Kind: wire.SyncLeave, Channel: "room.1", ClientID: "bob", Conn: 3}}}}},
		{"sync_result", wire.AppendNodeResponse(nil, 5, wire.NodeOK, wire.AppendSyncResult(nil, wire.SyncResync, 0x99aabbccddeeff00), ""),
			msg{hdr(10, wire.TypeNodeResponse, 0, 5), [2]uint64{uint64(wire.SyncResync), 0x99aabbccddeeff00}}},
	}
}

// TestPresenceGolden checks every presence frame against its annotated
// vector in testdata/presence both ways: encode == golden, decode(golden)
// == value; and that every vector there has a case.
func TestPresenceGolden(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range presenceCases() {
		names[tc.name+".hex"] = true
		t.Run(tc.name, func(t *testing.T) {
			golden := readHex(t, filepath.Join("testdata", "presence", tc.name+".hex"))
			if !bytes.Equal(tc.frame, golden) {
				t.Fatalf("encoded\n% x\ngolden\n% x", tc.frame, golden)
			}
			h, body, n, err := wire.Split(golden, testMaxBody)
			if err != nil || n != len(golden) {
				t.Fatalf("Split(golden): n=%d err=%v", n, err)
			}
			v, err := decodePresence(h, body)
			if err != nil || !reflect.DeepEqual(msg{h, v}, tc.want) {
				t.Fatalf("decode(golden) = %#v, %v\nwant %#v", msg{h, v}, err, tc.want)
			}
		})
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "presence", "*.hex"))
	for _, f := range files {
		if !names[filepath.Base(f)] {
			t.Errorf("golden file %s has no test case", f)
		}
	}
	for _, ty := range []wire.Type{wire.TypePresence, wire.TypePresenceState, wire.TypePresenceEvent, wire.TypeOccupancy} {
		if !ty.Known() || strings.HasPrefix(ty.String(), "Type(") {
			t.Errorf("%v is not a known, named type", ty)
		}
	}
	if wire.Type(0x16).Known() {
		t.Error("0x16 is reserved, not a frame")
	}
}

// TestPresenceMalformed: every malformed presence body is an error that
// wraps ErrMalformed and names what is wrong.
func TestPresenceMalformed(t *testing.T) {
	m := func(clientID string, node string, info int) []byte {
		return cat(u8(uint8(len(clientID))), str(clientID), u8(uint8(len(node))), str(node), u64(1), u16(uint16(info)), make([]byte, info))
	}
	occ := cat(u32(1), u32(2), u32(3))
	cases := []struct {
		name string
		t    wire.Type
		body []byte
		want string
	}{
		{"PRESENCE/empty channel", wire.TypePresence, u8(0), "empty channel"},
		{"PRESENCE/short channel", wire.TypePresence, cat(u8(5), str("ab")), "channel at offset 1 needs 5"},
		{"PRESENCE/trailing", wire.TypePresence, cat(u8(1), str("ab")), "1 trailing bytes"},
		{"STATE/short counts", wire.TypePresenceState, u32(1), "publishers"},
		{"STATE/count too large", wire.TypePresenceState, cat(occ, u16(2), m("", "a", 0)), "2 members cannot fit"},
		{"STATE/empty node", wire.TypePresenceState, cat(occ, u16(1), m("x", "", 1)), "empty node name"},
		{"STATE/info too long", wire.TypePresenceState, cat(occ, u16(1), u8(0), u8(1), str("a"), u64(1), u16(4097), make([]byte, 4097)), "client info length 4097"},
		{"STATE/info past end", wire.TypePresenceState, cat(occ, u16(1), u8(0), u8(1), str("a"), u64(1), u16(9), str("abc")), "info at offset"},
		{"STATE/trailing", wire.TypePresenceState, cat(occ, u16(1), m("a", "b", 0), u8(0)), "1 trailing bytes"},
		{"EVENT/count 0", wire.TypePresenceEvent, u16(0), "change count 0"},
		{"EVENT/undefined kind", wire.TypePresenceEvent, cat(u16(1), u8(3), m("a", "b", 0)), "kind 3 undefined"},
		{"EVENT/count too large", wire.TypePresenceEvent, cat(u16(3), u8(1), m("a", "b", 0)), "3 changes cannot fit"},
		{"EVENT/trailing", wire.TypePresenceEvent, cat(u16(1), u8(2), m("a", "b", 0), u8(7)), "1 trailing bytes"},
		{"OCCUPANCY/short", wire.TypeOccupancy, cat(u32(1), u32(2)), "members"},
		{"OCCUPANCY/long", wire.TypeOccupancy, cat(occ, u8(0)), "1 trailing bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodePresence(wire.Header{Type: tc.t, Len: uint32(len(tc.body))}, tc.body)
			if !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMalformed mentioning %q", err, tc.want)
			}
		})
	}
}

// TestPresenceSyncBadBodies: a PRESENCE_SYNC op body that breaks its
// layout is an error (the receiver answers BAD_OP); the NODE_REQUEST
// itself with op 32 is well formed, and an op between the roles' last and
// 32, or after the last service op, is not.
func TestPresenceSyncBadBodies(t *testing.T) {
	pre := func(flags uint8, count uint32) []byte { return cat(u64(1), u64(2), u8(flags), u32(count)) }
	join := func(ch string, info int) []byte {
		return cat(u8(wire.SyncJoin), u8(uint8(len(ch))), str(ch), u8(0), u64(1), u16(uint16(info)), make([]byte, info))
	}
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"short prefix", cat(u64(1), u64(2)), "flags"},
		{"undefined flags", pre(0x08, 0), "undefined flags 0x08"},
		{"count too large", cat(pre(0, 2), join("c", 0)), "2 items cannot fit"},
		{"kind 0", cat(pre(0, 1), u8(0), u8(1), str("c"), occupancyBytes()), "kind 0 undefined"},
		{"kind 4", cat(pre(0, 1), u8(4), u8(1), str("c"), occupancyBytes()), "kind 4 undefined"},
		{"empty channel", cat(pre(0, 1), u8(wire.SyncCounts), u8(0), occupancyBytes(), u8(0)), "empty channel"},
		{"info too long", cat(pre(0, 1), join("c", 4097)), "client info length 4097"},
		{"trailing", cat(pre(0, 1), join("c", 0), u8(1)), "1 trailing bytes"},
		{"missing items", cat(pre(0, 2), join("c", 9), u8(wire.SyncLeave)), "channelLen"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, items, err := wire.DecodePresenceSync(tc.body, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || len(items) != 0 {
				t.Fatalf("err = %v (%d items), want one mentioning %q and no items", err, len(items), tc.want)
			}
		})
	}
	for _, op := range []wire.NodeOp{wire.OpInterest + 1, wire.OpServiceFirst - 1, wire.OpPresenceSync + 1} {
		if _, _, err := wire.DecodeNodeRequest(cat(u8(uint8(op)))); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("op %d: err = %v, want malformed", op, err)
		}
	}
	if op, _, err := wire.DecodeNodeRequest(cat(u8(uint8(wire.OpPresenceSync)), pre(0, 0))); err != nil || op != wire.OpPresenceSync {
		t.Errorf("op 32: %v %v", op, err)
	}
	for _, b := range [][]byte{nil, u8(0), cat(u8(2), u64(1)), cat(u8(0), u64(1), u8(0))} {
		if _, _, err := wire.DecodeSyncResult(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("result % x: err = %v, want malformed", b, err)
		}
	}
}

func occupancyBytes() []byte { return cat(u32(1), u32(2), u32(3)) }

// FuzzPresence: (1) every presence decoder, given any body, returns
// either values or an error wrapping ErrMalformed, never panics, and
// never hands out a slice reaching past the body; (2) frames built from
// fuzzer-chosen values decode to those values (decode(encode(x)) == x).
func FuzzPresence(f *testing.F) {
	for _, tc := range presenceCases() {
		f.Add(uint8(0), tc.frame[wire.HeaderLen:])
	}
	f.Add(uint8(4), []byte{3, 'a', 'b', 'c', 0, 0, 0, 7})
	f.Fuzz(func(t *testing.T, sel uint8, b []byte) {
		types := []wire.Type{wire.TypePresence, wire.TypePresenceState, wire.TypePresenceEvent, wire.TypeOccupancy}
		for _, ty := range types {
			if _, err := decodePresence(wire.Header{Type: ty, Len: uint32(len(b))}, b); err != nil && !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("%v: error %v does not wrap ErrMalformed", ty, err)
			}
		}
		if _, items, err := wire.DecodePresenceSync(b, nil); err == nil {
			for _, it := range items {
				if len(it.Channel) == 0 || len(it.Info) > wire.MaxClientInfoLen {
					t.Fatalf("accepted item %+v", it)
				}
			}
		} else if !errors.Is(err, wire.ErrMalformed) {
			t.Fatalf("sync: error %v does not wrap ErrMalformed", err)
		}
		roundTripPresence(t, sel, &take{b})
	})
}

// roundTripPresence builds one presence frame (or sync push) from
// fuzzer bytes and checks that it decodes to what was encoded.
func roundTripPresence(t *testing.T, sel uint8, tk *take) {
	member := func() wire.Member {
		return wire.Member{ClientID: tk.n(int(tk.u8())), Node: tk.channel(), Conn: tk.u64(), Info: tk.n(int(tk.u16() % (wire.MaxClientInfoLen + 1)))}
	}
	id := tk.u32()
	var frame []byte
	var want any
	switch sel % 5 {
	case 0:
		ch := tk.channel()
		frame, want = wire.AppendPresence(nil, id, wire.Flags(tk.u8()), string(ch)), presenceQ{string(ch)}
	case 1:
		o := wire.Occupancy{Subscribers: tk.u32(), Publishers: tk.u32(), Members: tk.u32()}
		v := presenceSt{Occ: o}
		var ms []wire.Member
		for range tk.u8() % 6 {
			m := member()
			ms, v.Members = append(ms, m), append(v.Members, viewMember(m))
		}
		frame, want = wire.AppendPresenceState(nil, id, wire.Flags(tk.u8()), o, ms), v
	case 2:
		var cs []wire.PresenceChange
		var v []changeV
		for range 1 + tk.u8()%6 {
			c := wire.PresenceChange{Kind: wire.PresenceKind(1 + tk.u8()%2), Member: member()}
			cs, v = append(cs, c), append(v, changeV{c.Kind, viewMember(c.Member)})
		}
		frame, want = wire.AppendPresenceEvent(nil, id, cs), v
	case 3:
		o := wire.Occupancy{Subscribers: tk.u32(), Publishers: tk.u32(), Members: tk.u32()}
		frame, want = wire.AppendOccupancy(nil, id, wire.Flags(tk.u8()), o), o
	default:
		p := wire.PresenceSync{Incarnation: tk.u64(), Seq: tk.u64(), Flags: tk.u8() % 8}
		v := syncV{}
		var items []byte
		for range tk.u8() % 8 {
			it := wire.SyncItem{Kind: 1 + tk.u8()%3, Channel: tk.channel()}
			switch it.Kind {
			case wire.SyncCounts:
				it.Counts = wire.Occupancy{Subscribers: tk.u32(), Publishers: tk.u32(), Members: tk.u32()}
			case wire.SyncJoin:
				it.ClientID, it.Conn, it.Info = tk.n(int(tk.u8())), tk.u64(), tk.n(int(tk.u16()%(wire.MaxClientInfoLen+1)))
			default:
				it.ClientID, it.Conn = tk.n(int(tk.u8())), tk.u64()
			}
			if n := wire.SyncItemLen(&it); len(wire.AppendSyncItem(nil, &it)) != n {
				t.Fatalf("SyncItemLen %d, encoded %d", n, len(wire.AppendSyncItem(nil, &it)))
			}
			items = wire.AppendSyncItem(items, &it)
			p.Count++
			v.Items = append(v.Items, syncItemV{it.Kind, string(it.Channel), it.Counts, string(it.ClientID), it.Conn, string(it.Info)})
		}
		v.P = p
		frame, want = wire.AppendNodeRequest(nil, id, wire.OpPresenceSync, wire.AppendPresenceSync(nil, p, items)), v
	}
	h, body, n, err := wire.Split(frame, 1<<30)
	if err != nil || n != len(frame) {
		t.Fatalf("Split: %v", err)
	}
	got, err := decodePresence(h, body)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decode(encode(x)) = %#v, %v\nwant %#v", got, err, want)
	}
}
